"""What pages compute from a whole run summary, computed once per summary.

A run page reads its summary's every row several times: the charts, the tag figures,
the count of tasks not started, the task table's filter and sort, the summary API's
JSON. On a 100,000-task run each of those is 50 to 500 ms of Python, and a page asks
for all of them. A summary object never changes once made (``RunState`` makes a new
one when an event changes the run; ``anchored`` copies), so what is computed from it
is kept as long as it lives, and no longer: entries are held by the summary's
identity through a weak reference, and dropped when it is collected.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from evalledger._gc import collector_paused

T = TypeVar("T")

# Reentrant: a summary collected while the lock is held (a collection can run at any
# allocation) calls _forget on this thread.
_lock = threading.RLock()
# id(summary) -> (a weak reference to it, what was computed from it by key)
_entries: dict[int, tuple[weakref.ref[Any], dict[Hashable, Any]]] = {}


def _forget(ident: int, ref: weakref.ref[Any]) -> None:
    with _lock:
        entry = _entries.get(ident)
        if entry is not None and entry[0] is ref:
            del _entries[ident]


def per_summary(summary: object, key: Hashable, make: Callable[[], T]) -> T:
    """``make()``, computed once for ``summary`` and ``key`` (pages run on the event
    loop, the HTML report in a worker thread: both may ask)."""
    ident = id(summary)
    with _lock:
        entry = _entries.get(ident)
        if entry is None or entry[0]() is not summary:
            ref = weakref.ref(summary, functools.partial(_forget, ident))
            entry = _entries[ident] = (ref, {})
        values = entry[1]
        if key in values:
            return values[key]  # type: ignore[no-any-return]
    # Outside the lock: another summary's page need not wait. The collector paused: a
    # sort or filter of 100,000 rows allocates a key per row, and each thousand would
    # start a collection over the run's state (0.9 s instead of 0.05 s).
    with collector_paused():
        value = make()
    with _lock:
        return values.setdefault(key, value)  # type: ignore[no-any-return]


def recent_per_summary(summary: object, family: str, key: Hashable, make: Callable[[], T],
                       *, keep: int = 8) -> T:
    """As ``per_summary``, for keys a request names freely (a task table's filter text):
    of ``family``, only the ``keep`` most recently asked are kept, so a crawler's ten
    thousand queries hold no more than eight selections of a run's rows."""
    recent = per_summary(summary, (family,), OrderedDict[Hashable, Any])
    with _lock:
        if key in recent:
            recent.move_to_end(key)
            return recent[key]  # type: ignore[no-any-return]
    with collector_paused():
        value = make()
    with _lock:
        recent[key] = value
        recent.move_to_end(key)
        while len(recent) > keep:
            recent.popitem(last=False)
    return value
