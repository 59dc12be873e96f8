"""Files written whole or not at all: reports, exports, checkpoints.

A file a command writes for someone to read later is written under a temporary name
in its own folder, flushed to the disk, then renamed over its place: a full disk, a
crash or a kill leaves the previous file (or none), never a part of one. A rename in
one folder is atomic on POSIX. What is not a regular file (``/dev/stdout``, a FIFO)
cannot be renamed over and is written as it is.

Never for the ledger: only SQLite writes it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s new content into; it takes ``path``'s place when
    the block ends without an error, and is removed when it raises.

    The content reaches the disk (``fsync``) before the rename, and the rename before
    the block returns. A failure names ``path``, which the OS error of a failed write
    does not (it names the temporary file, or nothing).

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
    # Beside its place (a rename does not cross file systems), hidden, this process's.
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    opened = False
    try:
        try:
            with open(partial, "wb") as out:
                opened = True
                yield out
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, path)
            opened = False
        finally:
            if opened:  # never something of the same name this call did not make
                partial.unlink(missing_ok=True)
        _sync_folder(path.parent)
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


__all__ = ["atomic_file", "same_file", "write_atomic"]
