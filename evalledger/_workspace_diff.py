"""What an agent changed in its workspace: the one reading of a tree it made, for the
viewer and the HTML report (``compare``: the files added, removed and modified, each
with its diff's lines) and for a judge (``unified_diff``: one unified diff as text).

The workspace is the agent's work, so read as an adversary's: every reader walks it with
``walk`` (top-down, without recursion, no deeper than ``MAX_DEPTH`` and no path longer
than ``MAX_RELATIVE_PATH``: ``WorkspaceUnfit`` past either), nothing is followed out of
it (a link is named as a link, never read), a file is read through a descriptor opened
without following a link or waiting on a FIFO (``read_head``), and what is shown is
bounded (files, bytes a file, diff lines, a judge's characters). Standard library only:
the executor grades with it, the app shows with it.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ._diffs import diff_lines

# How deep, and how long a path below it, a workspace may be to be graded: past either
# what a command left cannot be copied, hashed or diffed by name (Linux's PATH_MAX is
# 4,096 bytes, the workspace's own folder included), and it is the command's doing.
MAX_DEPTH = 256
MAX_RELATIVE_PATH = 3072


class WorkspaceUnfit(Exception):
    """What the command left cannot be graded (its message says why: folders nested too
    deep, a path too long). The command's doing: the attempt fails, the agent's failure."""


def walk(root: Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(root)`` top-down with each folder's names sorted, without recursion and
    bounded: what every reader of a workspace the command left walks it with. Links to
    folders are listed among the folders and not entered; a folder that cannot be listed
    has no names.

    Raises:
        WorkspaceUnfit: folders nested deeper than ``MAX_DEPTH``, or a path longer than
            ``MAX_RELATIVE_PATH`` bytes below ``root``.
    """
    base = len(os.fsencode(str(root))) + 1
    pending: list[tuple[str, int]] = [(str(root), 0)]
    while pending:
        top, depth = pending.pop()
        folders, files = _listed(top)
        folders.sort()
        files.sort()
        for name in (*folders, *files):
            if len(os.fsencode(os.path.join(top, name))) - base > MAX_RELATIVE_PATH:
                raise WorkspaceUnfit(f"a path longer than {MAX_RELATIVE_PATH} bytes")
        yield top, folders, files
        below = [p for p in (os.path.join(top, n) for n in folders) if not os.path.islink(p)]
        if below and depth >= MAX_DEPTH:
            raise WorkspaceUnfit(f"folders nested deeper than {MAX_DEPTH} levels")
        pending.extend((path, depth + 1) for path in reversed(below))


def _listed(folder: str) -> tuple[list[str], list[str]]:
    """A folder's names as ``os.walk`` splits them: folders (links to folders included),
    everything else; nothing when it cannot be listed."""
    folders: list[str] = []
    files: list[str] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                try:
                    is_folder = entry.is_dir()
                except OSError:
                    is_folder = False
                (folders if is_folder else files).append(entry.name)
    except OSError:
        pass
    return folders, files


def _open(path: Path | str) -> int:
    # No link followed, no FIFO waited on: the agent made this tree.
    return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)


def read_head(path: Path | str, size: int) -> bytes | None:
    """The first ``size`` bytes of a regular file (None: not one), symlinks not followed.

    Raises:
        OSError: it cannot be opened or read.
    """
    fd = _open(path)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, left = [], size
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


# -- the files an agent changed, for a page -------------------------------------------------


MOST_FILES = 200
MOST_BYTES = 1 << 20  # a file larger is named, not diffed


@dataclass(frozen=True)
class FileChange:
    path: str
    kind: str
    """``added``, ``removed`` or ``modified``."""
    diff: tuple[tuple[str, str], ...] = ()
    """The unified diff's lines, each with its kind (``add``, ``del``, ``hunk``, ``ctx``)."""
    note: str = ""
    """Why no diff is shown: ``binary``, ``a link``, ``larger than 1 MiB``,
    ``unreadable``."""


@dataclass(frozen=True)
class WorkspaceChanges:
    files: list[FileChange] = field(default_factory=list)
    """The changed files of the page asked for (``MOST_FILES`` a page), by path."""
    unchanged: int = 0
    changed: int = 0
    """Every changed file, listed or not."""
    start: int = 0
    """How many changed files come before the ones listed."""
    kinds: dict[str, int] = field(default_factory=dict)
    """How many files were added, removed and modified, listed or not."""
    most: int = MOST_FILES
    """Files a page."""
    why_not: str = ""
    """Why nothing could be compared (no workdir, the workspace not kept, ...)."""

    @property
    def more(self) -> int:
        """Changed files after the ones listed."""
        return max(0, self.changed - self.start - len(self.files))

    @property
    def page(self) -> int:
        """The page listed (the last one, for a page asked past it)."""
        return self.start // self.most + 1


def compare(original: Path | None, kept: Path, *, page: int = 1,
            most: int = MOST_FILES) -> WorkspaceChanges:
    """``kept`` against ``original`` (None: the attempt started from an empty folder):
    every file classed by its digest, and only the ``page``-th ``most`` of the changed
    ones read for their diffs."""
    try:
        before = _files(original) if original is not None else {}
        after = _files(kept)
    except WorkspaceUnfit as e:  # a tree the agent made too deep is said so
        return WorkspaceChanges(why_not=f"its workspace cannot be shown: {e}")
    changed: list[tuple[str, str]] = []
    for path in sorted(before.keys() | after.keys()):
        if path not in after:
            changed.append((path, "removed"))
        elif path not in before:
            changed.append((path, "added"))
        elif before[path] != after[path]:
            changed.append((path, "modified"))
    # A page past the last is the last: a link can only lead to files there are.
    start = min((page - 1) * most, max(0, len(changed) - 1) // most * most)
    files = []
    for path, kind in changed[start:start + most]:
        if kind == "removed":
            files.append(FileChange(path, kind))
        elif kind == "added":
            files.append(_added(kept, path, after[path]))
        else:
            files.append(_modified(original, kept, path, before[path], after[path]))
    kinds = {kind: sum(1 for _, k in changed if k == kind)
             for kind in ("added", "removed", "modified")}
    return WorkspaceChanges(files, len(before.keys() & after.keys()) - kinds["modified"],
                            len(changed), start, kinds, most)


def _files(root: Path) -> dict[str, str]:
    """Every file under ``root`` by relative path: its sha256 (``large:`` before it for
    one over ``MOST_BYTES``), or ``link:`` and where a link points (never followed)."""
    found: dict[str, str] = {}
    for top, folders, names in walk(root):
        # A link to a folder is listed among the folders, and not entered: named here.
        for name in [*(f for f in folders if os.path.islink(os.path.join(top, f))), *names]:
            path = os.path.join(top, name)
            relative = os.path.relpath(path, root).replace(os.sep, "/")
            if relative.startswith(".git/"):
                continue
            try:
                info = os.lstat(path)
                if stat.S_ISLNK(info.st_mode):
                    found[relative] = "link:" + os.readlink(path)
                elif stat.S_ISREG(info.st_mode):
                    found[relative] = _digest(path, large=info.st_size > MOST_BYTES)
            except OSError as e:  # the agent took its read permission away, or it went
                found[relative] = f"unreadable:{e.strerror or e}"
    return found


def _digest(path: str, *, large: bool) -> str:
    with os.fdopen(_open(path), "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    return f"large:{digest}" if large else digest


def _text(root: Path, path: str) -> list[str] | None:
    """A file's lines, or None when it is no text (a NUL in it, not UTF-8)."""
    try:
        data = read_head(root / path, MOST_BYTES + 1)
    except OSError:  # it changed under us since it was hashed: shown as no text
        return None
    if data is None or b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return None


def _why_not(digest: str) -> str:
    if digest.startswith("link:"):
        return f"a link to {digest[5:]} (not followed)"
    if digest.startswith("unreadable:"):
        return f"unreadable ({digest[11:]})"
    return "larger than 1 MiB" if digest.startswith("large:") else ""


def _added(kept: Path, path: str, digest: str) -> FileChange:
    if note := _why_not(digest):
        return FileChange(path, "added", note=note)
    lines = _text(kept, path)
    if lines is None:
        return FileChange(path, "added", note="binary")
    return FileChange(path, "added", diff_lines([], lines))


def _modified(original: Path | None, kept: Path, path: str, before: str,
              after: str) -> FileChange:
    if note := (_why_not(after) or _why_not(before)):
        return FileChange(path, "modified", note=note)
    assert original is not None
    old, new = _text(original, path), _text(kept, path)
    if old is None or new is None:
        return FileChange(path, "modified", note="binary")
    return FileChange(path, "modified", diff_lines(old, new))


# -- one unified diff, for a judge ----------------------------------------------------------

# Folders a judge is not shown, wherever they are.
SKIPPED = frozenset({".git", "__pycache__"})


def unified_diff(original: Path | None, kept: Path, *, most_chars: int, file_bytes: int,
                 skipped: frozenset[str] = SKIPPED) -> str:
    """``kept``'s text changes against ``original`` (None, or no folder: every file is
    new) as one unified diff (``a/`` and ``b/`` before each name), each file's first
    ``file_bytes`` compared; at most ``most_chars`` characters, then a line saying it was
    cut. A file that is no UTF-8 text, or cannot be read, or is no regular file (a
    link: never followed) is left out; so are the ``skipped`` folders.

    Raises:
        WorkspaceUnfit: as ``walk``.
    """
    before = _texts(original, file_bytes, skipped) if original is not None \
        and original.is_dir() else {}
    after = _texts(kept, file_bytes, skipped)
    out: list[str] = []
    size = 0
    for name in sorted(before.keys() | after.keys()):
        a, b = before.get(name), after.get(name)
        if a == b:
            continue
        lines = difflib.unified_diff(
            (a or "").splitlines(keepends=True), (b or "").splitlines(keepends=True),
            f"a/{name}" if a is not None else "/dev/null",
            f"b/{name}" if b is not None else "/dev/null")
        for line in lines:
            size += len(line)
            if size > most_chars:
                return "".join(out) + f"\n(diff cut at {most_chars // 1024} KiB)"
            out.append(line if line.endswith("\n") else line + "\n")
    return "".join(out) or "(no changes)"


def _texts(root: Path, size: int, skipped: frozenset[str]) -> dict[str, str]:
    """Every text file under ``root`` by relative path: its first ``size`` bytes."""
    found = {}
    for top, folders, files in walk(root):
        folders[:] = [f for f in folders if f not in skipped]  # not entered
        for name in files:
            path = os.path.join(top, name)
            try:
                data = read_head(path, size)
                if data is not None:
                    found[os.path.relpath(path, root)] = data.decode("utf-8")
            except (OSError, UnicodeDecodeError):
                continue  # not a readable text file: not shown
    return found
