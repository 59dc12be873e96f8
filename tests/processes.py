"""Whether the processes a test made are still running, as /proc tells it.

A zombie (exited, not yet reaped by its new parent) counts as dead: an orphan
of a killed task waits only for init to collect it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .waiting import left_after


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # "pid (comm) state ...": comm may hold spaces and parentheses.
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def still_alive(pids: Sequence[int], timeout: float = 3.0) -> list[int]:
    """The pids still alive after waiting up to ``timeout`` for all to end."""
    return left_after(lambda: [p for p in pids if alive(p)], timeout)


def wait_gone(pid: int, timeout: float = 3.0) -> bool:
    return not still_alive([pid], timeout)


def marked(entry: str, *, prefix: bool = False) -> list[int]:
    """Live processes whose environment holds ``entry`` (``NAME=value``, or with
    ``prefix`` the start of one), read here rather than through the code under test."""
    needle = b"\0" + entry.encode() + (b"" if prefix else b"\0")
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = b"\0" + Path(f"/proc/{name}/environ").read_bytes() + b"\0"
        except OSError:
            continue
        if needle in environ and alive(int(name)):
            found.append(int(name))
    return found
