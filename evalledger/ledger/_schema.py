"""The ledger's schema and its migrations.

Each migration is one step of ``MIGRATIONS`` and ends by writing its number as
``meta.schema_version``. Opening an older ledger applies the missing steps;
opening a ledger whose version is above ``SCHEMA_VERSION`` is refused, because
this program cannot know what a newer one meant by its tables.

Columns beyond SPEC §6: none. Indexes beyond the UNIQUE ``event_id``:

- ``events_by_run_type (run_id, type, seq)``: "events of run R of types T in seq
  order" is one range scan per type, already sorted; projections read only the
  types they fold, so a summary never touches the ``task.output`` rows.
- ``events_by_run_task (run_id, task_key, seq)``: "events of task K of run R".

Triggers make ``events`` append-only: UPDATE and DELETE abort with
``events are append-only``. Someone can still drop a trigger; the hash chain is
what makes such an edit visible to ``verify``.
"""

from __future__ import annotations

import uuid

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from ._events import utc_now

SCHEMA_VERSION = 1
APPEND_ONLY_MESSAGE = "events are append-only"
TRIGGERS = ("events_no_update", "events_no_delete")

MIGRATIONS = Migrations("evalledger")


def _set_version(db: Database, version: int) -> None:
    db.execute(
        "INSERT INTO meta(key, value) VALUES ('schema_version', ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        [str(version)],
    )


@MIGRATIONS(name="0001_events")
def _m0001_events(db: Database) -> None:
    # One execute per statement: executescript() would COMMIT the migration's
    # transaction half-way.
    for statement in (
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        """CREATE TABLE events (
            seq       INTEGER PRIMARY KEY,
            event_id  TEXT NOT NULL UNIQUE,
            run_id    TEXT NOT NULL,
            task_key  TEXT,
            type      TEXT NOT NULL,
            ts        TEXT NOT NULL,
            payload   TEXT NOT NULL,
            hash      TEXT NOT NULL
        )""",
        "CREATE INDEX events_by_run_type ON events (run_id, type, seq)",
        "CREATE INDEX events_by_run_task ON events (run_id, task_key, seq)",
        *(
            f"CREATE TRIGGER events_no_{verb.lower()} BEFORE {verb} ON events "
            f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY_MESSAGE}'); END"
            for verb in ("UPDATE", "DELETE")
        ),
    ):
        db.execute(statement)
    db.execute(
        "INSERT INTO meta(key, value) VALUES ('ledger_id', ?), ('created_at', ?)",
        [str(uuid.uuid4()), utc_now()],
    )
    _set_version(db, 1)
