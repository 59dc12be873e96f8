"""The ledger at scale: 10^4- and 10^5-task runs, what each read command costs on them.

Builds (with ``bench/rebuild.py``'s builder: one finished run, each task a
task.started, a task.usage, M output lines and a task.completed, then the run's
snapshot, as the executor writes them) a ledger of ``--small`` tasks and one of
``--large`` tasks (defaults 10,000 and 100,000, 100 lines each), then times, each
command in a fresh process (its wall time and peak RSS, from ``wait4``):

- ``verify`` and ``verify --deep`` (events per second, peak RSS: flat means the
  same RSS on both ledgers);
- ``verify --since`` after a 1,000-task run is appended on top of the large
  ledger, from the anchor a full ``verify`` left (what a user runs after each run);
- ``runs``, ``show latest`` (its first 1,000 task rows) and ``show latest --limit 0``
  (every row), ``report latest --format json``, and the SQL pass rate per model;
- the ledger's bytes per event and per task;
- ``--sessions`` (default 200) real-shaped Claude Code sessions (the stream-json
  transcript of tests/agents/transcripts, each with its own ids and numbers), each
  printed by a task's command through ``evalledger run``: the ledger's bytes per event
  and its size against the transcripts it holds (targets: <= 120 B/event, <= 0.5x);
  then the same sessions each printed a line at a time, 50 ms apart, as an agent
  streams them (a line a read: what the runner's linger makes one row of).

Lines scripts read: ``verify large: 512,345 events/s, peak 97.1 MiB``,
``ratio verify RSS large/small: 1.01``, ``sessions: 1,424 B/event`` and ``ratio
ledger/transcripts: 1.60``. Run: python bench/scale.py [--small N]
[--large N] [--lines M] [--keep DIR] (``--keep`` builds once and reuses). Not part
of the tests.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Runs a command and prints the peak RSS of the largest process of its tree (the command
# and whatever it started and waited for: verify's part processes): RUSAGE_CHILDREN of a
# small process that has only that tree below it.
_TREE_PEAK = ("import resource, subprocess, sys\n"
              "code = subprocess.call(sys.argv[1:])\n"
              "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
              "sys.exit(code)\n")


def measured(*args: str, env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """``evalledger ARGS`` in a fresh process: (seconds, the peak RSS in MiB of the largest
    process it ran as, itself or a part process it started, its stdout)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _TREE_PEAK, sys.executable, "-m",
                           "evalledger.cli", *args], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    *err, peak = done.stderr.strip().splitlines()
    if done.returncode not in (0, 1):
        raise SystemExit(f"evalledger {' '.join(args)}: exit {done.returncode}: {err}")
    return seconds, int(peak) / 1024, done.stdout


def ledger_of(root: Path, tasks: int, lines: int) -> Path:
    path = root / f"ledger-{lines}.db"
    wanted = root / f"{tasks}"
    target = wanted / path.name
    if target.exists():
        return target
    wanted.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    # In a child: a forked child counts its parent's pages in its peak RSS until it execs,
    # so this process stays small for the measurements after.
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from rebuild import build; "
            "from pathlib import Path; build(Path(sys.argv[2]), int(sys.argv[3]), "
            "int(sys.argv[4]), files=False)")
    subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), str(wanted),
                    str(tasks), str(lines)], check=True)
    print(f"built {tasks:,} tasks x {lines} lines in {time.perf_counter() - start:.0f}s")
    return target


def events_in(path: Path) -> int:
    # sqlite3 alone: what this process imports, every child it spawns counts in its peak
    # RSS (vfork: the child's peak includes its parent's until it execs).
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT max(seq) FROM events").fetchone()[0])


def since_after_a_run(root: Path, large: Path, lines: int) -> None:
    """``verify --since last`` once a 1,000-task run is appended to (a copy of) the large
    ledger that a full verify found intact: what a user runs after each run."""
    copy = root / "since" / large.name
    copy.parent.mkdir(exist_ok=True)
    shutil.copyfile(large, copy)
    env = {**os.environ, "EVALLEDGER_STATE_DIR": os.environ["EVALLEDGER_STATE_DIR"] + "-since"}
    s, _, out = measured("--ledger", str(copy), "verify", env=env)
    assert out.startswith("OK"), out
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from rebuild import record_run; "
            "from evalledger.ledger import Ledger; "
            "ledger = Ledger(sys.argv[2]); record_run(ledger, 'on-top', 1000, int(sys.argv[3])); "
            "ledger.close()")
    subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), str(copy),
                    str(lines)], check=True)
    s2, rss, out = measured("--ledger", str(copy), "verify", "--since", "last", env=env)
    assert out.startswith("OK"), out
    print(f"verify --since last after a 1,000-task run on top of the large ledger: "
          f"{s2:.2f}s, peak {rss:.1f} MiB (the full verify before it: {s:.1f}s)")
    print(f"ratio verify full/since: {s / s2:.0f}")


def sessions(root: Path, count: int, pause: float = 0.0) -> None:
    """``count`` Claude Code sessions recorded by ``evalledger run``: the ledger's bytes per
    event and against the transcripts' own bytes. ``pause``: each line printed alone,
    this many seconds after the last (as an agent streams: a line a read); 0: at once."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import json

    from tests.agents.transcripts.claude_code import RESULT, TRANSCRIPT

    folder = root / ("sessions" if not pause else "streamed")
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "tasks").mkdir(parents=True)
    # Bound read-only into each task's sandbox (bwrap or docker, where `auto` finds one):
    # a folder of their own, apart from the ledger and --out, which no bind may hold.
    said = folder / "transcripts"
    said.mkdir()
    raw = lines = 0
    for i in range(count):
        # Each its own session: ids and counts differ as they do between real sessions.
        text = json.dumps([*TRANSCRIPT, RESULT])
        text = (text.replace("7f1c2d3e-0000-4000-8000-000000000001",
                             f"7f1c2d3e-0000-4000-8000-{i:012d}")
                .replace("msg_0", f"msg_{i:04d}_").replace("toolu_0", f"toolu_{i:04d}_")
                .replace("12000", str(12000 + 37 * i)).replace('"output_tokens": 120',
                                                               f'"output_tokens": {120 + i}'))
        transcript = "".join(json.dumps(line) + "\n" for line in json.loads(text))
        (said / f"s{i:04d}.jsonl").write_text(transcript)
        raw, lines = raw + len(transcript.encode()), lines + transcript.count("\n")
        command = (f"cat $SAID/s{i:04d}.jsonl" if not pause else
                   f"while IFS= read -r l; do printf '%s\\n' \"$l\"; sleep {pause}; done "
                   f"< $SAID/s{i:04d}.jsonl")
        (folder / "tasks" / f"s{i:04d}.yaml").write_text(json.dumps({
            "command": command, "stream_format": "claude-code",
            "binds": {"SAID": str(said)}, "success_criteria": [{"type": "exit_code"}]}))
    ledger = folder / "ledger.db"
    done = subprocess.run([sys.executable, "-m", "evalledger.cli", "--ledger", str(ledger),
                           "run", str(folder / "tasks"), "-j", "2" if not pause else "8",
                           "--out",
                           str(folder / "runs")], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"sessions: run failed: {done.stderr[-2000:]}")
    with sqlite3.connect(ledger) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        # Counted as lines: a chunk of k lines is k events (its seqs: max(seq) counts them).
        events = int(conn.execute("SELECT max(seq) FROM events").fetchone()[0])
    size = ledger.stat().st_size
    label = "sessions" if not pause else f"sessions streamed ({pause:g}s a line)"
    print(f"{label}: {count} Claude Code sessions, {lines:,} transcript lines "
          f"({raw:,} bytes), {events:,} events: {size / events:,.0f} B/event, "
          f"{size / lines:,.0f} B/transcript line (target <= 120 B/event)")
    print(f"ratio ledger/transcripts{'' if not pause else ' streamed'}: {size / raw:.2f} "
          "(target <= 0.5)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--lines", type=int, default=100)
    parser.add_argument("--keep", type=Path, help="build the ledgers here once, reuse them")
    parser.add_argument("--sessions", type=int, default=200)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as raw:
        root = args.keep or Path(raw)
        # The verified-through anchors verify records: the bench's own, not the user's.
        os.environ["EVALLEDGER_STATE_DIR"] = str(Path(raw) / "state")
        figures: dict[str, dict[str, float]] = {}
        for name, tasks in (("small", args.small), ("large", args.large)):
            path = ledger_of(root, tasks, args.lines)
            n = events_in(path)
            size = path.stat().st_size
            f = figures[name] = {"events": n}
            print(f"{name}: {tasks:,} tasks, {n:,} events, {size / 2**20:.0f} MiB: "
                  f"{size / n:.0f} B/event, {size / tasks:,.0f} B/task")
            db = ["--ledger", str(path)]
            for label, cmd in (("verify", ["verify"]), ("verify --deep", ["verify", "--deep"])):
                s, rss, out = measured(*db, *cmd)
                assert out.startswith("OK"), out
                f[label] = rss
                print(f"{label} {name}: {n / s:,.0f} events/s ({s:.2f}s), peak {rss:.1f} MiB")
            for label, cmd in (("runs", ["runs"]), ("show", ["show", "latest"]),
                               ("show every row", ["show", "latest", "--limit", "0"]),
                               ("report json", ["report", "latest", "--format", "json"]),
                               ("sql pass rate per model",
                                ["sql", "SELECT * FROM model_pass_rates"])):
                s, rss, _ = measured(*db, *cmd)
                print(f"{label} {name}: {s:.2f}s, peak {rss:.1f} MiB")
        for label in ("verify", "verify --deep"):
            print(f"ratio {label} RSS large/small: "
                  f"{figures['large'][label] / figures['small'][label]:.2f}")
        since_after_a_run(root, ledger_of(root, args.large, args.lines), args.lines)
        sessions(root, args.sessions)
        sessions(root, args.sessions, pause=0.05)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
