"""Where evalledger's log records go: nowhere when it is a library, to stderr when it
is the command line.

A library's logger prints nothing unasked (the logging HOWTO): else Python's last resort
writes a warning of ours to a caller's stderr, and ``evalledger.run()`` prints nothing.
The CLI says it is running before any command does, without importing ``logging``
itself (11 ms of every command's start, ``--version`` too); the handler asks at each
record, so whichever module that logs is imported first, and when, does not matter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging

shown = False
"""Set by the CLI: records of WARNING and above are printed on stderr, as they are."""


def handler() -> logging.Handler:
    """The handler of the ``evalledger`` logger: stderr while ``shown``, else nothing
    (a program's own logging configuration still sees every record)."""
    import logging

    class _WhenShown(logging.StreamHandler):  # type: ignore[type-arg]
        def emit(self, record: logging.LogRecord) -> None:
            if shown:
                super().emit(record)

    printed = _WhenShown()  # sys.stderr as it is when a record comes
    printed.setLevel(logging.WARNING)
    return printed
