"""Folders as tars, for the object store: a task's workdir on its way to the workers,
a kept sandbox on its way back to ``--out``.

Owners and times are normalised: the same content packs to the same bytes, hence to the
same name (its hash) in the object store, whatever the folder's history.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path


def pack(folder: Path, limit: int | None = None) -> bytes | None:
    """A tar of the folder's contents (symlinks kept), or None past ``limit`` bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for top, folders, files in os.walk(folder):
            folders.sort()
            for name in [*folders, *sorted(files)]:
                path = Path(top, name)
                if not (path.is_symlink() or path.is_dir() or path.is_file()):
                    continue  # sockets, fifos: nothing a copy can hold
                archive.add(path, arcname=str(path.relative_to(folder)), recursive=False,
                            filter=_normalised)
                if limit is not None and buffer.tell() > limit:
                    return None
    return buffer.getvalue()


def _normalised(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def unpack(blob: bytes, folder: Path) -> None:
    """Extract a tar made by ``pack`` into ``folder`` (nothing lands outside it)."""
    with tarfile.open(fileobj=io.BytesIO(blob)) as archive:
        archive.extractall(folder, filter="tar")


def folder_size(folder: Path) -> int:
    """The bytes of the folder's files (what a refused sandbox would have weighed)."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and
               not f.is_symlink())
