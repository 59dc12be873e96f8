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
from pathlib import Path

from ..waiting import PATIENCE, wait_until
from .helpers import COMMAND, _env

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
    try:
        seen = read_terminal(parent, process)
        code = process.wait(PATIENCE)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(parent)
    text = _ESCAPES.sub("", seen.decode("utf-8", errors="replace"))
    return code, text.replace("\r\n", "\n").split("\n")


def read_terminal(parent: int, process: subprocess.Popen[bytes]) -> bytes:
    """What ``process`` wrote to the terminal whose parent side is ``parent``, read until
    it closed the terminal or ended."""
    seen = bytearray()

    def done() -> bool:
        ready, _, _ = select.select([parent], [], [], 1)
        if not ready:
            return process.poll() is not None
        try:
            chunk = os.read(parent, 65536)
        except OSError:  # the child closed the terminal
            return True
        seen.extend(chunk)
        return not chunk

    wait_until(done, "the command to close its terminal", timeout=2 * PATIENCE, every=0)
    return bytes(seen)
