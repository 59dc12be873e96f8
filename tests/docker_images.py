"""Test images built here, from this machine's own files: no registry is reachable.

``busybox``: Debian's static busybox and its applets, nothing else (a shell, coreutils,
``nc``, ``setsid``). ``python``: that, plus this machine's ``/usr/bin/python3`` with its
standard library and the shared libraries it and its ``ssl`` module link (what the
example agent needs; a client of HTTPS).
``agent``: busybox, plus ``/bin/bash`` and the shared libraries of bash and of the
binaries named (a real agent CLI, bound in at run time, needs those and a shell).
Each is tagged by a hash of what went into it, so a second build is a lookup.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

BUSYBOX = "/bin/busybox"
PYTHON = "/usr/bin/python3"

_BASE = """\
FROM scratch
COPY root/ /
RUN ["/bin/busybox", "--install", "-s", "/bin"]
"""


def _libraries(binary: str) -> list[str]:
    """The shared libraries ``binary`` loads, the loader included (as ``ldd`` says)."""
    said = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    found = []
    for line in said.splitlines():
        parts = line.split()
        path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0]
        if path.startswith("/"):
            found.append(path)
    return found


def _copy(source: str, root: Path) -> None:
    """``source`` into ``root`` at the same path, links resolved (an image has none of
    the host's layout to point into)."""
    target = root / source.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    if os.path.isdir(source):
        shutil.copytree(source, target, symlinks=False, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "test", "idlelib",
                                                      "tkinter", "ensurepip"))
    else:
        shutil.copy2(os.path.realpath(source), target)


def build(kind: str, binaries: tuple[str, ...] = ()) -> str:
    """The tag of the ``kind`` image (``busybox``, ``python`` or ``agent`` for
    ``binaries``), built if missing.

    Raises:
        RuntimeError: the build failed (with docker's words).
    """
    files = [BUSYBOX]
    if kind == "python":
        version = os.path.basename(os.path.realpath(PYTHON))  # python3.11
        dynload = Path(f"/usr/lib/{version}/lib-dynload")
        files += [PYTHON, f"/usr/lib/{version}", *sorted(
            {lib for binary in (PYTHON, *map(str, dynload.glob("_ssl.*.so")))
             for lib in _libraries(binary)})]
    if kind == "agent":
        files += ["/bin/bash", *sorted({lib for binary in ("/bin/bash", *binaries)
                                        for lib in _libraries(binary)})]
    # What went in, and how (this file): a changed recipe is a new image.
    digest = hashlib.sha256(repr([(f, os.stat(f).st_mtime_ns) for f in files]).encode()
                            + Path(__file__).read_bytes())
    tag = f"evalledger-test-{kind}:{digest.hexdigest()[:12]}"
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True,
                      check=False).returncode == 0:
        return tag
    with tempfile.TemporaryDirectory(prefix="evalledger-image-") as context:
        root = Path(context) / "root"
        for source in files:
            _copy(source, root)
        (root / "bin" / "busybox").chmod(0o755)
        for folder in ("tmp", "work", "etc"):
            (root / folder).mkdir(exist_ok=True)
        (Path(context) / "Dockerfile").write_text(_BASE)
        done = subprocess.run(["docker", "build", "-q", "-t", tag, context],
                              capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"docker build of the {kind} test image failed: {done.stderr}")
    return tag
