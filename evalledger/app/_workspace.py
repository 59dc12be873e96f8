"""What an agent changed: a task's kept workspace against the folder it started from.

A run keeps each key's latest workspace under ``<out>/<run_id>/artifacts/<task_key>``
(``run.started`` says where); the task's ``workdir`` (as its ``task.started`` recorded
it) is what the attempt began with. ``workspace_changes`` lists the files added, removed
and modified, with a unified diff of each modified text file.

The workspace is the agent's work, so read as an adversary's: nothing is followed out of
it (a link is named as a link, never read), a file is read through a descriptor opened
without following a link, and what is shown is bounded (files, bytes a file, diff lines).
A run that came from another ledger (``merge``, an import) names another machine's
paths: nothing is read for it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from evalledger._diffs import diff_lines
from evalledger.errors import InvalidRequest
from evalledger.ledger import EventType, Ledger, TaskStarted

from ._regrade import _artifacts_root, _transferred, kept_workspace

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


def workspace_changes(ledger: Ledger, run_id: str, task_key: str, *, page: int = 1,
                      most: int = MOST_FILES) -> WorkspaceChanges:
    """The key's kept workspace against the workdir its latest attempt started from: the
    ``page``-th ``most`` of its changed files."""
    started = None
    for event in ledger.events(run_id, task_key=task_key, types={EventType.TASK_STARTED}):
        if isinstance(event, TaskStarted):
            started = event
    if started is None:
        return WorkspaceChanges(why_not="the task has not started")
    if _transferred(ledger, run_id):
        return WorkspaceChanges(why_not="the run came from another ledger: its paths are "
                                        "another machine's")
    workdir = started.definition.get("workdir")
    try:
        kept = kept_workspace(_artifacts_root(ledger, run_id), task_key)
    except InvalidRequest:  # no run.started says where
        kept = None
    if kept is None or not kept.is_dir() or kept.is_symlink():
        return WorkspaceChanges(why_not="its workspace was not kept (--preservation-mode "
                                        "none), or is gone")
    original = Path(workdir) if isinstance(workdir, str) else None
    if original is not None and not original.is_dir():
        return WorkspaceChanges(why_not=f"its starting folder {original} is gone")
    return compare(original, kept, page=page, most=most)


def compare(original: Path | None, kept: Path, *, page: int = 1,
            most: int = MOST_FILES) -> WorkspaceChanges:
    """``kept`` against ``original`` (None: the attempt started from an empty folder):
    every file classed by its digest, and only the ``page``-th ``most`` of the changed
    ones read for their diffs."""
    from evalledger.executor.isolation import WorkspaceUnfit

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
    from evalledger.executor.isolation import walk

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


def _open(path: str) -> int:
    # No link followed, no FIFO waited on: the agent made this tree.
    return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)


def _digest(path: str, *, large: bool) -> str:
    with os.fdopen(_open(path), "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    return f"large:{digest}" if large else digest


def _read(path: str) -> bytes:
    with os.fdopen(_open(path), "rb") as f:
        return f.read(MOST_BYTES + 1)


def _text(root: Path, path: str) -> list[str] | None:
    """A file's lines, or None when it is no text (a NUL in it, not UTF-8)."""
    try:
        data = _read(str(root / path))
    except OSError:  # it changed under us since it was hashed: shown as no text
        return None
    if b"\0" in data[:8192]:
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
