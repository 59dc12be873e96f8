"""Where evalledger's log records go: nowhere when it is a library, to stderr when it
is the command line.

A library's logger has a ``NullHandler`` (the logging HOWTO): else Python's last resort
writes a warning of ours to a caller's stderr, and ``evalledger.run()`` prints nothing.
The CLI says it is running before any command does, without importing ``logging``
itself (11 ms of every command's start, ``--version`` too): the first module that logs
(``app._callbacks``) asks for the handler when it is imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging

shown = False
"""Set by the CLI: records of WARNING and above are printed on stderr, as they are."""


def handler() -> logging.Handler:
    """The handler of the ``evalledger`` logger."""
    import logging

    if not shown:
        return logging.NullHandler()
    printed = logging.StreamHandler()  # sys.stderr as it is when a record comes
    printed.setLevel(logging.WARNING)
    return printed
