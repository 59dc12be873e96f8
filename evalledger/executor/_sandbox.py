"""Sandboxes: a fresh folder per attempt, holding a copy of the task's ``workdir``.

Preservation modes (docs/cli.md) decide where the sandbox lives and what is kept:

- ``none``: a temporary folder, deleted when the task ends;
- ``move-on-write`` (default): a temporary folder, moved to
  ``<out>/<run_id>/artifacts/<task_key>/`` when the task ends;
- ``direct-write``: the task runs in that artifacts folder itself.

Temporary sandboxes are numbered folders under one per-batch root in the system
temp dir (never inside the user's project: an agent running ``git`` there must
not find the user's repository). An earlier attempt's artifacts for the same key
are replaced.

Everything here is blocking file-system work, and the event loop never does it:
``prepare`` and ``finish`` run through ``trio.to_thread``, and the common case (an
empty sandbox, made and then thrown away) is a ``SandboxPool``'s: one worker thread
makes empty folders ahead of demand and removes the ones handed back, so a short
task's path holds no file-system call and no thread hop at all (a ``mkdir`` or
``rmdir`` on ext4 blocked 0.06-2.1 ms, and the hop cost more than either).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import shutil
import stat
import subprocess
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from evalledger.errors import EvalledgerError
from evalledger.options import PreservationMode

log = logging.getLogger("evalledger.executor")


class BuildFailed(EvalledgerError):
    """The sandbox could not be prepared (BUILD_FAILED)."""


_numbers = itertools.count(1)
# The most empty sandboxes a pool keeps made ahead, whatever -j says: `-j 10**20` made
# folders ahead until the disk ran out of inodes, and the batch never ended.
MAX_AHEAD = 256


def is_trivial(workdir: str | None, mode: PreservationMode) -> bool:
    """True when ``prepare`` is one ``mkdir`` under the root: what a pool makes ahead."""
    return workdir is None and mode != "direct-write"


def prepare(
    workdir: str | None, mode: PreservationMode, artifacts: Path, root: Path
) -> Path:
    """Create the sandbox for one attempt (under ``root`` unless direct-write) and
    copy ``workdir`` into it.

    Raises:
        BuildFailed: the workdir is missing or cannot be copied.
    """
    try:
        if mode == "direct-write":
            if artifacts.exists():
                remove_tree(artifacts)
            artifacts.parent.mkdir(parents=True, exist_ok=True)
            sandbox = artifacts
            sandbox.mkdir()
        else:
            sandbox = root / str(next(_numbers))
            sandbox.mkdir()
        if workdir is not None:
            source = Path(workdir)
            if not source.is_dir():
                raise BuildFailed(f"workdir {source} is not a folder")
            shutil.copytree(source, sandbox, symlinks=True, dirs_exist_ok=True,
                            ignore=_sockets)
    except BuildFailed:
        raise
    except (OSError, shutil.Error) as e:
        raise BuildFailed(f"cannot prepare the sandbox from {workdir}: {e}") from e
    except RecursionError as e:  # copytree recurses once per level
        raise BuildFailed(f"cannot prepare the sandbox from {workdir}: the tree is too "
                          "deep to copy") from e
    return sandbox


class SandboxPool:
    """Empty sandboxes under one batch's root, made and removed by one worker thread.

    ``take`` returns a folder made in advance (or None when the worker is behind: the
    caller makes one itself, off the loop); ``discard`` hands a sandbox back to be
    removed, whatever it holds. The worker is woken only when half the ready folders
    are used or half a batch of discarded ones waits: a wake-up per task cost more CPU
    than the ``mkdir`` it saved. ``close`` finishes the removals (call it from a
    thread). Deques are safe to share between the loop and the worker without a lock.
    """

    def __init__(self, root: Path, ahead: int) -> None:
        self.root = root
        self.ahead = min(max(2, ahead), MAX_AHEAD)
        self._ready: deque[Path] = deque()
        self._doomed: deque[Path] = deque()
        self._wake = threading.Event()
        self._closing = False
        self._worker = threading.Thread(target=self._work, name="evalledger-sandboxes",
                                        daemon=True)
        self._worker.start()
        self._wake.set()

    def take(self) -> Path | None:
        try:
            sandbox = self._ready.popleft()
        except IndexError:
            sandbox = None
        if len(self._ready) <= self.ahead // 2:
            self._wake.set()
        return sandbox

    def discard(self, sandbox: Path) -> None:
        self._doomed.append(sandbox)
        if len(self._doomed) >= self.ahead // 2:
            self._wake.set()

    def close(self) -> None:
        """Stop the worker once it has removed what it was given, and remove the ready
        sandboxes nobody took."""
        self._closing = True
        self._wake.set()
        self._worker.join()
        self._remove_doomed()
        while self._ready:
            with contextlib.suppress(OSError):
                self._ready.popleft().rmdir()

    def _remove_doomed(self) -> None:
        while self._doomed:
            sandbox = self._doomed.popleft()
            try:
                sandbox.rmdir()
            except OSError:  # not empty: the task left files
                remove_tree(sandbox, ignore_errors=True)

    def _work(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            self._remove_doomed()
            if self._closing:
                return
            while len(self._ready) < self.ahead and not self._closing:
                sandbox = self.root / str(next(_numbers))
                try:
                    sandbox.mkdir()
                except OSError as e:  # a full disk: tasks make their own (and say why)
                    log.debug("could not make a sandbox ahead: %s", e)
                    break
                self._ready.append(sandbox)


def finish(sandbox: Path, mode: PreservationMode, artifacts: Path) -> Path | None:
    """Keep or delete the sandbox per the mode; return where the artifacts are, if kept."""
    if mode == "direct-write":
        _kept(artifacts)
        return artifacts
    if mode == "none":  # the runner tried the empty case (one rmdir) already
        remove_tree(sandbox, ignore_errors=True)
        return None
    if not sandbox.exists():
        # Removed under the attempt: on a loaded Ray node the end-of-batch sweep can
        # remove the batch's folder before a cancelled attempt has closed. Nothing to
        # keep, and no folder made again (the artifacts' parents) for nobody to remove.
        return None
    if artifacts.exists():
        remove_tree(artifacts)
    artifacts.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(sandbox), str(artifacts), copy_function=_copy_file)
    _kept(artifacts)
    return artifacts


def private_folder(path: Path) -> None:
    """``path`` made (with its parents) and readable by its owner alone: a run's kept
    workspaces are what its agents left (their files, maybe secrets they printed into
    them), no other local user's to read or run."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)


def _kept(artifacts: Path) -> None:
    """``artifacts`` defused, or gone: never kept as the command left it."""
    try:
        defuse(artifacts)
    except OSError:
        remove_tree(artifacts, ignore_errors=True)
        raise


def remove_tree(root: Path, *, ignore_errors: bool = False) -> None:
    """``shutil.rmtree``, also for a tree too deep for it.

    On Python 3.11 ``shutil.rmtree`` recurses once per level: a command that leaves
    a tree 1,500 folders deep makes it raise RecursionError. ``rm -rf`` walks any
    depth, and like rmtree works through directory descriptors, so a symlink
    swapped in meanwhile is never followed out of the tree.

    Raises:
        OSError: the tree could not be removed (unless ``ignore_errors``).
    """
    try:
        shutil.rmtree(root, ignore_errors=ignore_errors)
    except RecursionError:
        done = subprocess.run(["rm", "-rf", "--", str(root)], capture_output=True, text=True,
                              check=False)
        if done.returncode and not ignore_errors:
            raise OSError(f"cannot remove {root}: {done.stderr.strip()}") from None


def copy_workspace(source: Path, target: Path) -> None:
    """A copy of a workspace to grade in: links kept as links (never followed), FIFOs,
    sockets and devices left out (what a grader cannot mean to read, and what would
    block or fail the copy), modes kept. ``target`` may exist.

    Raises:
        OSError: an entry cannot be read (shutil.Error is one).
        WorkspaceUnfit: ``source`` is nested too deep to copy (the command's doing).
    """
    from .isolation import check_fit

    check_fit(source)  # shutil.copytree recurses once per level
    shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True, ignore=_special,
                    copy_function=_copy_file)
    defuse(target)


# What a kept workspace must not hold: a file or folder the command made setuid or
# setgid (a copy of python3 setuid root, left by an agent that ran as root, is a root
# shell for any local user who reaches the artifacts), or writable by anyone.
_DANGEROUS_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_IWOTH


def defuse(root: Path) -> None:
    """Take the setuid, setgid and write-by-anyone bits off every file and folder under
    ``root`` (itself included), and remove its device files: what every path that keeps
    a workspace (the artifacts, a regrade's copy) does before anyone can reach it.

    Iterative (a tree 5,000 folders deep is walked, not recursed into); links are never
    followed. Whatever cannot be walked by name (a path past the system's length limit)
    is left to ``find``, which walks any depth.

    Raises:
        OSError: a dangerous entry could not be fixed (the caller then keeps nothing).
    """
    pending = [str(root)]
    try:
        while pending:
            folder = pending.pop()
            mode = os.lstat(folder).st_mode
            _defuse_entry(folder, mode)
            with _listed(folder, mode) as entries:
                for entry in entries:
                    mode = entry.stat(follow_symlinks=False).st_mode
                    if stat.S_ISDIR(mode):
                        pending.append(entry.path)
                    else:
                        _defuse_entry(entry.path, mode)
    except OSError as e:
        if e.errno not in (errno.ENAMETOOLONG, errno.ELOOP):
            raise
        _defuse_with_find(root)


def _listed(folder: str, mode: int
            ) -> contextlib.AbstractContextManager[Iterator[os.DirEntry[str]]]:
    """``os.scandir(folder)``; a folder its owner made unreadable (``chmod 000``, or
    ``111``: anyone may still reach a name inside) opened up to its owner first."""
    try:
        return os.scandir(folder)
    except PermissionError:
        os.chmod(folder, stat.S_IMODE(mode) | stat.S_IRWXU)
        return os.scandir(folder)


def _defuse_entry(path: str, mode: int) -> None:
    if stat.S_ISBLK(mode) or stat.S_ISCHR(mode):
        os.unlink(path)
    elif (stat.S_ISREG(mode) or stat.S_ISDIR(mode)) and mode & _DANGEROUS_BITS:
        os.chmod(path, stat.S_IMODE(mode) & ~_DANGEROUS_BITS)


def _defuse_with_find(root: Path) -> None:
    done = subprocess.run(
        ["find", str(root), "-xdev", "(", "-type", "b", "-o", "-type", "c", ")", "-delete",
         ",", "(", "-type", "f", "-o", "-type", "d", ")", "-perm", "/6002", "-execdir",
         "chmod", "u-s,g-s,o-w", "{}", "+"], capture_output=True, text=True, check=False)
    if done.returncode:
        raise OSError(f"cannot defuse {root}: {done.stderr.strip()[-500:]}")


def _special(folder: str, names: list[str]) -> set[str]:
    """Entries that are neither files, folders nor links, and folders the command made
    unreadable to the runner (``chmod 000``: nobody grading as it could list them
    either): not copied."""
    ignored = set()
    for name in names:
        path = os.path.join(folder, name)
        with contextlib.suppress(OSError):
            mode = os.lstat(path).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)) or (
                    stat.S_ISDIR(mode) and not os.access(path, os.R_OK | os.X_OK)):
                ignored.add(name)
    return ignored


def _copy_file(source: str, target: str) -> None:
    """``shutil.copy2``, holes kept (``_copy_data``); a file the command made unreadable
    to the runner is copied as an empty file of its mode (what a grader running as the
    runner finds: a file it cannot read), not an error of the runner's. A FIFO or a
    socket is made again, never opened (an open of a FIFO would wait for ever): a
    workspace kept on another file system then hashes as it did where the attempt left
    it, so a regrade takes it (the grading copy leaves them out before: ``_special``).
    A device is left out (``defuse`` removes it from whatever is kept)."""
    try:
        mode = os.lstat(source).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            os.mknod(target, stat.S_IFMT(mode) | 0o600)
        elif not stat.S_ISREG(mode):
            return
        else:
            _copy_data(source, target)
        shutil.copystat(source, target)
    except PermissionError:
        mode = stat.S_IMODE(os.lstat(source).st_mode)
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        os.chmod(target, mode)


_BLOCK = 1024 * 1024


def _copy_data(source: str, target: str) -> None:
    """The bytes of ``source`` into ``target``, its holes left holes: a sparse file
    costs its copy what it holds, not its size. A command can make a thousand files of a
    gigabyte each in a second, holding nothing: written out in full by a plain copy
    (the grading copy, the artifacts kept on another file system), they filled the
    host's disk."""
    with open(source, "rb") as src, open(target, "wb") as dst:
        size = os.fstat(src.fileno()).st_size
        at = 0
        while at < size:
            try:
                start = os.lseek(src.fileno(), at, os.SEEK_DATA)
                end = os.lseek(src.fileno(), start, os.SEEK_HOLE)
            except OSError as e:
                if e.errno == errno.ENXIO:  # nothing but a hole from here to its end
                    break
                if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                start, end = at, size  # holes unknown to this file system: all of it
            while start < end:
                block = os.pread(src.fileno(), min(_BLOCK, end - start), start)
                if not block:  # it shrank meanwhile
                    end = start
                    break
                os.pwrite(dst.fileno(), block, start)
                start += len(block)
            at = max(end, at + 1)
        dst.truncate(size)


def _sockets(folder: str, names: list[str]) -> set[str]:
    """Sockets cannot be copied, and mean nothing in a copy (git's fsmonitor leaves one)."""
    ignored = set()
    for name in names:
        with contextlib.suppress(OSError):
            if stat.S_ISSOCK(os.lstat(os.path.join(folder, name)).st_mode):
                ignored.add(name)
    return ignored
