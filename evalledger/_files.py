"""Files that are not the ledger: reading folders someone else made, and writing files
whole or not at all.

**Reading** (``evalledger import``): regular files only, never through a link, never
more than a limit, never blocking. An old run folder is input like any other. A
``task.json`` in it can be a link to a file outside the folder, or to ``/dev/zero``; a
FIFO, which blocks whoever opens it until a writer comes; a 1 GiB sparse file, which
``read_bytes`` turns into 1 GiB of memory. So ``read_regular`` decides from ``lstat``
before it opens anything; opens with ``O_NOFOLLOW | O_NONBLOCK``, so that a link or a
FIFO put in the file's place after the ``lstat`` can be neither followed nor block;
checks with ``fstat`` that the descriptor holds the very file the ``lstat`` saw; and
reads at most ``limit + 1`` bytes whatever the size said, so a file that grows
meanwhile cannot take more. ``walk`` lists a tree without entering a link to a folder,
and says which links it did not enter and which folders it could not list.

Invariant: nothing here opens a path that ``lstat`` did not show as a regular file,
and no read is larger than the limit plus one byte.

**Writing** (reports, exports, checkpoints): a file a command writes for someone to
read later is written under a new temporary name in its own folder, flushed to the
disk, then renamed over its place: a full disk, a crash or a kill leaves the previous
file (or none), never a part of one. What is not a regular file (``/dev/stdout``, a
FIFO) cannot be renamed over and is written as it is. Never for the ledger: only SQLite
opens it (closing any other descriptor of it drops the process's locks on it).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# Linux and the BSDs have both; the getattr keeps the module importable where they do
# not exist (the flag is then simply not asked for).
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_CLOEXEC", 0))
# After the first read (sized from fstat), what is read per call while the file goes on.
_CHUNK = 1 << 16

LINK = "a symbolic link (not followed)"


class NotRead(Exception):
    """A file that was not read; ``str(error)`` says why, in words for a user."""


class TooBig(NotRead):
    """A file larger than the limit (by its size, or by what could be read of it)."""


def size_text(size: int) -> str:
    """``64 MiB``, ``1.5 GiB``, ``512 bytes``: a size as people say it."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.{0 if size % scale == 0 else 1}f} {unit}"
    return f"{size} bytes"


def kind_of(mode: int) -> str | None:
    """What a file that is not a regular file is, in words (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return LINK
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (not opened)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device (not opened)"
    if stat.S_ISSOCK(mode):
        return "a socket (not opened)"
    return "not a regular file (not opened)"


def _too_big(size: int, limit: int) -> TooBig:
    return TooBig(f"{size_text(size)} ({size:,} bytes): over the {size_text(limit)} limit")


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes.

    Raises:
        NotRead: a link, a FIFO, a device, a socket, a folder; larger than ``limit``
            (by its size, or by what could be read); replaced between the look and the
            open; or it could not be read (the OS's reason).
    """
    try:
        seen = os.lstat(path)
    except OSError as e:
        raise NotRead(f"cannot read: {e.strerror or e}") from e
    kind = kind_of(seen.st_mode)
    if kind is not None:
        raise NotRead(kind)
    if seen.st_size > limit:
        raise _too_big(seen.st_size, limit)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as e:
        # ELOOP: the file became a link after the lstat (O_NOFOLLOW refused it).
        raise NotRead(LINK if e.errno == errno.ELOOP else f"cannot read: {e.strerror or e}") from e
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino) or not stat.S_ISREG(
                opened.st_mode):
            raise NotRead("replaced by another file while it was being opened (not read)")
        if opened.st_size > limit:
            raise _too_big(opened.st_size, limit)
        return _read_at_most(fd, opened.st_size, limit)
    except OSError as e:
        raise NotRead(f"cannot read: {e.strerror or e}") from e
    finally:
        os.close(fd)


def _read_at_most(fd: int, size: int, limit: int) -> bytes:
    """Up to EOF, refusing past ``limit``: one read of the size fstat gave (plus one
    byte, to see the end) for an ordinary file; never more than ``limit + 1`` in all."""
    chunks: list[bytes] = []
    total = 0
    want = min(size, limit) + 1
    while total <= limit:
        chunk = os.read(fd, min(want, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        want = _CHUNK
    raise TooBig(f"grew past the {size_text(limit)} limit while it was read")


@dataclass
class Listing:
    """One folder of a walk. ``folders``: its real subfolders, sorted; remove names from
    it to keep the walk out of them (as with ``os.walk``). ``links``: its symbolic links
    to folders, never entered. ``files``: every other entry by name (links to files,
    FIFOs and the like included: reading decides about those)."""

    path: Path
    folders: list[str]
    links: list[str]
    files: dict[str, os.DirEntry[str]]


def walk(top: Path, unlisted: Callable[[Path, str], None]) -> Iterator[Listing]:
    """The folders under ``top`` (``top`` first, then depth first in name order),
    never entering a symbolic link to a folder. ``unlisted(path, reason)`` is told of
    each folder that could not be listed. ``top`` itself is followed if it is a link:
    it was named on purpose."""
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as entries:
                listed = sorted(entries, key=lambda e: e.name)
        except OSError as e:
            unlisted(folder, f"cannot list the folder: {e.strerror or e}")
            continue
        listing = Listing(folder, [], [], {})
        for entry in listed:
            if entry.is_dir(follow_symlinks=False):
                listing.folders.append(entry.name)
            elif entry.is_symlink() and _links_to_folder(entry):
                listing.links.append(entry.name)
            else:
                listing.files[entry.name] = entry
        yield listing
        stack.extend(folder / name for name in reversed(listing.folders))


def _links_to_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()  # follows the link: a stat, never an open
    except OSError:
        return False  # a broken link


# -- writing whole or not at all ------------------------------------------------------------


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s new content into; it takes ``path``'s place when
    the block ends without an error, and is removed when it raises.

    The content reaches the disk (``fsync``) before the rename, and the rename before
    the block returns. A link is followed: the file it names is replaced, the link
    stays. A failure names ``path``, which the OS error of a failed write does not (it
    names the temporary file, or nothing).

    Raises:
        OSError: the file could not be written, with ``path`` as its filename.
    """
    if path.exists() and not path.is_file():  # /dev/stdout, a FIFO: write it as it is
        try:
            with open(path, "wb") as direct:
                yield direct
        except OSError as e:
            raise OSError(e.errno, e.strerror, str(path)) from e
        return
    target = Path(os.path.realpath(path))
    # Beside its place (a rename does not cross file systems), hidden, new: O_EXCL never
    # writes through a link or into a file someone else made under that name.
    partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from e
    try:
        try:
            with open(fd, "wb") as out:
                yield out
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, target)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        _sync_folder(target.parent)
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from e


def write_atomic(path: Path, data: str | bytes, *, encoding: str = "utf-8") -> None:
    """Write ``data`` (text is encoded) to ``path`` whole or not at all (``atomic_file``).

    Raises:
        OSError: the file could not be written, with ``path`` as its filename.
    """
    raw = data.encode(encoding) if isinstance(data, str) else data
    with atomic_file(path) as out:
        out.write(raw)


def same_file(path: Path, ledger: Path) -> bool:
    """Whether writing ``path`` would overwrite the ledger or its ``-wal``/``-shm``: an
    output file must never be one of them."""
    target = os.path.realpath(path)
    return any(target == os.path.realpath(f"{ledger}{suffix}") for suffix in ("", "-wal", "-shm"))


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable; where a folder cannot be synced, the rename still
    happened."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
