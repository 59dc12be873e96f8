"""Events of one run, built by hand for projection tests, the folds over them, and a
ledger file as an older program left it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from evalledger.ledger import (
    AnyEvent,
    EventRow,
    Ledger,
    TaskCompleted,
    TaskInterrupted,
    TaskStarted,
    TaskUsage,
    TokenCounts,
)
from evalledger.ledger._chain import GENESIS, chain_rows
from evalledger.ledger._events import encode_payload
from evalledger.ledger._rows import text_hash, text_id
from evalledger.ledger._schema import MIGRATIONS
from evalledger.projections import RunSummary, SummaryFold, fold
from evalledger.statuses import FinalStatus

RUN = "run-1"
ENV = {"evalledger": "0.1.0", "platform": "Linux-6.1-x86_64", "python": "3.11.9"}


def key(i: int) -> str:
    return f"default/t{i}/00"


def started(k: str, attempt: int = 1, run_id: str = RUN, **fields: Any) -> TaskStarted:
    fields.setdefault("tags", ["smoke"])
    return TaskStarted(run_id=run_id, task_key=k, task_id=k.split("/")[1], attempt=attempt,
                       **fields)


def completed(
    k: str, status: FinalStatus = FinalStatus.SUCCESS, attempt: int = 1, run_id: str = RUN,
    **fields: Any,
) -> TaskCompleted:
    fields.setdefault("environment_info", {**ENV, "exit_code": 0})
    return TaskCompleted(
        run_id=run_id, task_key=k, attempt=attempt, final_status=status,
        category=status.category, **fields,
    )


def usage(k: str, cost: float | None, run_id: str = RUN, **tokens: int) -> TaskUsage:
    return TaskUsage(run_id=run_id, task_key=k, cost_usd=cost, model="m-1", **tokens)


def interrupted(k: str, run_id: str = RUN) -> TaskInterrupted:
    return TaskInterrupted(run_id=run_id, task_key=k, reason="cancelled")


def summarize(events: list[AnyEvent], run_id: str = RUN, *, count_infra: bool = False
              ) -> RunSummary:
    """The summary folded live, event by event."""
    return fold(SummaryFold(run_id), events).summary(count_infra=count_infra)


def rebuilt(ledger: Ledger, run_id: str = RUN) -> RunSummary:
    """The summary rebuilt from the ledger, reading only the types the fold needs."""
    return fold(SummaryFold(run_id), ledger.events(run_id, types=SummaryFold.TYPES)).summary()


def as_before_0_2(event: AnyEvent) -> str:
    """The payload as versions before 0.2 wrote it: a completion's zero tokens and null
    error message spelled out."""
    payload = encode_payload(event)
    if not isinstance(event, TaskCompleted):
        return payload
    value = {"error_message": None, "tokens": TokenCounts().model_dump(), **json.loads(payload)}
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def old_ledger(path: Path, events: list[AnyEvent], stop_before: str) -> str:
    """A ledger file as an older program left it: migrations up to ``stop_before``."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    db = Database(conn)
    MIGRATIONS.apply(db, stop_before=stop_before)
    rows = [EventRow(e.event_id, e.run_id, e.task_key, e.type, e.ts, as_before_0_2(e))
            for e in events]
    # Ids and hashes as text, as schemas before 14 stored them.
    conn.executemany(
        "INSERT INTO events (seq, event_id, run_id, task_key, type, ts, payload, hash) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [(seq, text_id(event_id), *rest, text_hash(hash_))
         for seq, event_id, *rest, hash_ in chain_rows(GENESIS, 1, rows)],
    )
    version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    conn.close()
    return version[0]
