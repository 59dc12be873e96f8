"""Finding a batch's processes by the mark in their environment, and killing them.

Every attempt's environment carries ``MARKER_VAR=<batch token>-<n>``: a random
token per batch, so that no process but the batch's own descendants carries it
(not our parent, not another batch that reused the run id). That reaches what
``killpg`` cannot: a descendant that called ``setsid()`` (a daemon) has left its
group but still carries the environment it was started with. One that rewrote
its environment is out of reach.

Standard library only, and no import of the package: the watchdog runs this file's
code in a bare interpreter after the runner that started it is gone.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable

MARKER_VAR = "EVALLEDGER_ATTEMPT"


def batch_mark(token: str) -> str:
    """The start of every attempt's ``MARKER_VAR`` entry in the batch ``token``."""
    return f"{MARKER_VAR}={token}-"


def ray_mark(token: str) -> str:
    """The ``MARKER_VAR`` entry of a local Ray started for the batch ``token``. Not an
    attempt's mark: sweeps of a batch's attempts leave it alone (Ray is shut down by its
    own means), but the batch's watchdog ends it with the attempts."""
    return f"{MARKER_VAR}={token}.ray"


def kill_marked(*entries: str, prefix: bool = False,
                sig: signal.Signals = signal.SIGKILL) -> list[int]:
    """SIGKILL (or ``sig``) every process whose environment holds one of ``entries``
    (each a whole ``NAME=value``, or with ``prefix`` the start of one); return their pids.

    Each process is pinned with a pidfd before its environment is read, so a pid
    reused meanwhile is never signalled.
    """
    needles = _needles(entries, prefix)
    killed: list[int] = []
    if not needles or not os.path.isdir("/proc"):
        return killed
    # Again while it finds some: a process forked during a scan may have a pid the
    # scan had already passed.
    for _ in range(3):
        found = [pid for pid in _pids()
                 if pid not in killed and _signal_if(pid, needles, sig)]
        if not found:
            break
        killed += found
    return killed


def marked(entry_start: str) -> list[int]:
    """The pids whose environment holds an entry starting with ``entry_start``."""
    needles = _needles([entry_start], prefix=True)
    return [pid for pid in _pids() if _holds(pid, needles)]


def _needles(entries: Iterable[str], prefix: bool) -> list[bytes]:
    return [b"\0" + os.fsencode(e) + (b"" if prefix else b"\0") for e in entries]


def _holds(pid: int, needles: list[bytes]) -> bool:
    """Whether ``pid``'s environment holds a needle (False once it is gone)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = b"\0" + f.read() + b"\0"
    except OSError:  # gone, or not ours to read
        return False
    return any(needle in environ for needle in needles)


def _pids() -> list[int]:
    me = os.getpid()
    return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit() and int(e.name) != me]


def _signal_if(pid: int, needles: list[bytes], sig: signal.Signals) -> bool:
    """Send ``sig`` to ``pid`` if its environment holds a needle; pinned by a pidfd where
    the kernel has them (5.3+), so a pid reused meanwhile is never signalled."""
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except OSError:  # no pidfds here (an old kernel, a seccomp profile): plain kill
        pidfd = None
    try:
        if not _holds(pid, needles):
            return False
        if pidfd is None:
            os.kill(pid, sig)
        else:
            signal.pidfd_send_signal(pidfd, sig)
        return True
    except OSError:  # gone, or not ours to signal
        return False
    finally:
        if pidfd is not None:
            os.close(pidfd)
