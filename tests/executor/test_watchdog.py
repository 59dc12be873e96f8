"""Nothing is deleted or killed on the ledger's word: the proof a batch's folder carries,
what the sweep of dead batches believes, and the watchdog's own check, with real
folders, real ledger files, real processes and a real pipe.

Every hostile folder here lies in the test's own temp folder (``TMPDIR`` points into
``tmp_path``), with a file inside that must survive.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from evalledger.executor._marks import MARKER_VAR
from evalledger.executor._watchdog import (
    MARKER,
    Watchdog,
    dead_batches,
    make_folder,
    proven,
    sweep_dead_batches,
)
from evalledger.executor.isolation import BATCH_LABEL, DOCKER_MARK
from evalledger.ledger import Ledger, RunMerged, RunResumed, RunStarted

from ..needs import root, unavailable
from ..processes import alive, wait_gone
from ..waiting import PATIENCE, wait_until

# Random per process: a sweep these tests make kills every process on the machine that
# carries the token's mark, those of another xdist worker or another copy of the suite
# (a constant here once killed the "innocent" process of a test running beside it).
TOKEN = secrets.token_hex(8)
KEEP = "keep.txt"


def made_by_a_dead_process(*folders: tuple[Path, str]) -> int:
    """Make each (folder, token) with ``make_folder`` in a child process that then exits:
    the folders carry the proof a batch whose runner died leaves. Returns its pid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for folder, token in folders:
                make_folder(folder, token)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return pid


def a_dead_pid() -> int:
    return made_by_a_dead_process()


def keep(folder: Path) -> Path:
    """A file in ``folder`` that no sweep may take."""
    (folder / KEEP).write_text("mine", encoding="utf-8")
    return folder / KEEP


# -- hostile folders ---------------------------------------------------------------------------
# Each builds, in the temp folder (or around it), a folder a ledger row could name, and
# returns it, the files that must survive, and folders to protect (the ledger's).

Built = tuple[Path, list[Path], tuple[str, ...]]


@dataclass
class Place:
    temp: Path  # the temp folder batches' folders are made in
    tmp: Path  # the test's own folder, outside it
    mp: pytest.MonkeyPatch
    dead: bool  # markers made by a process that then exits, as a dead batch leaves them
    pid: int = 0  # the pid the markers made name

    def make(self, *folders: tuple[Path, str]) -> None:
        if self.dead:
            self.pid = made_by_a_dead_process(*folders)
        else:
            for folder, token in folders:
                make_folder(folder, token)
            self.pid = os.getpid()


Hostile = Callable[[Place], Built]


def no_marker(at: Place) -> Built:
    folder = at.temp / f"evalledger-r-{TOKEN}"
    folder.mkdir()
    return folder, [keep(folder)], ()


def another_tokens_marker(at: Place) -> Built:
    folder = at.temp / f"evalledger-r-{TOKEN}"
    at.make((folder, "fedcba9876543210"))
    return folder, [keep(folder)], ()


def a_symlink_to_a_batch_folder(at: Place) -> Built:
    real = at.temp / "real"
    at.make((real, TOKEN))
    link = at.temp / f"evalledger-r-{TOKEN}"
    link.symlink_to(real, target_is_directory=True)
    return link, [keep(real), link], ()


def a_marker_that_is_a_symlink(at: Place) -> Built:
    genuine = at.tmp / "genuine"
    folder = at.temp / f"evalledger-r-{TOKEN}"
    at.make((genuine, TOKEN))
    folder.mkdir()
    (folder / MARKER).symlink_to(genuine / MARKER)
    return folder, [keep(folder), genuine / MARKER], ()


def a_marker_that_is_a_folder(at: Place) -> Built:
    folder = at.temp / f"evalledger-r-{TOKEN}"
    folder.mkdir()
    (folder / MARKER).mkdir()
    return folder, [keep(folder)], ()


def a_marker_that_is_a_fifo(at: Place) -> Built:
    folder = at.temp / f"evalledger-r-{TOKEN}"
    folder.mkdir()
    os.mkfifo(folder / MARKER)  # opened, it would block a reader without O_NONBLOCK
    return folder, [keep(folder)], ()


def outside_the_temp_folder(at: Place) -> Built:
    folder = at.tmp / "project" / f"evalledger-r-{TOKEN}"
    folder.parent.mkdir()
    at.make((folder, TOKEN))
    return folder, [keep(folder)], ()


def deeper_in_the_temp_folder(at: Place) -> Built:
    folder = at.temp / "sub" / f"evalledger-r-{TOKEN}"
    folder.parent.mkdir()
    at.make((folder, TOKEN))
    return folder, [keep(folder)], ()


def through_dot_dot(at: Place) -> Built:
    folder = at.tmp / f"evalledger-r-{TOKEN}"  # outside the temp folder, named through it
    at.make((folder, TOKEN))
    return at.temp / os.path.relpath(folder, at.temp), [keep(folder)], ()


def the_home_folder(at: Place) -> Built:
    folder = at.temp / "home"
    at.make((folder, TOKEN))
    at.mp.setenv("HOME", str(folder))
    return folder, [keep(folder)], ()


def the_current_folder(at: Place) -> Built:
    folder = at.temp / "work"
    at.make((folder, TOKEN))
    at.mp.chdir(folder)
    return folder, [keep(folder)], ()


def a_folder_holding_the_current_one(at: Place) -> Built:
    folder = at.temp / "work"
    at.make((folder, TOKEN))
    (folder / "deep").mkdir()
    at.mp.chdir(folder / "deep")
    return folder, [keep(folder)], ()


def the_ledgers_folder(at: Place) -> Built:
    folder = at.temp / "ledgers"
    at.make((folder, TOKEN))
    return folder, [keep(folder)], (str(folder),)


def owned_by_another_user(at: Place) -> Built:
    root("giving a folder away")
    folder = at.temp / f"evalledger-r-{TOKEN}"
    at.make((folder, TOKEN))
    os.chown(folder, 65534, 65534)
    return folder, [keep(folder)], ()


def a_marker_owned_by_another_user(at: Place) -> Built:
    root("giving a file away")
    folder = at.temp / f"evalledger-r-{TOKEN}"
    at.make((folder, TOKEN))
    os.chown(folder / MARKER, 65534, 65534)
    return folder, [keep(folder)], ()


HOSTILE: list[Hostile] = [
    no_marker, another_tokens_marker, a_symlink_to_a_batch_folder, a_marker_that_is_a_symlink,
    a_marker_that_is_a_folder, a_marker_that_is_a_fifo, outside_the_temp_folder,
    deeper_in_the_temp_folder, through_dot_dot, the_home_folder, the_current_folder,
    a_folder_holding_the_current_one, the_ledgers_folder, owned_by_another_user,
    a_marker_owned_by_another_user,
]


# -- the proof ---------------------------------------------------------------------------------


def test_a_folder_made_for_a_batch_carries_its_proof(_private_temp: Path) -> None:
    folder = _private_temp / f"evalledger-r-{TOKEN}"
    make_folder(folder, TOKEN)
    assert [p.name for p in folder.iterdir()] == [MARKER]
    assert (folder.stat().st_mode & 0o777, (folder / MARKER).stat().st_mode & 0o777) == (
        0o700, 0o600)
    temp = str(_private_temp)
    assert proven(str(folder), TOKEN, temp)
    assert proven(str(folder), TOKEN, temp, pid=os.getpid())
    assert not proven(str(folder), TOKEN, temp, pid=a_dead_pid())
    assert not proven(str(folder), "fedcba9876543210", temp)
    assert not proven(str(folder), TOKEN[:-1], temp)
    with pytest.raises(FileExistsError):  # a batch's folder is always a new one
        make_folder(folder, TOKEN)


def test_a_folder_several_workers_share_is_made_once_and_keeps_the_first_marker(
    _private_temp: Path,
) -> None:
    folder = _private_temp / f"evalledger-ray-{TOKEN}"
    first = made_by_a_dead_process((folder, TOKEN))
    make_folder(folder, TOKEN, shared=True)
    assert proven(str(folder), TOKEN, str(_private_temp), pid=first)


@pytest.mark.parametrize("hostile", HOSTILE, ids=lambda h: h.__name__)
def test_no_proof_without_a_real_folder_of_ours_and_its_own_marker(
    hostile: Hostile, tmp_path: Path, _private_temp: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    at = Place(_private_temp, tmp_path, monkeypatch, dead=False)
    folder, _, protected = hostile(at)
    assert not proven(str(folder), TOKEN, str(_private_temp), pid=at.pid or None,
                      protected=protected)


def test_the_root_folder_is_never_proven() -> None:
    assert not proven("/", TOKEN, "/")
    assert not proven("/", TOKEN, "/", protected=())


# -- the sweep of dead batches -----------------------------------------------------------------


def forged_start(run_id: str, folder: Path | str, pid: int, token: str = TOKEN) -> RunStarted:
    """A run.started as a forged row says it: this host, a pid, a token and a folder."""
    return RunStarted(run_id=run_id, host={"hostname": socket.gethostname(), "pid": pid},
                      batch_token=token, sandbox_root=str(folder))


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("hostile", HOSTILE, ids=lambda h: h.__name__)
def test_the_sweep_removes_nothing_a_ledger_row_names_without_proof(
    hostile: Hostile, tmp_path: Path, _private_temp: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    at = Place(_private_temp, tmp_path, monkeypatch, dead=True)
    folder, survivors, protected = hostile(at)
    # The row names the pid that made the markers, if any: only the hostile part is wrong.
    pid = at.pid or a_dead_pid()
    # The ledger in the folder to protect, when that is the case.
    with Ledger(Path(protected[0] if protected else tmp_path) / "evalledger.db") as ledger:
        ledger.append([forged_start("forged", folder, pid)])
        swept = sweep_dead_batches(ledger)
    assert swept.batches == 1  # the row was read as a dead batch of this host...
    assert (swept.removed, swept.refused) == ([], [str(folder)])  # ...and not believed
    for path in survivors:
        assert os.path.lexists(path), f"{path} was removed"


def test_the_sweep_removes_a_dead_batchs_folder_that_proves_it(
    _private_temp: Path, ledger: Ledger,
) -> None:
    folder = _private_temp / f"evalledger-r-{TOKEN}"
    pid = made_by_a_dead_process((folder, TOKEN))
    keep(folder)
    ledger.append([forged_start("r", folder, pid)])
    assert sweep_dead_batches(ledger).removed == [str(folder)]
    assert not os.path.lexists(folder)


def test_the_sweep_removes_the_containers_of_a_dead_docker_batch(
    _private_temp: Path, ledger: Ledger, docker_images: dict[str, str],
) -> None:
    """A batch that ran containers died, and the next batch starts before its watchdog
    is done: the sweep removes the containers by the batch's label, counted apart from
    the processes it killed (adding the count to that list crashed the next run)."""
    folder = _private_temp / f"evalledger-r-{TOKEN}"
    pid = made_by_a_dead_process((folder, TOKEN))
    (folder / DOCKER_MARK).touch()
    started = subprocess.run(
        ["docker", "create", "--label", f"{BATCH_LABEL}={TOKEN}", docker_images["busybox"],
         "true"], capture_output=True, text=True, check=True)
    container = started.stdout.strip()
    try:
        ledger.append([forged_start("r", folder, pid)])
        swept = sweep_dead_batches(ledger)
        assert (swept.removed, swept.containers) == ([str(folder)], 1)
        left = subprocess.run(["docker", "ps", "-aq", "--no-trunc", "--filter",
                               f"id={container}"], capture_output=True, text=True, check=True)
        assert left.stdout.split() == []
    finally:
        subprocess.run(["docker", "rm", "-f", container], capture_output=True, check=False)


def test_the_sweep_kills_nothing_for_a_batch_whose_folder_proves_nothing(
    _private_temp: Path, ledger: Ledger,
) -> None:
    """A row naming the token of processes that are running (a live batch's, say) and a
    dead pid: those processes live on."""
    innocent = subprocess.Popen(["sleep", "300"],
                                env={**os.environ, MARKER_VAR: f"{TOKEN}-1"})
    try:
        ledger.append([forged_start("forged", _private_temp / "nowhere", a_dead_pid())])
        swept = sweep_dead_batches(ledger)
        assert swept.killed == []
        assert alive(innocent.pid)
    finally:
        innocent.kill()
        innocent.wait()


def test_a_run_that_arrived_by_merge_is_no_batch_of_this_host(
    _private_temp: Path, ledger: Ledger,
) -> None:
    """Even with a folder that proves it: what came from elsewhere is swept by nobody here;
    a later local batch of the same run is this host's again."""
    merged, local = (_private_temp / f"evalledger-r-{t}" for t in (TOKEN, "1" * 16))
    pid = made_by_a_dead_process((merged, TOKEN), (local, "1" * 16))
    ledger.append([forged_start("r", merged, pid)])
    ledger.append([RunMerged(run_id="r", source="elsewhere", events=1)])
    assert sweep_dead_batches(ledger).batches == 0
    assert merged.is_dir()
    ledger.append([RunResumed(run_id="r", host={"hostname": socket.gethostname(), "pid": pid},
                              batch_token="1" * 16, sandbox_root=str(local))])
    assert sweep_dead_batches(ledger).removed == [str(local)]
    assert merged.is_dir()


def test_dead_batches_reads_merges_finishes_and_hosts() -> None:
    host = "here"

    def row(run: str, type_: str, pid: int = 7, token: str = "t", hostname: str = host
            ) -> tuple[object, ...]:
        return (run, type_, hostname, pid, token, f"/tmp/{run}")

    rows = [
        row("finished", "run.started"), row("finished", "run.finished"),
        row("cut", "run.started", token="t1"), row("cut", "run.resumed", token="t2"),
        row("merged", "run.started"), row("merged", "run.merged"),
        row("elsewhere", "run.started", hostname="there"),
        row("alive", "run.started", pid=8),
    ]
    dead = dead_batches(rows, host, alive=lambda pid: pid == 8)
    assert [(b.run_id, b.token) for b in dead] == [("cut", "t1"), ("cut", "t2")]


# -- the watchdog ------------------------------------------------------------------------------


def runner_dies(watchdog: Watchdog) -> None:
    """What a runner's death looks like to its watchdog: the pipe's write end closes."""
    os.close(watchdog._write)
    watchdog.process.wait(60)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize("proof", [False, True], ids=["without proof", "with proof"])
def test_the_watchdog_removes_its_folder_only_with_the_proof(
    proof: bool, _private_temp: Path,
) -> None:
    folder = _private_temp / f"evalledger-r-{TOKEN}"
    watchdog = Watchdog(TOKEN, folder)
    if proof:
        make_folder(folder, TOKEN)
    else:  # what a bug, or a folder swapped for another, would hand it
        folder.mkdir()
    keep(folder)
    runner_dies(watchdog)
    assert folder.exists() is not proof


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_the_watchdog_cleans_up_after_a_runner_whose_current_folder_is_gone(
    _private_temp: Path,
) -> None:
    """The runner's current folder (a temporary one) is removed while the batch runs:
    its watchdog, which inherited it, still proves and removes the batch's folder. (A
    Ray worker's is its node's; a removed one left every batch folder there.)"""
    gone = _private_temp / "gone"
    gone.mkdir()
    folder = _private_temp / f"evalledger-r-{TOKEN}"
    before = os.getcwd()
    os.chdir(gone)
    try:
        watchdog = Watchdog(TOKEN, folder)
    finally:
        os.chdir(before)
    make_folder(folder, TOKEN)
    keep(folder)
    gone.rmdir()
    runner_dies(watchdog)
    assert not folder.exists()


def test_a_ray_workers_watchdog_removes_its_folder_and_the_last_one_the_nodes(
    _private_temp: Path,
) -> None:
    """The Ray worker's layout: the node's batch folder, one folder per worker (named by
    its pid) inside; the watchdog is detached, as on a worker."""
    base = _private_temp / f"evalledger-ray-{TOKEN}"
    make_folder(base, TOKEN, shared=True)
    (base / "workdirs").mkdir()
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        roots = [base / f"worker-{pid}" for pid in (child.pid, os.getpid())]
        watchdogs = [Watchdog(f"{TOKEN}-{root.name[7:]}", root, shared=(base, "worker-"))
                     for root in roots]
        for root in roots:
            make_folder(root, f"{TOKEN}-{root.name[7:]}", shared=True)
            keep(root)
        # A worker still alive: its folder, and so the node's, stay.
        os.close(watchdogs[1]._write)
        watchdogs[1].process.wait(60)
        wait_until(lambda: not roots[1].exists(), "the worker's folder to go",
                   timeout=2 * PATIENCE)
        assert roots[0].exists() and base.exists()
    finally:
        child.kill()
        child.wait()
    assert wait_gone(child.pid)
    os.close(watchdogs[0]._write)
    wait_until(lambda: not base.exists(), "the node's batch folder to go", timeout=2 * PATIENCE)


# A Ray worker's life in brief: its watchdog and folders as _session makes them, then
# what Ray does as a worker exits (``RAY_kill_child_processes_on_worker_exit``, on by
# default): SIGKILL every direct child, found by PPid in /proc. Here the worker exits at
# once, as the workers of a killed driver did whose attempt had only just started.
RAY_WORKER_EXITS = """
import os, signal, sys
from pathlib import Path
from evalledger.executor._watchdog import Watchdog, make_folder

base, batch = Path(sys.argv[1]), sys.argv[2]
token, root = f"{batch}-{os.getpid()}", base / f"worker-{os.getpid()}"
Watchdog(token, root, shared=(base, "worker-"))
make_folder(base, batch, shared=True)
make_folder(root, token, shared=True)
(root / "sandbox").mkdir()
for entry in os.scandir("/proc"):
    try:
        with open(f"/proc/{entry.name}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        continue
    if ppid == os.getpid():
        os.kill(int(entry.name), signal.SIGKILL)
os._exit(0)
"""


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_ray_workers_watchdog_survives_ray_killing_the_workers_children(
    _private_temp: Path,
) -> None:
    """A detached watchdog is no child of the worker by the time the worker goes on:
    Ray SIGKILLs an exiting worker's children, and a watchdog still starting (not yet
    detached) died with it, its batch's folders left for good (the Ray killed-driver
    leftover of issue #43)."""
    base = _private_temp / f"evalledger-ray-{TOKEN}"
    for _ in range(3):
        worker = subprocess.run([sys.executable, "-c", RAY_WORKER_EXITS, str(base), TOKEN],
                                capture_output=True, text=True, timeout=60, check=False)
        assert worker.returncode == 0, worker.stderr
        wait_until(lambda: not base.exists(), "the worker's watchdog to remove the folders",
                   timeout=2 * PATIENCE)


def test_a_folder_that_cannot_be_removed_whole_keeps_its_proof(tmp_path: Path) -> None:
    """A batch folder whose tree cannot be removed at once (here a mount point inside it:
    rm empties it and cannot remove it; in life, a process still dying in it) keeps its
    marker, so the next cleanup can still prove it is the batch's and finish the job."""
    from evalledger.executor._watchdog import MARKER, _remove, make_folder, proven

    root("a mount point inside the folder")
    token = secrets.token_hex(8)
    folder = tmp_path / f"evalledger-r-{token}"
    make_folder(folder, token)
    (folder / "attempt" / "busy").mkdir(parents=True)
    (folder / "attempt" / "left.txt").write_text("x")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(folder / "attempt" / "busy")],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        unavailable("ROOT", f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        _remove(str(folder))
        assert (folder / MARKER).exists() and (folder / "attempt" / "busy").exists()
        assert not (folder / "attempt" / "left.txt").exists()
        assert proven(str(folder), token, str(tmp_path))
    finally:
        subprocess.run(["umount", str(folder / "attempt" / "busy")], check=True)
    _remove(str(folder))
    assert not folder.exists()


@pytest.mark.parametrize("inside", ["nothing", "an empty marker", "a file", "a marker"])
def test_a_folder_its_runner_died_making_is_removed_and_no_other(inside: str) -> None:
    """A runner killed between ``mkdir`` and its marker's first byte leaves an empty
    folder (or one holding an empty marker): nothing to prove, nothing to lose, removed.
    A folder holding anything else without a proof of this token is left alone."""
    from evalledger.executor._watchdog import MARKER, _clean_up, make_folder

    token = secrets.token_hex(8)
    folder = Path(tempfile.gettempdir()) / f"evalledger-r-{token}"  # where batches make it
    if inside == "a marker":
        make_folder(folder, secrets.token_hex(8))  # another batch's
    else:
        folder.mkdir(mode=0o700)
    if inside == "an empty marker":
        (folder / MARKER).touch()
    elif inside == "a file":
        (folder / "data.txt").write_text("keep me")

    _clean_up(token, str(folder), "", "")

    assert folder.exists() is (inside in ("a file", "a marker"))


def test_a_batch_folder_swapped_for_a_link_empties_nothing(tmp_path: Path) -> None:
    """Between ``proven`` and the removal, whoever can write the temp folder may put a
    link to elsewhere in the batch folder's place: what the link points at is kept."""
    from evalledger.executor._watchdog import _remove

    elsewhere = tmp_path / "home"
    (elsewhere / "work").mkdir(parents=True)
    (elsewhere / "work" / "thesis.tex").write_text("years of it")
    swapped = tmp_path / "evalledger-r-0123456789abcdef"
    swapped.symlink_to(elsewhere)

    _remove(str(swapped))

    assert (elsewhere / "work" / "thesis.tex").read_text() == "years of it"


def test_an_unmarked_folder_swapped_for_a_link_unlinks_nothing_there(tmp_path: Path) -> None:
    """The cleanup of a folder its runner died making reads it through a descriptor
    opened without following a link: a link in its place, to a folder holding only an
    empty file of the marker's name (another batch's, just made), leaves that file."""
    from evalledger.executor._watchdog import MARKER, _clean_up

    elsewhere = tmp_path / "another-batch"
    elsewhere.mkdir()
    (elsewhere / MARKER).touch()
    swapped = tmp_path / "evalledger-r-0123456789abcdef"
    swapped.symlink_to(elsewhere)

    _clean_up(secrets.token_hex(8), str(swapped), "", "")

    assert (elsewhere / MARKER).exists()
    assert swapped.is_symlink()
