"""Nothing a batch started outlives its runner, even a runner killed by SIGKILL.

A runner that dies by SIGKILL (or the OOM killer) runs no cleanup: its agents
would live on, spending, and its sandboxes stay in the temp folder. So every
batch starts a watchdog: a small process in its own session (Ctrl-C and a closed
terminal do not reach it) that holds the read end of a pipe whose only write end
is the runner's. When the runner ends normally it writes ``done`` and the
watchdog leaves. When the runner dies, the kernel closes the write end, the
watchdog reads end-of-file, kills every process carrying the batch's mark (for a
few seconds, in case one was being spawned at that moment) and removes the
batch's sandbox folder.

A second line of defence: ``sweep_dead_batches`` runs when a batch starts and
does the same for every batch the ledger recorded on this host whose process is
gone and that never recorded ``run.finished``.

Nothing is deleted on the ledger's word: a ledger's rows can come from anywhere
(``merge``, ``import-events``, anyone who can write the file). A batch's folder
carries its own proof, made before anything else in it: a marker file naming the
batch's token and the pid that made it. A folder is removed only when it is a real
directory (not a symlink) owned by this user, directly inside the temp folder it
was made in, never ``/``, the home folder, the current folder or the ledger's,
and its marker is a regular file owned by this user naming exactly the token
(and, for the sweep, the pid) the batch recorded. Short of that proof nothing is
removed and nothing killed. Runs that arrived by ``merge`` or ``import-events``
(a ``run.merged`` after their start) are never batches of this host.

This file is also the watchdog's program: ``python _watchdog.py TOKEN ROOT``. Run
that way it imports nothing of the package, only ``_marks`` and ``isolation`` beside it
(the standard library only). A batch that started containers says so in its folder
(``DOCKER_MARK``): they outlive their killed ``docker run`` clients, and are removed by
the batch's label.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # the watchdog itself: a bare interpreter
    # Detached (a Ray worker's): leave the parent before anything else, which waits for
    # this first process to exit. Ray SIGKILLs an exiting worker's children; a watchdog
    # still its child then died with it (issue #43: the killed driver's leftovers).
    if sys.argv[3:4] == ["detach"]:
        del sys.argv[3]
        if os.fork():
            os._exit(0)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _marks import MARKER_VAR, batch_mark, kill_marked, ray_mark  # type: ignore[import-not-found]
    from isolation import DOCKER_MARK, remove_containers  # type: ignore[import-not-found]
else:
    from evalledger.ledger._queries import Boundary
    from evalledger.projections._status import shown_status
    from evalledger.statuses import RunStatus, ShownStatus

    from ._marks import MARKER_VAR, batch_mark, kill_marked, ray_mark
    from .isolation import DOCKER_MARK, remove_containers

DONE = b"done"
# The proof inside a batch's folder that this program made it (see ``make_folder``).
MARKER = ".evalledger-batch"
# A marker is a few dozen bytes; more is not one of ours.
MARKER_MAX = 4096
# After the runner died: keep killing marked processes this long, so that one the
# runner was spawning at that very moment is caught too.
SWEEP_SECONDS = 2.0
# After a docker batch's runner died: keep removing its containers this long.
DOCKER_SETTLE_SECONDS = 10.0


def _remove(root: str) -> None:
    """Remove a batch's folder, its marker last: a tree that cannot be removed whole now
    (a process still dying in it writes one more file) keeps its proof, so the next
    cleanup (the watchdog's second, the next run's sweep) may still remove it. Removed
    marker first, such a folder was left for good, unprovable.

    The folder is reached through one descriptor, opened without following a link: a
    folder swapped for a link to elsewhere after ``proven`` is never the one emptied."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        inside = [name for name in os.listdir(fd) if name != MARKER]
        if inside:
            # rm walks a tree of any depth without following symlinks out of it; it is
            # given the entries through this descriptor (/proc/self/fd: rm's own copy).
            subprocess.run(["rm", "-rf", "--", *(f"/proc/self/fd/{fd}/{n}" for n in inside)],
                           pass_fds=(fd,), capture_output=True, check=False)
        if any(name != MARKER for name in os.listdir(fd)):
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(MARKER, dir_fd=fd)
    except OSError:
        return
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(root)  # a link put in its place meanwhile is no directory: ENOTDIR


def make_folder(folder: Path, token: str, *, shared: bool = False) -> None:
    """Make a batch's folder (mode 0700) and, before anything else in it, its marker:
    a file (mode 0600) made with ``O_EXCL`` naming ``token`` and this process's pid,
    the proof ``proven`` asks for before anything removes the folder.

    ``shared``: a folder several processes of one batch make (a Ray node's batch
    folder): one already there is used, and its marker, if another made it first.

    Raises:
        OSError: the folder exists (unless ``shared``) or cannot be made; a folder this
            call made is removed again.
    """
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        if not shared:
            raise
        made = False
    else:
        made = True
    body = json.dumps({"token": token, "pid": os.getpid()}).encode() + b"\n"
    try:
        fd = os.open(folder / MARKER,
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        if not shared:
            raise
        return  # another process of the batch was first
    except BaseException:
        if made:
            folder.rmdir()
        raise
    try:
        os.write(fd, body)  # one write: a marker is whole or empty, never another token
    except BaseException:
        if made:
            _remove(str(folder))
        raise
    finally:
        os.close(fd)


def proven(folder: str, token: str, parent: str, *, pid: int | None = None,
           protected: tuple[str, ...] = ()) -> bool:
    """Whether ``folder`` is provably a batch's folder this program made for ``token``:
    a directory, not a symlink, owned by this user, directly inside ``parent`` (as
    resolved), none of ``/``, the home folder, the current folder or ``protected`` (nor
    a folder holding one), with a marker that is a regular file owned by this user
    naming ``token`` (and ``pid``, when given). Anything else, or any error: False.
    """
    try:
        if not _placed_safely(os.path.realpath(folder), parent, protected):
            return False
        # The folder by descriptor, not followed: what is checked is what holds the marker.
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (OSError, ValueError):
        return False
    try:
        mark = _own_marker(dir_fd)
    except (OSError, ValueError):
        return False
    finally:
        os.close(dir_fd)
    return (isinstance(mark, dict) and mark.get("token") == token
            and (pid is None or mark.get("pid") == pid))


def _placed_safely(real: str, parent: str, protected: tuple[str, ...]) -> bool:
    """Directly inside ``parent``, and neither a folder to keep nor one holding it."""
    if os.path.dirname(real) != os.path.realpath(parent):
        return False
    keep = ["/", os.path.expanduser("~"), _current_folder(), *protected]
    return not any(kept == real or kept.startswith(real.rstrip("/") + "/")
                   for kept in (os.path.realpath(k) for k in keep if k))


def _current_folder() -> str:
    """The current folder; "" once it was removed. A watchdog inherits its runner's,
    which may go while it waits (a temporary folder, a test's): with ``getcwd`` raising
    there, no proof held and nothing was ever cleaned up."""
    try:
        return os.getcwd()
    except OSError:
        return ""


def _own_marker(dir_fd: int) -> Any:
    """The folder's marker, decoded, if the folder and the marker (a regular file) are
    this user's; else None. Raises OSError, ValueError."""
    if os.fstat(dir_fd).st_uid != os.getuid():
        return None
    fd = os.open(MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                 dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            return None
        body = os.read(fd, MARKER_MAX + 1)
    finally:
        os.close(fd)
    return json.loads(body) if len(body) <= MARKER_MAX else None


def watch(token: str, root: str, shared: str = "", last: str = "") -> None:
    """The watchdog: wait for the runner to end; if it died, clean up after it.

    ``shared``: a folder the runner shared with its siblings (a Ray worker's batch
    folder on its node), removed too once every sibling's folder in it (named ``last``
    and its pid) belongs to a process that is gone: siblings dying together each see
    the others' folders still there, so absence alone would leave it behind.
    """
    if sys.stdin.buffer.read() == DONE:
        return
    # The attempts, and a local Ray started for the batch (its processes carry the mark).
    marks = (batch_mark(token), ray_mark(token))
    kill_marked(*marks, prefix=True)
    # Cleaned at once, then again after the sweep for one spawned at that very moment:
    # a watchdog that is itself ended meanwhile (a Ray node reaping orphans) has done
    # the work by then, not left it to a sweep that never came.
    docker = bool(root) and os.path.exists(os.path.join(root, DOCKER_MARK))
    _clean_up(token, root, shared, last)
    died = time.monotonic()
    while time.monotonic() < died + SWEEP_SECONDS:
        kill_marked(*marks, prefix=True)
        time.sleep(0.1)
    _clean_up(token, root, shared, last)
    # dockerd finishes a `create` its killed client asked for whenever it gets to it: on
    # a busy daemon, seconds later (a container left "Created", seen under two suites'
    # load). Its label still names the batch.
    while docker and time.monotonic() < died + DOCKER_SETTLE_SECONDS:
        time.sleep(0.5)
        remove_containers(token)


def _clean_up(token: str, root: str, shared: str, last: str) -> None:
    """Remove the batch's containers, its folder and (the last sibling gone) the shared one."""
    # Containers outlive the `docker run` clients just killed: removed by the batch's label.
    if root and os.path.exists(os.path.join(root, DOCKER_MARK)):
        remove_containers(token)
    # The runner named these folders itself; still, removed only with their proof (a
    # bug, or a folder swapped meanwhile, never makes this an ``rm -rf`` of anything).
    temp = tempfile.gettempdir()
    if root and proven(root, token, shared or temp):
        _remove(root)
    elif root:
        _remove_unmarked(root)
    # A Ray node's batch folder names the batch's token; a worker's, ``<token>-<pid>``.
    if shared and proven(shared, token.rsplit("-", 1)[0], temp):
        try:
            siblings = [n[len(last):] for n in os.listdir(shared) if n.startswith(last)]
        except OSError:
            return  # gone already
        if not any(_alive(pid) for pid in siblings):
            _remove(shared)


def _remove_unmarked(root: str) -> None:
    """The folder of a runner killed while making it (``make_folder``: between the
    ``mkdir`` and its marker's first byte): empty, or holding only an empty marker.
    Nothing in it to prove, and nothing to lose: ``rmdir`` removes only an empty folder."""
    # Through one descriptor opened without following a link, as _remove: a folder
    # swapped for a link meanwhile never has the link's target's marker unlinked.
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        names = os.listdir(fd)
        if names == [MARKER]:
            info = os.lstat(MARKER, dir_fd=fd)
            if not (stat.S_ISREG(info.st_mode) and info.st_size == 0
                    and info.st_uid == os.getuid()):
                return
            os.unlink(MARKER, dir_fd=fd)
        elif names:
            return
    except OSError:
        return
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(root)  # a link put in its place meanwhile is no directory: ENOTDIR


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except ValueError:
        return True  # not a pid: not ours to judge
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Watchdog:
    """The runner's side: start the watchdog, and tell it when the batch ended well."""

    def __init__(self, token: str, sandbox_root: Path, shared: tuple[Path, str] | None = None
                 ) -> None:
        read, self._write = os.pipe()  # both ends not inherited by later children
        # With ``shared`` (a Ray worker): detached, not our child. Ray kills a dead
        # worker's children, and the watchdog has work to do after the worker died.
        also = ["detach", str(shared[0]), shared[1]] if shared else []
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-S", os.path.abspath(__file__), token, str(sandbox_root),
                 *also],
                stdin=read, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True,
                # Never marked itself: a sweep of whatever the runner carries (a local Ray
                # started for a batch, an outer batch) must not take its cleaner too. Its
                # temp folder is the runner's, where the batch's folder must lie.
                env={**{k: v for k, v in os.environ.items() if k != MARKER_VAR},
                     "TMPDIR": tempfile.gettempdir()},
            )
        finally:
            os.close(read)
        if shared:
            # Returns once the watchdog has left: from then on it is no child of ours,
            # and what ends this process's children at its exit cannot reach it.
            self.process.wait()

    def done(self) -> None:
        """The batch ended and cleaned up after itself: the watchdog may go."""
        try:
            os.write(self._write, DONE)
        except OSError:
            pass  # it is gone already; nothing to tell
        finally:
            os.close(self._write)


@dataclass
class Sweep:
    """What ``sweep_dead_batches`` cleaned up."""

    batches: int = 0
    killed: list[int] = field(default_factory=list)
    containers: int = 0
    removed: list[str] = field(default_factory=list)
    # Recorded folders still there without the proof: left alone, nothing killed.
    refused: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DeadBatch:
    """A batch the ledger says ran here and died: what it claims, not yet believed."""

    run_id: str
    token: str
    pid: int
    sandbox_root: str | None


@dataclass
class _Batch:
    """One start or resume of a run, as its boundary recorded it."""

    run_id: str
    hostname: Any
    pid: Any
    token: Any
    root: Any
    # The status of the run.finished that ended it; "running" while none has.
    recorded: str = "running"

    def dead(self, hostname: str, alive: Callable[[int], bool]) -> bool:
        """Whether it is a batch of ``hostname`` whose process ``alive`` says is gone
        without recording run.finished: cut off, in ``shown_status``'s words."""
        if not (isinstance(self.token, str) and self.token and self.hostname == hostname
                and isinstance(self.pid, int)):
            return False
        pid = self.pid
        return shown_status(self.recorded, lambda: not alive(pid)) is ShownStatus.CUT_OFF


def dead_batches(rows: Iterable[Sequence[Any]], hostname: str,
                 alive: Callable[[int], bool]) -> list[DeadBatch]:
    """Every batch recorded on ``hostname`` that never recorded ``run.finished`` and
    whose process ``alive(pid)`` says is gone.

    ``rows``: the ledger's run boundaries in seq order (``run_boundaries``). A
    run.finished ends its run's latest batch; a batch followed by another start of
    its run without one was cut off (a resume refuses to start while it lives). A
    run.merged comes after the events a ``merge`` or ``import-events`` added: every
    batch of its run recorded before it came from elsewhere, and is nobody's here.
    """
    batches: list[_Batch] = []
    latest: dict[str, _Batch] = {}
    for row in (Boundary(*r) for r in rows):
        if row.type == "run.merged":
            batches = [b for b in batches if b.run_id != row.run_id]
            latest.pop(row.run_id, None)
        elif row.type == "run.finished":
            if row.run_id in latest:
                latest[row.run_id].recorded = _finished_status(row.status)
        else:
            latest[row.run_id] = _Batch(row.run_id, row.hostname, row.pid, row.batch_token,
                                        row.sandbox_root)
            batches.append(latest[row.run_id])
    return [DeadBatch(b.run_id, b.token, b.pid, b.root if isinstance(b.root, str) else None)
            for b in batches if b.dead(hostname, alive)]


def _finished_status(status: Any) -> str:
    # A run.finished ends its batch whatever status it carries (one this version does
    # not know included): that it was recorded is what matters here.
    return status if status in set(RunStatus) else RunStatus.COMPLETED.value


def sweep_dead_batches(ledger: Any) -> Sweep:
    """Kill what dead batches of this host left running, and remove their sandboxes:
    only those whose folder proves it (``proven``) was made by the very batch the
    ledger names, same token, same pid. A folder gone already leaves nothing to do: the
    watchdog kills before it removes."""
    import socket

    from evalledger.hosts import running_pid
    from evalledger.ledger._queries import run_boundaries

    def alive(pid: int) -> bool:
        return running_pid({"hostname": hostname, "pid": pid}, finished=False) is not None

    hostname = socket.gethostname()
    dead = dead_batches(run_boundaries(ledger), hostname, alive)
    sweep = Sweep(batches=len(dead))
    temp = tempfile.gettempdir()
    ledger_folder = os.path.dirname(os.path.abspath(ledger.path))
    mine: list[tuple[str, str]] = []  # (token, folder) of the batches proven ours
    for batch in dead:
        root = batch.sandbox_root
        if not root or not os.path.lexists(root):
            continue
        if proven(root, batch.token, temp, pid=batch.pid, protected=(ledger_folder,)):
            mine.append((batch.token, root))
        else:
            sweep.refused.append(root)
    if mine:
        sweep.killed = kill_marked(*(mark(token) for token, _ in mine
                                     for mark in (batch_mark, ray_mark)), prefix=True)
    for token, root in mine:
        if os.path.exists(os.path.join(root, DOCKER_MARK)):
            sweep.containers += remove_containers(token)
        _remove(root)
        sweep.removed.append(root)
    return sweep


if __name__ == "__main__":
    watch(*sys.argv[1:5])
