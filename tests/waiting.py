"""Waiting in a test: for a state, polled, with a generous deadline; never a fixed sleep.

``wait_until`` is the suite's one waiting loop: it fails naming what never came.
``left_after`` is the same loop for what should go away (processes, folders,
containers): it returns what is still there at the deadline, and the caller asserts
on that, so the failure can name the leftovers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# How long a test waits for something that should happen in well under a second:
# generous, so a loaded machine (two copies of the suite on two cores) never fails it.
PATIENCE = 30.0


def _poll(get: Callable[[], T], done: Callable[[T], object], timeout: float,
          every: float) -> T:
    """Call ``get`` until ``done`` holds of what it returned, or ``timeout`` seconds
    have passed; what it returned last."""
    deadline = time.monotonic() + timeout
    while True:
        value = get()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(every)


def wait_until(check: Callable[[], T], what: str, timeout: float = PATIENCE,
               every: float = 0.02) -> T:
    """Poll ``check`` until it returns something true, and return that; fail naming
    ``what`` after ``timeout`` seconds."""
    value = _poll(check, bool, timeout, every)
    if not value:
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")
    return value


def left_after(get: Callable[[], T], timeout: float = PATIENCE, every: float = 0.02) -> T:
    """Poll ``get`` until it returns nothing (something false: an empty list) for at
    most ``timeout`` seconds; what it returned last, so what was still left if anything
    was."""
    return _poll(get, lambda value: not value, timeout, every)
