"""Append throughput: ``Ledger.append`` against raw ``sqlite3.executemany``.

Both write the same rows into the same schema (same indexes, same triggers, WAL,
synchronous=NORMAL), in batches of the same size, in this process, now. The raw
side gets its rows ready-made: no validation, no canonical JSON, no hashing, no
duplicate check. The ledger side gets typed events and does all of that.

Run: python bench/append.py [--events N] [--batch N] [--rounds N]
Prints events/s for each and ledger/raw (target: >= 0.5). Not part of the tests.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from evalledger.ledger import Ledger, TaskOutput, TaskUsage
from evalledger.ledger._events import encode_payload


def make_events(n: int, run_id: str) -> list:
    events = []
    for i in range(n):
        key = f"default/task-{i // 100:05d}/00"
        if i % 10 == 9:
            events.append(TaskUsage(run_id=run_id, task_key=key, model="m", input_tokens=i,
                                    output_tokens=2 * i, cost_usd=0.001))
        else:
            events.append(TaskOutput(run_id=run_id, task_key=key, line=f"line {i} of output",
                                     n=i))
    return events


def bench_ledger(path: Path, events: list, batch: int) -> float:
    ledger = Ledger(path)
    start = time.perf_counter()
    for i in range(0, len(events), batch):
        ledger.append(events[i : i + batch])
    elapsed = time.perf_counter() - start
    ledger.close()
    return len(events) / elapsed


def bench_raw(path: Path, events: list, batch: int) -> float:
    Ledger(path).close()  # the same schema, created by the same migration
    rows = [
        (e.event_id, e.run_id, e.task_key, e.type, e.ts, encode_payload(e), "0" * 64)
        for e in events
    ]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous = NORMAL")
    start = time.perf_counter()
    for i in range(0, len(rows), batch):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO events (event_id, run_id, task_key, type, ts, payload, hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows[i : i + batch],
        )
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return len(rows) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ledger_rates, raw_rates = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            # Fresh events per round: the ledger would (correctly) skip repeats.
            events = make_events(args.events, run_id=f"bench-{r}")
            # Alternate the order so neither side always gets the warmer cache.
            pair = [("ledger", bench_ledger), ("raw", bench_raw)]
            for name, fn in pair if r % 2 == 0 else reversed(pair):
                rate = fn(Path(tmp) / f"{name}-{r}.db", events, args.batch)
                (ledger_rates if name == "ledger" else raw_rates).append(rate)
    ledger_rate, raw_rate = statistics.median(ledger_rates), statistics.median(raw_rates)
    print(f"events: {args.events} per round, batch {args.batch}, rounds {args.rounds} (median)")
    print(f"raw sqlite3.executemany: {raw_rate:12,.0f} events/s")
    print(f"Ledger.append:           {ledger_rate:12,.0f} events/s")
    print(f"ratio ledger/raw:        {ledger_rate / raw_rate:12.2f}  (target >= 0.5)")


if __name__ == "__main__":
    main()
