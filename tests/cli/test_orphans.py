"""Nothing outlives a runner killed by SIGKILL: the batch's watchdog and the sweep of
dead batches at the next start, with real processes and real signals.

Each task leaves a silent background child (``sleep 300 &``), the case where a
killed runner used to leave agents running with parent pid 1.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from evalledger.ledger import Ledger, LedgerError, RunStarted, verify
from evalledger.projections import SummaryFold, fold

from ..processes import marked
from ..waiting import PATIENCE, left_after, wait_until
from .helpers import EntryPoint, _env

# What the issue allows between a runner's death and the last of its processes.
GONE_WITHIN = 5.0
RUN = "orphans"


def wait_for_none(entry: str, within: float) -> list[int]:
    """The processes marked ``entry`` still running after up to ``within`` seconds."""
    return left_after(lambda: marked(entry), within, every=0.05)


def suite(folder: Path, tasks: int, isolation: dict[str, str] | None = None, *,
          working: float = 0.5) -> Path:
    """Tasks that leave a silent ``sleep 300`` behind, each done after ``working``
    seconds; their environment carries a mark of this test's own
    (``ORPHAN_TEST=<folder>``), so a second copy of the suite running at the same time
    is never mistaken for them."""
    folder.mkdir()
    for i in range(tasks):
        (folder / f"t{i}.yaml").write_text(yaml.safe_dump({
            "command": f"sleep 300 >/dev/null 2>&1 & sleep {working:g}; echo done",
            "env": {"ORPHAN_TEST": str(folder.parent)},
            "timeout": 60, "success_criteria": [{"type": "exit_code"}],
            **(isolation or {}),
        }), encoding="utf-8")
    return folder


def evalledger(db: Path, cwd: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "evalledger.cli", "--ledger", str(db), *args],
                            cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def started(db: Path) -> bool:
    if not db.exists():
        return False
    with Ledger(db, read_only=True) as ledger:
        return bool(list(ledger.rows(RUN, types={"run.started"})))


def sandboxes(tmp: Path) -> list[Path]:
    return sorted(tmp.glob(f"evalledger-{RUN}-*"))


def events(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with Ledger(db, read_only=True) as ledger:
            return ledger.count()
    except LedgerError:  # the file is being created
        return 0


@pytest.fixture(scope="module")
def entry_point(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EntryPoint]:
    server = EntryPoint(tmp_path_factory.mktemp("entry-point"))
    yield server
    server.close()


# The slow tier: a SIGKILL campaign, twenty kills per isolation.
@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["none", "bwrap", "docker"])
def test_twenty_sigkills_leave_no_process_and_no_sandbox(
    tmp_path: Path, _private_temp: Path, isolation: str, request: pytest.FixtureRequest,
    entry_point: EntryPoint,
) -> None:
    """... and no container: the watchdog removes a batch's containers by its label.

    The killed runners are forked from a server that imported the package once (an
    interpreter's start-up is not what is tried here, and cost most of each trial)."""
    keys = {"isolation": isolation}
    if isolation == "bwrap":
        request.getfixturevalue("bwrap")  # or the skip (the fail, in CI) saying why
    elif isolation == "docker":
        keys["image"] = request.getfixturevalue("docker_images")["busybox"]
    rng = random.Random(20)
    # Fewer under docker: a container costs 0.3-1 s to start, and what is tried is the
    # same (a kill before, during and after attempts; the resumes that finish the run).
    count = 3 if isolation == "docker" else 6
    tasks = suite(tmp_path / "tasks", count, keys)
    db = tmp_path / "ledger.db"
    mark = f"ORPHAN_TEST={tmp_path}"
    for trial in range(20):
        before = events(db)
        args = (["resume", RUN] if started(db)
                else ["run", str(tasks), "--run-id", RUN, "-j", "3"])
        runner = entry_point.start("--ledger", str(db), *args, cwd=tmp_path, env=_env())
        # A random moment of the batch, told by what it has committed: at once (before
        # run.started), after its opening, mid-task, between tasks, near the end.
        target = before + rng.choice([0, 1, 2, 4, 7, 10, 14, 20])
        wait_until(lambda target=target: events(db) >= target or entry_point.poll() is not None,
                   f"trial {trial}: the batch to make progress", every=0.01)
        with contextlib.suppress(ProcessLookupError):  # it may have ended by itself
            os.kill(runner, signal.SIGKILL)
        entry_point.wait()
        left = wait_for_none(mark, GONE_WITHIN)
        assert left == [], f"trial {trial}: {len(left)} processes outlived the runner"
        if isolation == "docker":
            assert wait_for_no_containers(db, GONE_WITHIN) == [], f"trial {trial}"
        if db.exists():
            with Ledger(db, read_only=True) as ledger:
                assert verify(ledger).ok, f"trial {trial}"
    final = subprocess.run([sys.executable, "-m", "evalledger.cli", "--ledger", str(db),
                            "resume", RUN], cwd=tmp_path, capture_output=True, text=True,
                           timeout=PATIENCE * 4, check=False)
    with Ledger(db, read_only=True) as ledger:
        assert verify(ledger).ok
        summary = fold(SummaryFold(RUN), ledger.events(RUN, types=SummaryFold.TYPES)).summary()
        batches = list(ledger.events(RUN, types={"run.started", "run.resumed"}))
    assert final.returncode == 0, (final.stdout, final.stderr, summary.model_dump())
    assert (summary.status, summary.tasks_succeeded, summary.tasks_planned) == (
        "completed", count, count)
    assert marked(mark) == []
    # The last killed batch's watchdog may still be sweeping (two seconds) when the final
    # resume is done: its folder goes next.
    left = left_after(lambda: sandboxes(_private_temp), GONE_WITHIN, every=0.05)
    assert left == [], f"a killed batch's sandbox folder was left behind: {left}"
    assert len(batches) >= 2  # it was resumed


def wait_for_no_containers(db: Path, within: float) -> list[str]:
    """The containers of every batch of the run still there after up to ``within``."""
    if not db.exists():
        return []
    with Ledger(db, read_only=True) as ledger:
        tokens = [e.batch_token for e in ledger.events(RUN, types={"run.started", "run.resumed"})]
    return left_after(lambda: [c for token in tokens if token for c in subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=evalledger.batch={token}"],
        capture_output=True, text=True, check=True).stdout.split()], within, every=0.1)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_dead_batch_is_swept_when_the_next_batch_starts(
    tmp_path: Path, _private_temp: Path
) -> None:
    """The watchdog itself was killed too (say, ``kill -9`` of everything): what the dead
    batch left is found through the ledger and cleaned up by the next run."""
    # Working until killed: a task done before the kill lands (a loaded machine, the
    # kill late) has its background child ended by the runner, and nothing is orphaned.
    tasks = suite(tmp_path / "tasks", 2, working=PATIENCE)
    db = tmp_path / "ledger.db"
    runner = evalledger(db, tmp_path, "run", str(tasks), "--run-id", RUN, "-j", "2")
    mark = f"ORPHAN_TEST={tmp_path}"
    # The tasks and their background children are up.
    wait_until(lambda: len(marked(mark)) >= 2, "the tasks to start", every=0.05)
    watchdogs = [pid for pid in _children_named(runner.pid, "_watchdog.py")]
    assert len(watchdogs) == 1
    for pid in [*watchdogs, runner.pid]:
        os.kill(pid, signal.SIGKILL)
    runner.wait(PATIENCE)
    assert marked(mark), "the tasks should be orphaned now: nothing watched them"
    assert sandboxes(_private_temp)
    with Ledger(db, read_only=True) as ledger:
        [opening] = ledger.events(RUN, types={"run.started"})
    assert isinstance(opening, RunStarted) and opening.batch_token and opening.sandbox_root
    other = suite(tmp_path / "other", 1)
    done = subprocess.run([sys.executable, "-m", "evalledger.cli", "--ledger", str(db), "run",
                           str(other), "--run-id", "next"], cwd=tmp_path, capture_output=True,
                          timeout=PATIENCE * 2, check=False)
    assert done.returncode == 0, done.stderr
    assert wait_for_none(mark, GONE_WITHIN) == []
    assert not Path(opening.sandbox_root).exists()


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("carried_by", ["import-events", "merge"])
def test_a_forged_run_started_never_deletes_its_folder(
    carried_by: str, tmp_path: Path, _private_temp: Path
) -> None:
    """run.started rows naming this host, a dead pid, a token and a folder with a file
    inside, carried into the ledger from elsewhere: the next ordinary run deletes nothing.
    One folder is a plain one; the other even carries a batch's marker made by the dead
    process (a real batch folder of some other ledger's run): arrived by a transfer, it
    is nobody's batch here."""
    plain = _private_temp / "evalledger-forged-0123456789abcdef"
    plain.mkdir()
    marked_folder = _private_temp / "evalledger-forged-fedcba9876543210"
    maker = subprocess.run(
        [sys.executable, "-c", "import os, sys; from pathlib import Path; "
         "from evalledger.executor._watchdog import make_folder; "
         "make_folder(Path(sys.argv[1]), sys.argv[2]); print(os.getpid())",
         str(marked_folder), "fedcba9876543210"],
        capture_output=True, text=True, timeout=PATIENCE, check=True)
    dead = int(maker.stdout)  # the maker has exited: its pid is a dead one
    keep = [plain / "keep.txt", marked_folder / "keep.txt"]
    for file in keep:
        file.write_text("not evalledger's to delete", encoding="utf-8")
    host = {"hostname": socket.gethostname(), "pid": dead}
    scratch = tmp_path / "elsewhere.db"
    with Ledger(scratch) as other:
        other.append([
            RunStarted(run_id="forged-plain", host=host, batch_token="0123456789abcdef",
                       sandbox_root=str(plain)),
            RunStarted(run_id="forged-marked", host=host, batch_token="fedcba9876543210",
                       sandbox_root=str(marked_folder)),
        ])
    db = tmp_path / "ledger.db"
    if carried_by == "merge":
        cli(tmp_path, db, "merge", str(scratch))
    else:
        exported = tmp_path / "forged.ndjson"
        cli(tmp_path, scratch, "export", "forged-plain", "forged-marked", "-o", str(exported))
        cli(tmp_path, db, "import-events", str(exported))
    with Ledger(db, read_only=True) as ledger:
        assert len(list(ledger.events(types={"run.started"}))) == 2
    cli(tmp_path, db, "run", str(suite(tmp_path / "tasks", 1)), "--run-id", "ordinary")
    for file in keep:
        assert file.read_text(encoding="utf-8") == "not evalledger's to delete"


def cli(cwd: Path, db: Path, *args: str) -> None:
    """``evalledger --ledger DB ARGS`` as a real process; it must succeed."""
    done = subprocess.run([sys.executable, "-m", "evalledger.cli", "--ledger", str(db), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=PATIENCE * 2,
                          check=False)
    assert done.returncode == 0, (args, done.stdout, done.stderr)


def _children_named(pid: int, needle: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                parent = int(f.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
        except (OSError, ValueError):
            continue
        if parent == pid and needle.encode() in cmdline:
            found.append(int(name))
    return found


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    # Whatever a failing assertion above left, do not let it outlive the test.
    for pid in marked(f"ORPHAN_TEST={tmp_path}"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
