"""A command run in a real terminal (a pseudo-terminal of a given width), as a person
sees it: what rich decides to print depends on the terminal, so the tests of what
people read run the real entry point behind a real tty."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from pathlib import Path

from .helpers import COMMAND, PATIENCE, _env

# What a terminal draws and does not show as text: colours, cursor moves.
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def in_terminal(cwd: Path, *args: str, columns: int) -> tuple[int, list[str]]:
    """``evalledger ARGS...`` with stdout and stderr on a terminal ``columns`` wide;
    its exit code and the lines it showed, escape codes removed."""
    parent, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    process = subprocess.Popen([*COMMAND, *args], cwd=cwd, env=_env(COLUMNS=str(columns)),
                               stdin=child, stdout=child, stderr=child)
    os.close(child)
    seen = b""
    deadline = time.monotonic() + 2 * PATIENCE
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([parent], [], [], 1)
            if ready:
                try:
                    chunk = os.read(parent, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
            elif process.poll() is not None:
                break
        code = process.wait(PATIENCE)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(parent)
    text = _ESCAPES.sub("", seen.decode("utf-8", errors="replace"))
    return code, text.replace("\r\n", "\n").split("\n")
