"""What the Ray driver and its workers share: how Ray is imported (an optional extra),
how long they wait on it, and how a Ray error is said in one line."""

from __future__ import annotations

import re
from typing import Any

from evalledger.errors import Unavailable

INSTALL_HINT = "--executor ray needs Ray: pip install 'evalledger[ray]'"
# Seconds between looks at a stop flag while waiting on Ray (never a blocking wait:
# a blocking next() makes Ctrl-C wait for the next item).
POLL = 0.2
# Every ray.get has a deadline: a result that is ready arrives in milliseconds.
GET_TIMEOUT = 120.0


def import_ray() -> Any:
    """The ``ray`` module. Raises ``Unavailable`` (saying how to install it) without it."""
    try:
        import ray
    except ImportError:
        raise Unavailable(INSTALL_HINT) from None
    return ray


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def first_line(error: BaseException) -> str:
    """One line naming what went wrong: for an error raised on a worker, its cause."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException) and type(error).__name__ == "RayTaskError":
        error = cause
    lines = _ANSI.sub("", str(error)).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:300] if lines else ''}".rstrip(": ")
