"""The crash campaign of issue #11: kill, share, starve and tamper with real ledgers.

Every trial drives the real CLI as separate processes
(``python -m evalledger.cli --ledger DB ...``) in its own folder under one temporary
root, with ``TMPDIR`` pointed inside it so sandboxes can be checked, and every task
marked with ``CAMPAIGN_TRIAL=<trial folder>`` in its environment so that what it left
running can be found in ``/proc``. Families:

1. SIGKILL + resume: run, SIGKILL at a random number of committed events, resume,
   SIGKILL again..., then a final resume to completion.
2. Two runs on one ledger: two ``run`` processes started together on one file;
   sometimes one is SIGKILLed mid-way and resumed.
3. Disk full: the ledger, ``--out`` or ``TMPDIR`` on a small tmpfs (needs ``mount``).
4. sql probes: a 10M-row result in flat memory, Ctrl-C, refused writes, out of memory.
5. Tamper: ``tests/ledger/test_tamper.py``, and anchors checked end to end.

After every kill: ``verify`` exits 0; every ``(seq, event_id)`` read (read-only) right
before the kill is still there; no marked process is alive 5 s after it (zombies do
not count); the batch's sandbox folder is gone.

Run: python bench/campaign.py [--seed N] [--trials N]
Prints one row per family (trials, failures, events lost, processes left), a line per
failure, and exits 1 when anything failed. Not part of the tests; takes minutes.

The children import ``evalledger`` as this interpreter would (the checkout, when it is
installed editable). To test one fixed version while the checkout is being edited, put a
copy first on the path: ``git archive HEAD evalledger | tar -x -C /tmp/snap`` and
``PYTHONPATH=/tmp/snap python bench/campaign.py``; the first line says which code ran.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import re
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KILL_GRACE = 5.0  # seconds the watchdog has to clean up after a SIGKILLed runner
RUN_TIMEOUT = 180.0  # seconds any single run/resume may take before the campaign gives up
SILENT = "sleep 300 >/dev/null 2>&1 & sleep 0.3; echo done"  # a silent background child
CHATTY = 'for b in 1 2 3 4 5; do seq -f "burst $b line %g" 1 600; sleep 0.1; done'


# --------------------------------------------------------------------------- tally


@dataclass
class Tally:
    """One family's row of the table, and the reasons behind its failures."""

    family: str
    trials: int = 0
    failures: int = 0
    events_lost: int = 0
    processes_left: int = 0
    problems: list[str] = field(default_factory=list)
    skipped: str | None = None
    notes: list[str] = field(default_factory=list)
    kills: list[int] = field(default_factory=list)  # events committed before each SIGKILL
    ended_first: int = 0  # rounds that ended by themselves before their kill point

    def kill_note(self) -> None:
        if self.kills or self.ended_first:
            later = [k for k in self.kills if k] or [0]
            self.notes.append(
                f"{len(self.kills)} SIGKILLs delivered: {len(self.kills) - len(later)} before "
                f"the run had an event in the ledger, the others once it had {min(later)} to "
                f"{max(later)}; rounds that ended before their kill point: {self.ended_first}")

    @contextlib.contextmanager
    def trial(self, name: str) -> Iterator[Checks]:
        checks = Checks(self, name)
        self.trials += 1
        try:
            yield checks
        except Exception as e:  # a hang or a campaign bug: say it, go on with the next
            where = traceback.extract_tb(e.__traceback__)[-1]
            checks.fail(f"campaign error: {type(e).__name__}: {e} (line {where.lineno})")
        if checks.failed:
            self.failures += 1

    def row(self) -> str:
        if self.skipped:
            return f"{self.family:<22} | skipped: {self.skipped}"
        return (f"{self.family:<22} | {self.trials:>6} | {self.failures:>8} | "
                f"{self.events_lost:>11} | {self.processes_left:>14}")


class Checks:
    """The checks of one trial: each failed one is a line of the report."""

    def __init__(self, tally: Tally, name: str) -> None:
        self.tally, self.name, self.failed = tally, name, False

    def fail(self, message: str) -> None:
        self.failed = True
        self.tally.problems.append(f"{self.tally.family} / {self.name}: {message}")

    def expect(self, ok: bool, message: str) -> bool:
        if not ok:
            self.fail(message)
        return ok

    def lost(self, before: set[tuple[int, str]], after: set[tuple[int, str]], when: str) -> None:
        missing = before - after
        if missing:
            self.tally.events_lost += len(missing)
            first = sorted(missing)[:3]
            self.fail(f"{len(missing)} committed events lost {when} (first: {first})")

    def left(self, processes: dict[int, str], when: str) -> None:
        if processes:
            self.tally.processes_left += len(processes)
            shown = "; ".join(f"{pid} {cmd[:80]}" for pid, cmd in sorted(processes.items()))
            self.fail(f"{len(processes)} processes alive {when}: {shown}")
            kill_pids(processes)  # ours: do not let them spoil the next check


# --------------------------------------------------------------------------- ledger reads


def _ro(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{urllib.parse.quote(str(db))}?mode=ro", uri=True, timeout=5)


def _read(db: Path, sql: str, args: tuple = ()) -> list[tuple]:
    """Rows of a read-only query; [] while the file or its table does not exist yet."""
    last: Exception | None = None
    for _ in range(100):
        if not db.exists():
            return []
        try:
            conn = _ro(db)
            try:
                return conn.execute(sql, args).fetchall()
            finally:
                conn.close()
        except sqlite3.OperationalError as e:
            if "no such table" in str(e):
                return []
            last = e
            time.sleep(0.01)  # the file being created or switched to WAL: read again
    raise RuntimeError(f"cannot read {db}: {last}")


def committed(db: Path) -> set[tuple[int, str]]:
    return set(_read(db, "SELECT seq, event_id FROM events"))


def max_seq(db: Path) -> int:
    rows = _read(db, "SELECT max(seq) FROM events")
    return (rows[0][0] or 0) if rows else 0


def run_events(db: Path, run_id: str) -> int:
    rows = _read(db, "SELECT count(*) FROM events WHERE run_id = ?", (run_id,))
    return rows[0][0] if rows else 0


def _run_event_ids(trial: Trial, run_id: str) -> set[str]:
    return {row[0] for row in _read(trial.db, "SELECT event_id FROM events WHERE run_id = ?",
                                    (run_id,))}


def run_started(db: Path, run_id: str) -> bool:
    return bool(_read(db, "SELECT 1 FROM events WHERE run_id = ? AND type = 'run.started'",
                      (run_id,)))


# --------------------------------------------------------------------------- processes


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def marked(mark: str, run_id: str | None = None) -> dict[int, str]:
    """Live processes (not zombies) whose environment holds ``CAMPAIGN_TRIAL=mark`` (and,
    with ``run_id``, belong to that run): pid -> command line."""
    want = f"CAMPAIGN_TRIAL={mark}".encode()
    of_run = {f"EVALLEDGER_RUN_ID={run_id}".encode(), f"CAMPAIGN_RUN={run_id}".encode()}
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            env = set(Path(f"/proc/{name}/environ").read_bytes().split(b"\0"))
            if want not in env or (run_id is not None and not env & of_run):
                continue
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if _alive(int(name)):
            found[int(name)] = cmd.decode(errors="replace").strip()
    return found


def left_after(mark: str, since: float, run_id: str | None = None) -> dict[int, str]:
    """The marked processes still alive ``KILL_GRACE`` seconds after ``since``."""
    deadline = since + KILL_GRACE
    while (found := marked(mark, run_id)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def kill_pids(processes: dict[int, str]) -> None:
    for pid in processes:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# --------------------------------------------------------------------------- trials


@dataclass
class Runner:
    """A CLI process started in the background; its output goes to files."""

    popen: subprocess.Popen[bytes]
    out: Path
    err: Path

    def wait(self, timeout: float = RUN_TIMEOUT) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
            raise TimeoutError(f"{self.argv()} did not end in {timeout:g}s") from None

    def argv(self) -> str:
        return " ".join(str(a) for a in self.popen.args[5:])  # type: ignore[index]

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")


class Trial:
    """A trial's folder: ``tmp`` (its TMPDIR), the ledger, ``runs`` (its --out)."""

    def __init__(self, root: Path, name: str) -> None:
        self.dir = root / name
        self.tmp = self.dir / "tmp"
        self.tmp.mkdir(parents=True)
        self.db = self.dir / "ledger.db"
        self.out = self.dir / "runs"
        self.mark = str(self.dir)
        self._n = 0

    def env(self, run_id: str = "", tmpdir: Path | None = None) -> dict[str, str]:
        return {**os.environ, "TMPDIR": str(tmpdir or self.tmp), "CAMPAIGN_TRIAL": self.mark,
                "CAMPAIGN_RUN": run_id, "PYTHONDONTWRITEBYTECODE": "1"}

    def argv(self, args: tuple[str, ...], db: Path | None) -> list[str]:
        return [sys.executable, "-m", "evalledger.cli", "--ledger", str(db or self.db), *args]

    def start(self, *args: str, run_id: str = "", db: Path | None = None,
              tmpdir: Path | None = None) -> Runner:
        self._n += 1
        out, err = self.dir / f"p{self._n}.out", self.dir / f"p{self._n}.err"
        with out.open("wb") as o, err.open("wb") as e:
            popen = subprocess.Popen(self.argv(args, db), stdout=o, stderr=e, cwd=self.dir,
                                     env=self.env(run_id, tmpdir), stdin=subprocess.DEVNULL)
        return Runner(popen, out, err)

    def call(self, *args: str, db: Path | None = None, timeout: float = 120,
             tmpdir: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(args, db), capture_output=True, text=True,
                              cwd=self.dir, env=self.env(tmpdir=tmpdir), timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def sandboxes(self, run_id: str, tmpdir: Path | None = None) -> list[Path]:
        return sorted((tmpdir or self.tmp).glob(f"evalledger-{run_id}-*"))

    def verify(self, checks: Checks, when: str, db: Path | None = None) -> None:
        result = self.call("verify", db=db)
        checks.expect(result.returncode == 0, f"verify exited {result.returncode} {when}: "
                      f"{(result.stdout + result.stderr).strip()[:300]!r}")

    def summary(self, run_id: str, db: Path | None = None) -> dict:
        result = self.call("show", run_id, "--json", db=db)
        if result.returncode != 0:
            raise RuntimeError(f"show {run_id} exited {result.returncode}: {result.stderr!r}")
        return json.loads(result.stdout)

    def cleanup(self) -> None:
        kill_pids(marked(self.mark))


def yaml_task(command: str | list[str], mark: str, timeout: float = 60) -> str:
    """A task file (JSON is YAML): the command, the trial's mark, exit code 0 wanted."""
    return json.dumps({"command": command, "timeout": timeout,
                       "env": {"CAMPAIGN_TRIAL": mark},
                       "success_criteria": [{"type": "exit_code"}]}, indent=1)


def write_suite(folder: Path, mark: str) -> Path:
    """Six tasks leaving a silent background child, one printing 3000 lines."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(6):
        (folder / f"silent{i}.yaml").write_text(yaml_task(SILENT, mark))
    (folder / "chatty.yaml").write_text(yaml_task(CHATTY, mark))
    return folder


def run_args(suite: Path, run_id: str, out: Path, jobs: int) -> tuple[str, ...]:
    return ("run", str(suite), "--run-id", run_id, "--out", str(out), "-j", str(jobs))


def run_or_resume(trial: Trial, suite: Path, run_id: str, jobs: int) -> tuple[str, ...]:
    """``resume`` once the run is in the ledger; ``run`` again if it never got there."""
    if run_started(trial.db, run_id):
        return ("resume", run_id)
    return run_args(suite, run_id, trial.out, jobs)


def no_traceback(checks: Checks, runner_err: str, what: str) -> None:
    checks.expect("Traceback" not in runner_err,
                  f"{what}: a traceback on stderr: {runner_err.strip()[-400:]!r}")


def kill_at(trial: Trial, args: tuple[str, ...], run_id: str, target: int,
            db: Path | None = None) -> tuple[Runner, set[tuple[int, str]] | None, float]:
    """Start ``args``; SIGKILL it once ``target`` more events are committed (at once for 0).

    Returns the runner, the events committed right before the kill (None if it ended by
    itself first) and when the kill was sent.
    """
    db = db or trial.db
    base = max_seq(db)
    runner = trial.start(*args, run_id=run_id, db=db)
    deadline = time.monotonic() + RUN_TIMEOUT
    while runner.popen.poll() is None and time.monotonic() < deadline:
        if target == 0 or max_seq(db) - base >= target:
            before = committed(db)
            runner.popen.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            if runner.wait() == -signal.SIGKILL:
                return runner, before, killed_at
            break
        time.sleep(0.002)
    runner.wait()
    return runner, None, time.monotonic()


def after_kill(trial: Trial, checks: Checks, runner: Runner, run_id: str,
               before: set[tuple[int, str]], killed_at: float, when: str) -> None:
    """What a SIGKILL must leave: no process of the run, no sandbox, every event, a valid
    ledger, and a run in the ledger if its id was printed."""
    of_run = _run_event_ids(trial, run_id)
    checks.tally.kills.append(sum(1 for _, event_id in before if event_id in of_run))
    if runner.stdout().split("\n", 1)[0].strip() == run_id:
        checks.expect(run_started(trial.db, run_id),
                      f"{when}: the run id was printed but run.started is not in the ledger")
    checks.left(left_after(trial.mark, killed_at, run_id), f"{KILL_GRACE:g}s after {when}")
    deadline = killed_at + KILL_GRACE
    while (boxes := trial.sandboxes(run_id)) and time.monotonic() < deadline:
        time.sleep(0.05)
    checks.expect(not boxes, f"sandbox folders left {KILL_GRACE:g}s after {when}: "
                  f"{[b.name for b in boxes]}")
    if trial.db.exists():  # killed before it made the ledger: nothing to verify
        trial.verify(checks, f"after {when}")
    checks.lost(before, committed(trial.db), f"after {when}")


def complete(trial: Trial, checks: Checks, run_id: str, planned: int) -> None:
    summary = trial.summary(run_id)
    got = {k: summary.get(k) for k in ("status", "tasks_planned", "tasks_succeeded",
                                       "tasks_unfinished")}
    checks.expect(got == {"status": "completed", "tasks_planned": planned,
                          "tasks_succeeded": planned, "tasks_unfinished": 0},
                  f"run {run_id} not complete at the end: {got}")


def calibrate(root: Path) -> int:
    """Events of one full run of the suite (to pick kill points across a whole run)."""
    trial = Trial(root, "calibration")
    suite = write_suite(trial.dir / "suite", trial.mark)
    result = trial.call(*run_args(suite, "cal", trial.out, 4), timeout=RUN_TIMEOUT)
    if result.returncode != 0:
        raise RuntimeError(f"calibration run exited {result.returncode}: {result.stderr!r}")
    return run_events(trial.db, "cal")


# --------------------------------------------------------------------------- 1. SIGKILL


def killing_family(
    name: str, prefix: str, trial_of: Callable[[Trial, Checks, random.Random, int], None],
    root: Path, rng: random.Random, n: int, full: int,
) -> Tally:
    """``n`` trials of one killing family, each in its own folder, removed after it."""
    tally = Tally(name)
    for i in range(n):
        trial = Trial(root, f"{prefix}-{i:03d}")
        with tally.trial(f"trial {i}") as checks:
            trial_of(trial, checks, rng, full)
        trial.cleanup()
    tally.kill_note()
    return tally


def family_sigkill(root: Path, rng: random.Random, n: int, full: int) -> Tally:
    return killing_family("SIGKILL + resume", "kill", sigkill_trial, root, rng, n, full)


def sigkill_trial(trial: Trial, checks: Checks, rng: random.Random, full: int) -> None:
    suite = write_suite(trial.dir / "suite", trial.mark)
    run_id, jobs, kills = "k", rng.choice([1, 2, 4]), rng.randint(2, 4)
    history = []
    for k in range(kills):
        args = run_or_resume(trial, suite, run_id, jobs)
        remaining = max(10, full - run_events(trial.db, run_id))
        target = 0 if rng.random() < 0.1 else rng.randint(1, remaining)
        runner, before, killed_at = kill_at(trial, args, run_id, target)
        history.append(f"{args[0]}@+{target}{'' if before is not None else ' (ended)'}")
        if before is None:  # it ended before the target: it must have ended well
            checks.tally.ended_first += 1
            checks.expect(runner.popen.returncode == 0,
                          f"{runner.argv()} exited {runner.popen.returncode}: "
                          f"{runner.stderr().strip()[-300:]!r}")
            break
        after_kill(trial, checks, runner, run_id, before, killed_at,
                   f"kill {k + 1} ({args[0]} at +{target} events)")
    args = run_or_resume(trial, suite, run_id, jobs)
    final = trial.start(*args, run_id=run_id)
    rc = final.wait()
    ended = time.monotonic()
    checks.expect(rc == 0, f"final {args[0]} exited {rc} (history {history}): "
                  f"{final.stderr().strip()[-300:]!r}")
    no_traceback(checks, final.stderr(), f"final {args[0]}")
    complete(trial, checks, run_id, 7)
    trial.verify(checks, "at the end")
    checks.left(left_after(trial.mark, ended), "after the final resume")
    checks.expect(not trial.sandboxes(run_id), f"sandbox folders left at the end: "
                  f"{[b.name for b in trial.sandboxes(run_id)]}")


# --------------------------------------------------------------------------- 2. two runs


def family_two_runs(root: Path, rng: random.Random, n: int, full: int) -> Tally:
    return killing_family("two runs on one ledger", "two", two_runs_trial, root, rng, n, full)


def two_runs_trial(trial: Trial, checks: Checks, rng: random.Random, full: int) -> None:
    suite = write_suite(trial.dir / "suite", trial.mark)
    ids, jobs = ("a", "b"), rng.choice([2, 4])
    runners = {rid: trial.start(*run_args(suite, rid, trial.out, jobs), run_id=rid)
               for rid in ids}
    victim = rng.choice([None, *ids])
    if victim is not None:
        target = rng.randint(0, 2 * full)
        base = max_seq(trial.db)
        runner = runners[victim]
        while runner.popen.poll() is None and (target and max_seq(trial.db) - base < target):
            time.sleep(0.002)
        before = committed(trial.db)
        runner.popen.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        if runner.wait() != -signal.SIGKILL:
            checks.tally.ended_first += 1
        else:
            # verify runs while the other run may still be writing: it must pass anyway
            after_kill(trial, checks, runner, victim, before, killed_at,
                       f"killing run {victim} at +{target} events")
            args = run_or_resume(trial, suite, victim, jobs)
            runners[victim] = trial.start(*args, run_id=victim)
    for runner in runners.values():
        rc = runner.wait()
        checks.expect(rc == 0, f"{runner.argv()} exited {rc}: "
                      f"{runner.stderr().strip()[-300:]!r}")
        no_traceback(checks, runner.stderr(), runner.argv())
    ended = time.monotonic()
    for rid in ids:
        complete(trial, checks, rid, 7)
        checks.expect(not trial.sandboxes(rid), f"sandbox folders of {rid} left at the end")
    trial.verify(checks, "at the end")
    checks.left(left_after(trial.mark, ended), "after both runs ended")


# --------------------------------------------------------------------------- 3. disk full


def family_disk_full(root: Path, rng: random.Random, n: int) -> Tally:
    tally = Tally("disk full")
    probe = root / "mount-probe"
    probe.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(probe)],
                       check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        tally.skipped = f"cannot mount a tmpfs: {getattr(e, 'stderr', '') or e}".strip()
        return tally
    subprocess.run(["umount", str(probe)], check=True)
    variants = ["ledger"] * n + ["out", "tmpdir"]
    for i, variant in enumerate(variants):
        trial = Trial(root, f"full-{i:03d}-{variant}")
        full = trial.dir / "full"
        full.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(full)],
                       check=True)
        try:
            with tally.trial(f"trial {i} ({variant} on a full tmpfs)") as checks:
                disk_full_trial(trial, checks, rng, variant, full)
        finally:
            trial.cleanup()
            if subprocess.run(["umount", str(full)], capture_output=True).returncode:
                subprocess.run(["umount", "-l", str(full)], capture_output=True)
    return tally


def fill(folder: Path, leave: int) -> Path:
    """Fill the file system of ``folder`` until ``leave`` bytes are free."""
    filler = folder / "filler"
    st = os.statvfs(folder)
    with filler.open("wb") as f:
        f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
    return filler


def disk_full_trial(trial: Trial, checks: Checks, rng: random.Random, variant: str,
                    full: Path) -> None:
    suite = trial.dir / "suite"
    suite.mkdir()
    db, out, tmpdir = trial.db, trial.out, trial.tmp
    if variant == "ledger":  # chatty tasks: between 0.5 and 6 MB of output in all
        db = full / "ledger.db"
        width, total = rng.choice([100, 1000, 5000]), rng.randint(500_000, 6_000_000)
        tasks = rng.randint(2, 4)
        code = (f"import sys\nfor i in range({total // tasks // width}): "
                f"sys.stdout.write('x' * {width} + ' %d\\n' % i)")
        for t in range(tasks):
            (suite / f"chatty{t}.yaml").write_text(
                yaml_task([sys.executable, "-c", code], trial.mark))
        what = f"{tasks} tasks x {total // tasks // width} lines of {width}"
    else:  # tasks that leave a file in their sandbox, on a nearly full disk
        if variant == "out":
            out = full / "runs"
        else:
            tmpdir = full / "tmp"
            tmpdir.mkdir()
        leave, blob = rng.randint(20_000, 600_000), rng.randint(50_000, 400_000)
        fill(full, leave)
        for t in range(3):
            (suite / f"blob{t}.yaml").write_text(yaml_task(
                f"head -c {blob} /dev/urandom > blob && echo wrote", trial.mark))
        what = f"3 tasks x {blob} bytes with {leave} bytes free"
    run_id = "f"
    runner = trial.start("run", str(suite), "--run-id", run_id, "--out", str(out),
                         "-j", "2", run_id=run_id, db=db, tmpdir=tmpdir)
    last: set[tuple[int, str]] = set()
    deadline = time.monotonic() + RUN_TIMEOUT
    while runner.popen.poll() is None and time.monotonic() < deadline:
        last = committed(db)  # the events committed before it ended, as far as seen
        time.sleep(0.02)
    rc = runner.wait()
    ended = time.monotonic()
    err = runner.stderr()
    trial_note = (f"{what}: exit {rc} with {len(last)} events seen committed, "
                  f"{err.strip().splitlines()[-1:] or ['']}")
    checks.tally.notes.append(f"{checks.name}: {trial_note[:400]}")
    no_traceback(checks, err, "run")
    errors = [line for line in err.splitlines() if line.startswith("Error:")]
    if rc == 2:
        checks.expect(len(errors) == 1 and re.search(r"full|no space", errors[0], re.I),
                      f"exit 2 without one Error: line about the full disk: {err[-400:]!r}")
    elif checks.expect(rc in (0, 1), f"run exited {rc}: {err[-400:]!r}"):
        summary = trial.summary(run_id, db=db)
        checks.expect(summary["status"] == "completed" and summary["tasks_unfinished"] == 0,
                      f"exit {rc} but the run is {summary['status']} with "
                      f"{summary['tasks_unfinished']} unfinished")
        checks.expect((rc == 0) == (summary["tasks_succeeded"] == summary["tasks_planned"]),
                      f"exit {rc} but {summary['tasks_succeeded']} of "
                      f"{summary['tasks_planned']} succeeded")
    copy = trial.dir / "copy"
    copy.mkdir()
    for suffix in ("", "-wal"):
        if Path(f"{db}{suffix}").exists():
            shutil.copyfile(f"{db}{suffix}", copy / f"ledger.db{suffix}")
    trial.verify(checks, "on the copied ledger", db=copy / "ledger.db")
    checks.lost(last, committed(copy / "ledger.db"), "when the disk filled")
    checks.left(left_after(trial.mark, ended), "after the run ended")
    checks.expect(not trial.sandboxes(run_id, tmpdir),
                  f"sandbox folders left: {trial.sandboxes(run_id, tmpdir)}")
    # Space again: a run cut off by the full disk must be resumable to its end.
    if variant == "ledger":
        subprocess.run(["mount", "-o", "remount,size=64m", str(full)], check=True)
    else:
        (full / "filler").unlink()
    if not run_started(db, run_id):
        checks.expect(not (out / run_id).exists(),
                      f"the run never started but its folder {out / run_id} is left")
    elif trial.summary(run_id, db=db)["status"] != "completed":
        resumed = trial.start("resume", run_id, "--retry-errors", run_id=run_id, db=db,
                              tmpdir=tmpdir)
        rc = resumed.wait()
        checks.expect(rc in (0, 1), f"resume after freeing space exited {rc}: "
                      f"{resumed.stderr().strip()[-300:]!r}")
        summary = trial.summary(run_id, db=db)
        checks.expect(summary["status"] == "completed" and summary["tasks_unfinished"] == 0,
                      f"after the resume the run is {summary['status']} with "
                      f"{summary['tasks_unfinished']} unfinished")
        trial.verify(checks, "after the resume", db=db)
        checks.left(left_after(trial.mark, time.monotonic()), "after the resume")


# --------------------------------------------------------------------------- 4. sql


CTE = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT {n}) "
REFUSED = ["DELETE FROM events", "DROP TABLE events", "PRAGMA journal_mode=DELETE",
           "ATTACH 'x.db' AS x", "VACUUM INTO 'y.db'"]


def family_sql(root: Path) -> Tally:
    tally = Tally("sql probes")
    base = Trial(root, "sql-base")
    suite = write_suite(base.dir / "suite", base.mark)
    made = base.call(*run_args(suite, "s", base.out, 4), timeout=RUN_TIMEOUT)
    if made.returncode != 0:
        raise RuntimeError(f"the sql probes' ledger: run exited {made.returncode}")
    probes = [("10M rows in flat memory", probe_rows), ("Ctrl-C in a long query", probe_sigint),
              *((f"refused: {q}", _refusal(q)) for q in REFUSED),
              ("out of memory under RLIMIT_AS", probe_oom)]
    for i, (name, probe) in enumerate(probes):
        trial = Trial(root, f"sql-{i:02d}")
        for suffix in ("", "-wal"):
            if Path(f"{base.db}{suffix}").exists():
                shutil.copyfile(f"{base.db}{suffix}", f"{trial.db}{suffix}")
        with tally.trial(name) as checks:
            probe(trial, checks)
    return tally


def one_error_line(checks: Checks, rc: int, err: str, what: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    checks.expect(rc == 2 and len(lines) == 1 and lines[0].startswith("Error:")
                  and "Traceback" not in err,
                  f"{what}: want exit 2 and one Error: line, got exit {rc}, {err[-400:]!r}")


def probe_rows(trial: Trial, checks: Checks) -> None:
    query = CTE.format(n=10_000_000) + "SELECT x FROM c"
    popen = subprocess.Popen(trial.argv(("sql", query), None), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, cwd=trial.dir, env=trial.env())
    assert popen.stderr is not None
    err = popen.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(popen.pid, 0)
    popen.returncode = rc = os.waitstatus_to_exitcode(status)
    peak = usage.ru_maxrss * 1024
    checks.tally.notes.append(f"{checks.name}: exit {rc}, peak RSS {peak / 1e6:.1f} MB")
    checks.expect(rc == 0, f"exit {rc}: {err[-300:]!r}")
    checks.expect(peak < 100_000_000, f"peak RSS {peak / 1e6:.1f} MB (limit 100 MB)")


def probe_sigint(trial: Trial, checks: Checks) -> None:
    query = CTE.format(n=10**12) + "SELECT count(*) FROM c"
    runner = trial.start("sql", query)
    time.sleep(2.5)  # well into the query
    if not checks.expect(runner.popen.poll() is None,
                         f"the query ended by itself: {runner.popen.returncode}"):
        return
    sent = time.monotonic()
    runner.popen.send_signal(signal.SIGINT)
    try:
        rc = runner.popen.wait(10)
    except subprocess.TimeoutExpired:
        runner.popen.kill()
        rc = runner.popen.wait()
    took = time.monotonic() - sent
    checks.tally.notes.append(f"{checks.name}: exit {rc} {took:.2f}s after SIGINT")
    checks.expect(rc == 130 and took <= 1.0,
                  f"exit {rc} {took:.2f}s after SIGINT (want 130 within 1s)")
    no_traceback(checks, runner.stderr(), "sql after SIGINT")


def _state(folder: Path) -> dict[str, str]:
    """Every file under ``folder``: its hash (the -shm index only by name: readers write
    their read marks there)."""
    state = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            name = str(path.relative_to(folder))
            state[name] = ("-" if name.endswith("-shm")
                           else hashlib.sha256(path.read_bytes()).hexdigest())
    return state


def _refusal(query: str) -> Callable[[Trial, Checks], None]:
    def probe(trial: Trial, checks: Checks) -> None:
        warm = trial.call("sql", "SELECT count(*) FROM events")  # what a read leaves
        checks.expect(warm.returncode == 0, f"a plain read exited {warm.returncode}")
        before = _state(trial.dir)
        result = trial.call("sql", query)
        one_error_line(checks, result.returncode, result.stderr, query)
        checks.tally.notes.append(f"{checks.name}: exit {result.returncode}, "
                                  f"{result.stderr.strip()[:200]!r}")
        after = _state(trial.dir)
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        checks.expect(not changed, f"{query}: files made or changed: {changed}")
    return probe


def probe_oom(trial: Trial, checks: Checks) -> None:
    query = CTE.format(n=50_000_000) + "SELECT group_concat(x) FROM c"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (300_000_000, 300_000_000))

    result = subprocess.run(trial.argv(("sql", query), None), capture_output=True, text=True,
                            cwd=trial.dir, env=trial.env(), preexec_fn=limit, timeout=300)
    checks.tally.notes.append(f"{checks.name}: exit {result.returncode}, "
                              f"{result.stderr.strip()[:160]!r}")
    one_error_line(checks, result.returncode, result.stderr, "out of memory")


# --------------------------------------------------------------------------- 5. tamper


def family_tamper(root: Path) -> Tally:
    tally = Tally("tamper")
    trial = Trial(root, "tamper-tests")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/ledger/test_tamper.py", "-q", "-n0",
         "-p", "no:cacheprovider", "-rfE"],
        capture_output=True, text=True, cwd=REPO, env=trial.env(), timeout=600)
    counts = {word: int(num) for num, word in
              re.findall(r"(\d+) (passed|failed|errors?)\b", result.stdout.splitlines()[-1]
                         if result.stdout.strip() else "")}
    passed, failed = counts.get("passed", 0), counts.get("failed", 0)
    errors = counts.get("error", 0) + counts.get("errors", 0)
    tally.notes.append(f"test_tamper.py: {passed + failed + errors} tried, {passed} caught "
                       f"(pytest exit {result.returncode})")
    tally.trials += passed + failed + errors
    tally.failures += failed + errors
    for line in result.stdout.splitlines():
        if line.startswith(("FAILED", "ERROR")):
            tally.problems.append(f"tamper / {line[:300]}")
    if result.returncode not in (0, 1) or not counts:
        with tally.trial("pytest") as checks:
            checks.fail(f"pytest exited {result.returncode}: {result.stdout[-400:]!r}"
                        f" {result.stderr[-400:]!r}")
    anchors_end_to_end(root, tally)
    return tally


def anchors_end_to_end(root: Path, tally: Tally) -> None:
    """A real ledger, a checkpoint and run.json as anchors, then its last row deleted."""
    trial = Trial(root, "tamper-anchor")
    suite = trial.dir / "suite"
    suite.mkdir()
    for t in range(2):
        (suite / f"t{t}.yaml").write_text(yaml_task("echo hi", trial.mark))
    made = trial.call(*run_args(suite, "t", trial.out, 2), timeout=RUN_TIMEOUT)
    checkpoint = trial.dir / "cp.json"
    made_cp = trial.call("checkpoint", "-o", str(checkpoint))
    anchors = {"checkpoint": checkpoint, "run.json": trial.out / "t" / "run.json"}
    held = {name: trial.call("verify", "--anchor", str(path)) for name, path in anchors.items()}
    conn = sqlite3.connect(trial.db, isolation_level=None)
    try:
        trigger = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events_no_delete'"
                               ).fetchone()[0]
        last = conn.execute("SELECT max(seq) FROM events").fetchone()[0]
        conn.execute("DROP TRIGGER events_no_delete")
        conn.execute("DELETE FROM events WHERE seq = ?", [last])
        conn.execute(trigger)
    finally:
        conn.close()
    for name, path in anchors.items():
        with tally.trial(f"last row cut, verify --anchor {name}") as checks:
            checks.expect(made.returncode == 0 and made_cp.returncode == 0,
                          f"run/checkpoint exited {made.returncode}/{made_cp.returncode}")
            checks.expect(held[name].returncode == 0,
                          f"before the cut, verify --anchor {name} exited "
                          f"{held[name].returncode}: {held[name].stdout[-300:]!r}")
            result = trial.call("verify", "--anchor", str(path))
            checks.expect(result.returncode == 1 and "tail was cut" in result.stdout,
                          f"after the cut, verify --anchor {name} exited {result.returncode}:"
                          f" {(result.stdout + result.stderr)[-400:]!r}")


# --------------------------------------------------------------------------- main


def code_under_test() -> str:
    """Where the children's ``evalledger`` comes from (and the checkout's commit)."""
    found = subprocess.run([sys.executable, "-c", "import evalledger; print(evalledger.__file__)"],
                           capture_output=True, text=True, cwd=tempfile.gettempdir())
    package = Path(found.stdout.strip()).parent
    if package.parent != REPO:
        return str(package)
    git = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}  # read only: never touch the index
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, env=git).stdout.strip()
    edited = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "evalledger"],
                            capture_output=True, text=True, env=git).stdout.split("\n")
    edits = f", {len([e for e in edited if e])} files of it edited" if any(edited) else ""
    return f"{package} (checkout at {commit or 'an unknown commit'}{edits})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--trials", type=int, default=20,
                        help="SIGKILL trials; two-runs get half, disk-full a quarter")
    parser.add_argument("--only", nargs="*", default=None,
                        choices=["kill", "two", "disk", "sql", "tamper"],
                        help="run only these families")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    only = set(args.only or ["kill", "two", "disk", "sql", "tamper"])
    print(f"seed {seed} (python bench/campaign.py --seed {seed} --trials {args.trials})",
          flush=True)
    print(f"evalledger under test: {code_under_test()}", flush=True)
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="evalledger-campaign-"))
    tallies: list[Tally] = []
    try:
        full = 0
        if only & {"kill", "two"}:
            try:
                full = calibrate(root)
                print(f"a full run of the suite commits {full} events", flush=True)
            except Exception as e:  # the kill trials will say what is wrong
                full = 3000
                print(f"calibration failed ({e}); kill points drawn up to {full}", flush=True)
        plan = [("kill", lambda: family_sigkill(root, rng, args.trials, full)),
                ("two", lambda: family_two_runs(root, rng, max(1, args.trials // 2), full)),
                ("disk", lambda: family_disk_full(root, rng, max(1, args.trials // 4))),
                ("sql", lambda: family_sql(root)),
                ("tamper", lambda: family_tamper(root))]
        for key, family in plan:
            if key in only:
                try:
                    tally = family()
                except Exception as e:  # the family could not even be set up: say so
                    tally = Tally(key)
                    with tally.trial("setup") as checks:
                        checks.fail(f"campaign error: {type(e).__name__}: {e}")
                tallies.append(tally)
                print(f"... {tally.row()}  ({time.monotonic() - started:.0f}s)", flush=True)
    finally:
        for mount in sorted(root.glob("*/full")):  # a trial that died before its umount
            if os.path.ismount(mount):
                subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
    for tally in tallies:  # shorter lines: the root is gone anyway
        tally.notes = [n.replace(str(root), "$ROOT") for n in tally.notes]
        tally.problems = [p.replace(str(root), "$ROOT") for p in tally.problems]
    print(f"(trial folders were under {root}, shown as $ROOT, removed)")
    report(tallies, time.monotonic() - started)
    bad = any(t.failures or t.events_lost or t.processes_left for t in tallies)
    return 1 if bad else 0


def report(tallies: list[Tally], elapsed: float) -> None:
    print()
    print(f"{'family':<22} | trials | failures | events lost | processes left")
    print(f"{'-' * 22}-|--------|----------|-------------|---------------")
    for tally in tallies:
        print(tally.row())
    counted = [t for t in tallies if not t.skipped]
    print(f"{'total':<22} | {sum(t.trials for t in counted):>6} | "
          f"{sum(t.failures for t in counted):>8} | {sum(t.events_lost for t in counted):>11} | "
          f"{sum(t.processes_left for t in counted):>14}")
    print(f"\ntook {elapsed:.0f}s")
    notes = [f"  {t.family}: {note}" for t in tallies for note in t.notes]
    if notes:
        print("\nnotes:")
        print("\n".join(notes))
    problems = [p for t in tallies for p in t.problems]
    if problems:
        print("\nfailures:")
        print("\n".join(f"  {p}" for p in problems))


if __name__ == "__main__":
    sys.exit(main())
