"""What the fault campaign (bench/campaign.py) needs the library for, as a child process.

The campaign drives the CLI and reads ledgers with plain SQLite; it never imports
``evalledger`` itself, so that its children all run the code under test and a bug there
cannot take the campaign down with it. A few trials need rows only the library can
make (a chained ``run.started`` naming a folder, snapshots folded from altered events,
a payload re-chained in place, a source ledger of many interleaved events) or a fact only
the library knows (the viewer's routes). This program makes them: one subcommand each,
run as ``python bench/campaign_tools.py COMMAND ...``, printing its answer as JSON.

Not part of the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any


def forge_started(args: argparse.Namespace) -> Any:
    """Append to ``args.db`` a run whose batch names ``args.folder`` as its sandbox, on
    this host, by a process that is dead now: what a dead batch of this machine leaves.
    With ``--marker`` that dead process made the folder with a batch's own marker first.
    With ``--resumed`` the folder is named by a ``run.resumed`` after a plain start."""
    from evalledger.ledger import Ledger, RunResumed, RunStarted

    pid = os.fork()
    if pid == 0:  # the batch's process: it makes the folder (or nothing) and dies
        code = 1
        try:
            if args.marker:  # imported here: a version without markers runs the rest
                from evalledger.executor._watchdog import make_folder

                make_folder(Path(args.folder), args.token)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"could not make {args.folder}")
    host = {"hostname": socket.gethostname(), "pid": pid}
    run_id = f"forged-{args.token}"
    batch = {"host": host, "batch_token": args.token, "sandbox_root": args.folder}
    with Ledger(Path(args.db)) as ledger:
        if args.resumed:
            ledger.append([RunStarted(run_id=run_id, planned=["default/t/00"]),
                           RunResumed(run_id=run_id, **batch)])
        else:
            ledger.append([RunStarted(run_id=run_id, planned=["default/t/00"], **batch)])
    return {"run_id": run_id, "dead_pid": pid}


def forge_snapshot(args: argparse.Namespace) -> Any:
    """Append snapshots of run ``args.run`` of the kinds asked, folded by the real folds
    from its events with the tasks of ``--flip`` ending the other way (success <->
    failure), so the kinds agree with each other; through ``--through`` (a seq, or
    ``real``: the run's last lifecycle event, what a true snapshot is through).

    Returns the seqs appended, which of them lie (their value differs from the true
    folds through that seq, or they claim events after their own seq) and what was
    flipped."""
    from evalledger.ledger import Ledger, TaskCompleted
    from evalledger.projections import ResumeFold, SummaryFold, fold
    from evalledger.projections._snapshots import snapshot_events
    from evalledger.statuses import FinalStatus

    def snapshots(events: list[Any], through: int) -> list[Any]:
        made = snapshot_events(args.run, through, fold(SummaryFold(args.run), events),
                               fold(ResumeFold(args.run), events))
        return [s for s in made if s.kind in args.kinds]

    flipped = {}
    with Ledger(Path(args.db)) as ledger:
        real = list(ledger.events(args.run))
        lied = []
        for event in real:
            if isinstance(event, TaskCompleted) and event.task_key in args.flip:
                status = (FinalStatus.FAILURE if event.final_status == FinalStatus.SUCCESS
                          else FinalStatus.SUCCESS)
                flipped[event.task_key] = status.value
                event = event.model_copy(update={
                    "final_status": status, "category": status.category,
                    "weighted_score": 1.0 if status == FinalStatus.SUCCESS else 0.0})
            lied.append(event)
        through = (ledger.last_lifecycle_seq(args.run) if args.through == "real"
                   else int(args.through))
        made = snapshots(lied, through)
        true = {s.kind: s.value for s in snapshots(
            [e for e in real if (e.seq or 0) <= through], through)}
        seqs = ledger.append(made)
        lies = [seq for seq, s in zip(seqs, made, strict=True)
                if through >= seq or s.value != true[s.kind]]
        return {"seqs": seqs, "lies": lies, "through": through, "flipped": flipped}


def source(args: argparse.Namespace) -> Any:
    """A ledger of ``--runs`` runs recorded at the same time (their events interleave),
    each task with a start, output lines and an end, each run.started naming this
    ledger as a run records it, until about ``--events`` events."""
    import random

    from evalledger.ledger import (
        Ledger,
        RunFinished,
        RunStarted,
        TaskCompleted,
        TaskOutput,
        TaskStarted,
    )
    from evalledger.ledger._events import utc_now
    from evalledger.statuses import FinalStatus

    rng = random.Random(args.seed)
    runs = [f"src{args.seed % 1000}-{r}" for r in range(args.runs)]
    lines = args.lines
    tasks = max(1, args.events // (len(runs) * (lines + 2)))
    keys = [f"default/t{t}/00" for t in range(tasks)]
    with Ledger(Path(args.db)) as ledger:
        ledger.append([RunStarted(run_id=r, ledger_id=ledger.ledger_id, planned=keys)
                       for r in runs])
        for t, key in enumerate(keys):
            batch: list[Any] = []
            for r in runs:
                ts = utc_now()
                status = rng.choice([FinalStatus.SUCCESS, FinalStatus.SUCCESS,
                                     FinalStatus.FAILURE])
                batch.append(TaskStarted(run_id=r, task_key=key, task_id=f"t{t}"))
                batch += [TaskOutput.encoded(r, key, ts, "stdout", f"{r} {key} line {i}", i,
                                             False) for i in range(lines)]
                batch.append(TaskCompleted(run_id=r, task_key=key, category=status.category,
                                           final_status=status))
            ledger.append(batch)
        ledger.append([RunFinished(run_id=r, status="completed") for r in runs])
        return {"runs": runs, "events": ledger.count()}


def rechain(args: argparse.Namespace) -> Any:
    """Store ``args.payload`` at seq ``args.seq`` and recompute every hash from there on,
    behind the append-only triggers (put back as they were): a chain valid on its own
    around a payload evalledger never wrote."""
    from evalledger.ledger._chain import chain_rows
    from evalledger.ledger._rows import EventRow, text_hash, text_id

    with closing(sqlite3.connect(args.db, isolation_level=None)) as conn:
        rows = conn.execute("SELECT event_id, run_id, task_key, type, ts, payload FROM events "
                            "WHERE seq >= ? ORDER BY seq", [args.seq]).fetchall()
        prev = text_hash(conn.execute("SELECT hash FROM events WHERE seq = ?",
                                      [args.seq - 1]).fetchone()[0])
        edited = [EventRow(text_id(e), r, k, t, ts, p) for e, r, k, t, ts, p in rows]
        edited[0] = edited[0]._replace(payload=args.payload)
        triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' "
                                "AND tbl_name = 'events'").fetchall()
        conn.execute("BEGIN IMMEDIATE")
        for name, _ in triggers:
            conn.execute(f'DROP TRIGGER "{name}"')
        conn.executemany("UPDATE events SET payload = ?, hash = ? WHERE seq = ?",
                         [(r[-2], r[-1], r[0]) for r in chain_rows(prev, args.seq, edited)])
        for _, sql in triggers:
            conn.execute(sql)
        conn.execute("COMMIT")
    return {"rechained": len(rows)}


def routes(args: argparse.Namespace) -> Any:
    """The viewer app's routes as written (``/runs/{run_id}``...), each static file as a
    path of its own: a route added later is probed without editing the campaign."""
    from starlette.applications import Starlette
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    from evalledger.viewer import create_app

    app: Any = create_app(Path(args.db))  # never started: only its routes are read
    while not isinstance(app, Starlette):
        app = app.app  # through the middleware
    found = []
    for route in app.routes:
        if isinstance(route, Mount) and isinstance(route.app, StaticFiles):
            folder = Path(str(route.app.directory))
            found += [f"{route.path}/{f.name}" for f in sorted(folder.iterdir()) if f.is_file()]
        elif isinstance(route, Route):
            found.append(route.path)
        else:
            raise SystemExit(f"a route the campaign cannot probe: {route!r}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("forge-started")
    p.add_argument("db")
    p.add_argument("--folder", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--marker", action="store_true")
    p.add_argument("--resumed", action="store_true")
    p.set_defaults(do=forge_started)
    p = commands.add_parser("forge-snapshot")
    p.add_argument("db")
    p.add_argument("run")
    p.add_argument("--flip", nargs="+", required=True)
    p.add_argument("--kinds", nargs="+", required=True)
    p.add_argument("--through", default="real")
    p.set_defaults(do=forge_snapshot)
    p = commands.add_parser("source")
    p.add_argument("db")
    p.add_argument("--events", type=int, required=True)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--lines", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(do=source)
    p = commands.add_parser("rechain")
    p.add_argument("db")
    p.add_argument("seq", type=int)
    p.add_argument("payload")
    p.set_defaults(do=rechain)
    p = commands.add_parser("routes")
    p.add_argument("db")
    p.set_defaults(do=routes)
    args = parser.parse_args()
    print(json.dumps(args.do(args)))


if __name__ == "__main__":
    main()
