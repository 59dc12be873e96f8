"""Which files of its task folder an attempt's processes opened, seen by the kernel.

Under isolation ``none`` an agent can read its task folder (the task file, criteria,
hidden tests) without printing a word of it. A root runner that holds each attempt in
a cgroup of its own (``_limits``) watches the task folders with fanotify: every open of
a file in a watched folder waits until this process has noted which cgroup the opener
is in, then is allowed. A permission event is used, not a plain notification, so the
opener is still alive (and still in its cgroup) when it is looked up: a ``cat`` that
ended before it was looked at would otherwise go unseen. Nothing is ever refused.

Only folders are marked (each with the files directly in it), never a workdir the
runner copies into sandboxes (its files are the agent's anyway), and at most
``MAX_FOLDERS`` per task folder. Elsewhere (not root, no cgroups, another kernel, a
confined attempt: the folder is not there to read) nothing is watched and the
attempt's ``folder_reads`` is left out.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import struct
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from evalledger._workspace_diff import WorkspaceUnfit, walk

log = logging.getLogger(__name__)

MAX_FOLDERS = 1000  # marks per task folder: one each, the kernel's memory
MAX_READS = 50  # files named per attempt (the count goes on)

_FAN_CLASS_CONTENT = 0x04
_FAN_CLOEXEC = 0x01
_FAN_MARK_ADD = 0x01
_FAN_OPEN_PERM = 0x00010000
_FAN_EVENT_ON_CHILD = 0x08000000
_FAN_ALLOW = 0x01
_AT_FDCWD = -100
_EVENT = struct.Struct("IBBHQii")  # struct fanotify_event_metadata
_RESPONSE = struct.Struct("iI")  # struct fanotify_response


class Reads:
    """What one attempt's processes opened in its task folder: relative paths, first
    seen first (at most ``MAX_READS``), and how many opens in all."""

    def __init__(self, folder: str) -> None:
        self.folder = folder.rstrip("/") + "/"
        self.paths: list[str] = []
        self.opens = 0

    def add(self, path: str) -> None:
        self.opens += 1
        if path.startswith(self.folder):
            relative = path[len(self.folder):]
            if relative not in self.paths and len(self.paths) < MAX_READS:
                self.paths.append(relative)


class FolderWatch:
    """One fanotify group for the process; attempts followed by their cgroup's name."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._marked: set[str] = set()
        self._following: dict[str, Reads] = {}
        self._lock = threading.Lock()
        threading.Thread(target=self._answer, daemon=True, name="folder watch").start()

    def marked(self, folder: Path) -> bool:
        """Whether ``folder`` is watched already (no walk, no thread needed)."""
        with self._lock:
            return str(folder) in self._marked

    def mark(self, folder: Path, skip: Path | None) -> bool:
        """Watch ``folder`` and the folders below it (not ``skip``'s); False if it
        cannot be (the caller records the attempt as not watched)."""
        key = str(folder)
        with self._lock:
            if key in self._marked:
                return True
        marked = 0
        try:
            for top, folders, _ in walk(folder):
                if skip is not None and Path(top).is_relative_to(skip):
                    folders.clear()
                    continue
                if marked >= MAX_FOLDERS:
                    break
                if _libc.fanotify_mark(self._fd, _FAN_MARK_ADD,
                                       _FAN_OPEN_PERM | _FAN_EVENT_ON_CHILD, _AT_FDCWD,
                                       os.fsencode(top)) != 0:
                    return False
                marked += 1
        except (WorkspaceUnfit, OSError):
            return False
        with self._lock:
            self._marked.add(key)
        return True

    @contextlib.contextmanager
    def follow(self, group: str, folder: Path) -> Iterator[Reads]:
        """Count what processes in cgroup ``group`` open in ``folder`` while it lasts."""
        reads = Reads(str(folder))
        with self._lock:
            self._following[group] = reads
        try:
            yield reads
        finally:
            with self._lock:
                self._following.pop(group, None)

    def _answer(self) -> None:
        while True:
            try:
                data = os.read(self._fd, 64 * _EVENT.size)
            except InterruptedError:
                continue
            except OSError:
                log.exception("the folder watch stopped")
                return
            offset = 0
            while offset + _EVENT.size <= len(data):
                length, _, _, _, _, fd, pid = _EVENT.unpack_from(data, offset)
                offset += max(length, _EVENT.size)
                if fd < 0:
                    continue  # the queue overflowed: nothing to answer
                try:
                    self._note(fd, pid)
                except Exception:
                    log.exception("a watched open could not be attributed")
                finally:
                    # Always allowed, always closed: a watch must never stop a process.
                    with contextlib.suppress(OSError):
                        os.write(self._fd, _RESPONSE.pack(fd, _FAN_ALLOW))
                    os.close(fd)

    def _note(self, fd: int, pid: int) -> None:
        with self._lock:
            if not self._following:
                return
        try:
            with open(f"/proc/{pid}/cgroup", encoding="utf-8") as lines:
                groups = {line.rstrip("\n").rpartition("/")[2] for line in lines}
        except OSError:
            return
        with self._lock:
            found = [self._following[g] for g in groups if g in self._following]
        if found:
            path = os.readlink(f"/proc/self/fd/{fd}")
            for reads in found:
                reads.add(path)


_libc: ctypes.CDLL
_watch: list[FolderWatch | None] = []


def watch() -> FolderWatch | None:
    """This process's watch, made the first time (None: fanotify is not for us here)."""
    global _libc
    if not _watch:
        found = None
        if sys.platform == "linux" and os.geteuid() == 0:
            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64,
                                            ctypes.c_int, ctypes.c_char_p]
            fd = _libc.fanotify_init(_FAN_CLASS_CONTENT | _FAN_CLOEXEC,
                                     os.O_RDONLY | os.O_LARGEFILE | os.O_CLOEXEC)
            found = FolderWatch(fd) if fd >= 0 else None
        _watch.append(found)
    return _watch[0]
