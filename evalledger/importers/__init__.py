"""Bringing history in from elsewhere: the old harness's run folders (``legacy``,
docs/import.md). An importer reads files someone else made (``evalledger._files``) and
turns them into events; the application layer appends them."""
