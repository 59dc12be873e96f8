"""The layers point one way: SQL over ``events`` lives in the ledger package alone.

The ledger's named queries (``evalledger/ledger/_queries.py``) are the one read side
over the table; everyone else asks them. SQL over ``events`` elsewhere, or a
``json_extract`` of a payload, reads NULL silently the day a payload field is renamed,
so this test fails when one appears in any module outside ``evalledger/ledger/``.
"""

from __future__ import annotations

import re
from pathlib import Path

import evalledger

PACKAGE = Path(evalledger.__file__).parent
# SQL naming the table (``FROM events``, ``JOIN events``: keywords in capitals, as all
# SQL here is written, so prose "made from events" is not SQL) or reading a payload's
# fields.
SQL_OVER_EVENTS = re.compile(
    r"\b(?:FROM|JOIN)\s+events\b|(?i:json_(?:extract|each|tree))\(\s*(?:\w+\.)?payload")


def offenders() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("ledger/"):
            continue
        text = path.read_text(encoding="utf-8")
        lines = [f"{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
                 for m in SQL_OVER_EVENTS.finditer(text)]
        if lines:
            found[relative] = lines
    return found


def test_no_sql_over_events_outside_the_ledger() -> None:
    found = offenders()
    assert not found, (
        "SQL over `events` outside evalledger/ledger/ (ask a named query of "
        f"evalledger/ledger/_queries.py instead): {found}")


def test_the_pattern_finds_what_it_is_for() -> None:
    for sql in ("SELECT 1 FROM events WHERE run_id = ?", "SELECT x FROM\n  events e",
                "LEFT JOIN events c ON c.seq = 1", "json_extract(payload, '$.host')",
                "json_extract(s.payload, '$.attempt')", "json_each(e.payload, '$.planned')"):
        assert SQL_OVER_EVENTS.search(sql), sql
    for prose in ("folds made from events", "SELECT * FROM runs", "FROM events_run_level",
                  "json_extract in SQLite, not a decode"):
        assert not SQL_OVER_EVENTS.search(prose), prose
