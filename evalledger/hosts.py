"""Which machine and process recorded a run, and whether that process still lives.

``run.started`` and ``run.resumed`` carry ``host_info()``. A run without a final
``run.finished`` was either cut off (a crash: resume it) or is still going (a
second process must not run its tasks again); the recorded host and pid tell
which. Projections stay pure: they hand this module the host they folded, and
this module asks the operating system.
"""

from __future__ import annotations

import functools
import getpass
import os
import platform
import socket
import sys
from collections.abc import Mapping
from typing import Any

from evalledger._version import __version__

# What an attempt's environment_info shares with the process that recorded its run's
# session (run.started / run.resumed host): recorded there once, not on every
# task.completed (100 bytes a completion), unless the attempt ran elsewhere (Ray).
SESSION_KEYS = ("evalledger", "platform", "python")


@functools.cache
def static_environment() -> dict[str, str]:
    """This evalledger, Python and platform: ``SESSION_KEYS`` of this process."""
    # platform.platform() reads the interpreter binary to find the libc version:
    # milliseconds, so once per process, not once per task.
    return {"evalledger": __version__, "platform": platform.platform(),
            "python": sys.version.split()[0]}


def session_environment(host: Mapping[str, Any]) -> dict[str, Any]:
    """The ``SESSION_KEYS`` a session's ``host`` recorded: what its completions leave out."""
    return {name: host[name] for name in SESSION_KEYS if name in host}


def attempt_environment(recorded: Mapping[str, Any], session: Mapping[str, Any],
                        imported: bool = False) -> dict[str, Any]:
    """A completion's ``environment_info`` with what it left to its session put back
    (an imported attempt's session is the import, not what ran it: nothing is)."""
    if imported or not session:
        return dict(recorded)
    return {**session, **recorded}


def host_info() -> dict[str, Any]:
    """This process, as recorded in ``run.started`` / ``run.resumed``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = None
    return {
        "hostname": socket.gethostname(),
        "user": user,
        **static_environment(),
        "cwd": os.getcwd(),
        "pid": os.getpid(),
    }


def running_pid(host: Mapping[str, Any], finished: bool) -> int | None:
    """The pid still running a run on this host, if any.

    Args:
        host: the ``host`` of the run's latest ``run.started`` / ``run.resumed``.
        finished: whether a ``run.finished`` came after it.
    """
    pid = host.get("pid")
    if finished or host.get("hostname") != socket.gethostname():
        return None
    if not isinstance(pid, int) or isinstance(pid, bool) or pid == os.getpid() or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, someone else's
        return pid
    except OverflowError:  # not a pid this system can have
        return None
    return pid


def run_ended(host: Mapping[str, Any], finished: bool) -> bool:
    """Whether no process will add to a run any more: it recorded ``run.finished``, or
    it was recorded on this host by a process that is gone (a crash)."""
    if finished:
        return True
    return host.get("hostname") == socket.gethostname() and running_pid(host, finished) is None


__all__ = ["host_info", "run_ended", "running_pid"]
