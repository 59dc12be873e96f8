"""The ledger's audit interface described: its views and table, what each holds, their
columns (``evalledger sql --help``; docs/ledger.md, "SQL views")."""

from __future__ import annotations

import sqlite3

# What each table and view of the audit interface holds, for `sql --help`; the columns
# come from the schema itself (``schema_columns``), so the help cannot fall behind it.
ABOUT = {
    "runs": "one row per run",
    "task_attempts": "one row per task.started, with that attempt's completion",
    "task_results": "per run and task key, the latest attempt with a final status",
    "usage": "one row per task.usage, with the attempt it was reported in",
    "task_grades": "one row per task.graded: a regrade's verdict of an attempt",
    "task_flags": "one row per task.flagged: a scan's finding on an attempt",
    "run_pass_rates": "one row per run: its pass rate and 95% Wilson interval",
    "model_pass_rates": "per run and model: the pass rate and 95% Wilson interval",
    "events": "the table: every event, in seq order",
}


def schema_columns() -> dict[str, tuple[str, list[str]]]:
    """Every view and the events table of a ledger of this version, with what it holds
    and its columns, in the schema's order: an empty ledger made in memory by the
    migrations themselves (the audit interface ``sql --help`` describes)."""
    from evalledger.ledger import MIGRATIONS, Database

    conn = sqlite3.connect(":memory:")
    try:
        MIGRATIONS.apply(Database(conn))
        names = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'view' OR name = 'events'")]
        known = list(ABOUT)
        names.sort(key=lambda n: known.index(n) if n in known else len(known))
        return {name: (ABOUT.get(name, ""),
                       [r[1] for r in conn.execute(f"PRAGMA table_info({name})")])
                for name in names}
    finally:
        conn.close()
