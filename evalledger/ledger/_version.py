"""The ledger schema this evalledger writes (``_schema`` holds the migrations to it)."""

SCHEMA_VERSION = 17
