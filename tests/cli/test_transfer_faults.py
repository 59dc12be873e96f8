"""Transfers stopped half-way, by SIGKILL or a full disk, as real processes on real files:
the ledger left behind verifies, running the same command again completes it, and its
run.merged rows account for exactly the events each run gained. ``verify`` while a
merge is writing never reports a ledger that is fine as FAILED. ``export -o`` leaves a
whole file or none.

A full disk is a small tmpfs mounted in a mount namespace of its own (skipped where
mounting is not permitted), or a file-size limit (RLIMIT_FSIZE) where any process can
set one.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from evalledger.ledger import (
    Ledger,
    RunFinished,
    RunStarted,
    TaskCompleted,
    TaskOutput,
    TaskStarted,
)
from evalledger.ledger._events import utc_now
from evalledger.ledger._transfer import BATCH
from evalledger.statuses import FinalStatus

from ..needs import unavailable
from .helpers import COMMAND, PATIENCE, _env, evalledger, spawn, wait_until

RUNS = ("r0", "r1", "r2")
# Two and a half batches: a kill after the first commit lands before the last.
EVENTS = 25_000
assert 2 * BATCH < EVENTS < 3 * BATCH, "sized for batches of 10,000"


def build_source(path: Path, events: int = EVENTS) -> int:
    """A ledger of three runs recorded at the same time (their events interleave), each
    run.started naming this ledger, as a run records it."""
    lines = 200
    tasks = max(1, events // (len(RUNS) * (lines + 2)))
    with Ledger(path) as ledger:
        ledger.append([RunStarted(run_id=r, ledger_id=ledger.ledger_id,
                                  planned=[f"default/t{t}/00" for t in range(tasks)])
                       for r in RUNS])
        for t in range(tasks):
            key = f"default/t{t}/00"
            batch: list = []
            for r in RUNS:
                ts = utc_now()
                batch.append(TaskStarted(run_id=r, task_key=key, task_id=f"t{t}"))
                batch += [TaskOutput.encoded(r, key, ts, "stdout", f"{r} {key} line {i}", i,
                                             False) for i in range(lines)]
                batch.append(TaskCompleted(run_id=r, task_key=key,
                                           category=FinalStatus.SUCCESS.category,
                                           final_status=FinalStatus.SUCCESS))
            ledger.append(batch)
        ledger.append([RunFinished(run_id=r, status="completed") for r in RUNS])
        return ledger.count()


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("source") / "source.db"
    build_source(path)
    return path


@pytest.fixture(scope="module")
def small_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An export of it is about 800 KB (90 KB gzipped): SQLite sorts each run in memory,
    writing nothing beside the -shm file it had."""
    path = tmp_path_factory.mktemp("small") / "small.db"
    build_source(path, 4000)
    return path


@pytest.fixture(scope="module")
def exported(source: Path) -> Path:
    path = source.parent / "source.ndjson"
    result = evalledger(source.parent, source, "export", *RUNS, "-o", str(path))
    assert result.returncode == 0, result
    return path


# Events per run but the derived ones (snapshots, run.merged).
FACTS = ("SELECT run_id, count(*) AS n FROM events WHERE type NOT IN ('run.snapshot', "
         "'run.merged') GROUP BY run_id")
# What the run.merged rows say each run gained, summed (docs/events.md).
PROVENANCE = ("SELECT run_id, sum(json_extract(payload, '$.events')) AS n FROM events "
              "WHERE type = 'run.merged' AND task_key IS NULL GROUP BY run_id")


def per_run(db: Path, sql: str) -> dict[str, int]:
    with Ledger(db, read_only=True) as ledger:
        return dict(ledger.query(sql)[1])


def facts_per_run(db: Path) -> dict[str, int]:
    return per_run(db, FACTS)


def provenance_per_run(db: Path) -> dict[str, int]:
    return per_run(db, PROVENANCE)


def committed(db: Path) -> int:
    """The destination's last seq, read as another process would (0 before it exists)."""
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=PATIENCE)) as c:
            return int(c.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])
    except sqlite3.Error:
        return 0


def kill_midway(proc: subprocess.Popen[str], db: Path) -> int:
    """SIGKILL ``proc`` as soon as its first batch is committed; the seq it got to."""
    def first_batch() -> bool:
        assert proc.poll() is None, f"the transfer ended first: {proc.communicate()}"
        return committed(db) > 0

    wait_until(first_batch, "the first batch of the transfer")
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    return committed(db)


def assert_accounted_and_verified(db: Path, cwd: Path) -> None:
    result = evalledger(cwd, db, "verify")
    assert result.returncode == 0, result.stdout
    facts = facts_per_run(db)
    assert provenance_per_run(db) == facts
    assert sum(provenance_per_run(db).values()) == sum(facts.values())


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("command", ["merge", "import-events"])
def test_a_transfer_killed_midway_verifies_and_running_it_again_completes_it(
        command: str, source: Path, exported: Path, tmp_path: Path) -> None:
    """Batches of 5,000 with one run.merged at the end: a kill left foreign run.started
    rows that verify reported FAILED forever, and the run.merged of the second run
    undercounted what was added."""
    db = tmp_path / "dest.db"
    what = str(source if command == "merge" else exported)
    total = sum(facts_per_run(source).values())
    reached = kill_midway(spawn(tmp_path, db, command, what), db)
    assert 0 < reached < total, "the kill did not land in the middle"

    assert_accounted_and_verified(db, tmp_path)
    again = evalledger(tmp_path, db, command, what)
    assert again.returncode == 0, again
    assert facts_per_run(db) == facts_per_run(source)
    assert_accounted_and_verified(db, tmp_path)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_verify_while_a_merge_writes_never_reports_failed(source: Path, tmp_path: Path) -> None:
    """verify read the run.merged rows, then the events: a merge committing between the
    two showed a foreign run.started without its provenance (FAILED)."""
    db = tmp_path / "dest.db"
    merging = spawn(tmp_path, db, "merge", str(source))
    wait_until(lambda: committed(db) > 0 or merging.poll() is not None, "the merge to begin")
    verdicts = []
    while merging.poll() is None:
        result = evalledger(tmp_path, db, "verify")
        verdicts.append(result.returncode)
        assert result.returncode == 0, result.stdout
    assert merging.wait() == 0, merging.communicate()
    assert verdicts, "the merge ended before verify could run"
    assert evalledger(tmp_path, db, "verify").returncode == 0


# -- a full disk -----------------------------------------------------------------------------


class Namespace:
    """A mount namespace of its own with a small tmpfs on ``folder``; commands run in it
    through nsenter, and this process sees its files through /proc/PID/root. It ends
    (and the tmpfs with it) when its holder's stdin closes: also if the test dies."""

    def __init__(self, folder: Path, size: str) -> None:
        self.folder = folder
        self.holder = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c",
             'mount -t tmpfs -o size="$2" tmpfs "$1" && echo ready && exec cat', "sh",
             str(folder), size],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.holder.stdout is not None
        if self.holder.stdout.readline().strip() != "ready":
            self.close()
            unavailable("ROOT", "cannot mount a tmpfs here (needs root and unshare)")

    def per_run(self, db: str, sql: str) -> dict[str, int]:
        """``per_run`` of a ledger on the tmpfs, read in the namespace (SQLite resolves
        /proc/PID/root to this namespace's root)."""
        done = self.evalledger(db, "sql", sql, "--format", "json")
        assert done.returncode == 0, done
        return {row["run_id"]: row["n"] for row in map(json.loads, done.stdout.splitlines())}

    def committed(self, db: str) -> int:
        done = self.evalledger(db, "sql", "SELECT coalesce(max(seq), 0) AS n FROM events",
                               "--format", "json")
        assert done.returncode == 0, done
        return int(json.loads(done.stdout)["n"])

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["nsenter", "-t", str(self.holder.pid), "-m", "--", *args],
                              env=_env(), capture_output=True, text=True, timeout=10 * PATIENCE)

    def evalledger(self, db: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(*COMMAND, "--ledger", f"{self.folder}/{db}", *args)

    def resize(self, size: str) -> None:
        done = self.run("mount", "-o", f"remount,size={size}", str(self.folder))
        assert done.returncode == 0, done.stderr

    def close(self) -> None:
        if self.holder.stdin is not None:
            self.holder.stdin.close()
        self.holder.wait(PATIENCE)


@pytest.fixture
def small_disk(tmp_path: Path, source: Path) -> Iterator[Namespace]:
    """Room for the first batch of a transfer of ``source``, not for all of it: an event
    takes in the file what it takes in ``source`` (the same layout), and a batch about
    as much again in the WAL. Measured on schema 14: 1.5 to 2.5 batches' bytes fill the
    disk after the first batch, 3.5 hold the whole transfer; 2 is the middle."""
    folder = tmp_path / "disk"
    folder.mkdir()
    stored = sum(f.stat().st_size for f in (source, Path(f"{source}-wal")) if f.exists())
    space = Namespace(folder, f"{BATCH * stored // EVENTS * 2 // 1024}k")
    yield space
    space.close()


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    return done.stderr


# The slow tier: a full disk, filled then grown.
@pytest.mark.slow
@pytest.mark.parametrize("command", ["merge", "import-events"])
def test_a_transfer_on_a_full_disk_is_one_line_and_completes_once_there_is_room(
        command: str, source: Path, exported: Path, small_disk: Namespace,
        tmp_path: Path) -> None:
    """merge printed "Exception ignored ... Cannot operate on a closed database" after its
    error, and left a ledger verify reported FAILED."""
    what = str(source if command == "merge" else exported)
    error = one_line(small_disk.evalledger("dest.db", command, what))
    assert "full" in error
    assert small_disk.committed("dest.db") > 0, "the disk filled before the first batch"
    verified = small_disk.evalledger("dest.db", "verify")
    assert verified.returncode == 0, verified
    assert small_disk.per_run("dest.db", PROVENANCE) == small_disk.per_run("dest.db", FACTS)

    small_disk.resize("256m")
    again = small_disk.evalledger("dest.db", command, what)
    assert again.returncode == 0, again
    assert small_disk.per_run("dest.db", FACTS) == facts_per_run(source)
    assert small_disk.per_run("dest.db", PROVENANCE) == facts_per_run(source)
    assert small_disk.evalledger("dest.db", "verify").returncode == 0


# -- export -o ---------------------------------------------------------------------------------


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("name", ["out.ndjson", "out.ndjson.gz"])
def test_export_to_a_file_that_does_not_fit_leaves_no_file(small_source: Path, tmp_path: Path,
                                                            name: str) -> None:
    """A full disk left a 0-byte (or cut) export that import-events took as complete."""
    limit = 48 * 1024  # less than the export, even compressed: the disk is "full" there

    def cap_file_size() -> None:  # Python ignores SIGXFSZ: a write past it fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    folder = tmp_path / "out"
    folder.mkdir()
    done = subprocess.run([*COMMAND, "--ledger", str(small_source), "export", *RUNS, "-o",
                           str(folder / name)], env=_env(), capture_output=True, text=True,
                          preexec_fn=cap_file_size, timeout=10 * PATIENCE)
    error = one_line(done)
    assert name in error and "nothing was written" in error
    assert list(folder.iterdir()) == []


def test_export_over_an_old_file_keeps_it_when_the_new_one_does_not_fit(
        small_source: Path, tmp_path: Path) -> None:
    target = tmp_path / "run.ndjson"
    target.write_text("the previous export\n")

    def cap_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (48 * 1024, 48 * 1024))

    done = subprocess.run([*COMMAND, "--ledger", str(small_source), "export", "r0", "-o",
                           str(target)], env=_env(), capture_output=True, text=True,
                          preexec_fn=cap_file_size, timeout=10 * PATIENCE)
    one_line(done)
    assert target.read_text() == "the previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ndjson"]


def test_export_on_a_full_tmpfs_leaves_no_file(small_source: Path, tmp_path: Path) -> None:
    folder = tmp_path / "disk"
    folder.mkdir()
    tiny = Namespace(folder, "256k")
    try:
        done = tiny.run(*COMMAND, "--ledger", str(small_source), "export", *RUNS, "-o",
                        f"{folder}/run.ndjson")
        assert "nothing was written" in one_line(done)
        listing = tiny.run("ls", "-A", str(folder))
        assert listing.returncode == 0 and listing.stdout == "", listing
    finally:
        tiny.close()


def test_an_export_is_written_whole_with_the_permissions_of_a_new_file(
        small_source: Path, tmp_path: Path) -> None:
    target = tmp_path / "run.ndjson"
    assert evalledger(tmp_path, small_source, "export", "r0", "-o", str(target)).returncode == 0
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ndjson"]
    assert target.read_text(encoding="utf-8").splitlines()[-1].startswith('{"trailer":')


def test_export_through_a_link_replaces_the_file_it_names(small_source: Path,
                                                          tmp_path: Path) -> None:
    (tmp_path / "real.ndjson").write_text("old\n")
    (tmp_path / "link.ndjson").symlink_to("real.ndjson")
    link = tmp_path / "link.ndjson"
    assert evalledger(tmp_path, small_source, "export", "r0", "-o", str(link)).returncode == 0
    assert link.is_symlink() and os.readlink(link) == "real.ndjson"
    assert (tmp_path / "real.ndjson").read_text().splitlines()[-1].startswith('{"trailer":')
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.ndjson", "real.ndjson"]
