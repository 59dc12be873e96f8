"""The ledger's exceptions: one root, one small class per thing a user can do about it.

Every ``sqlite3`` error is translated into one of these at the store boundary
(``_store._translate``), so nothing above the ledger ever sees a raw
``sqlite3.OperationalError``. Each message is one line and names the file.
"""

from __future__ import annotations

from evalledger.errors import EvalledgerError


class LedgerError(EvalledgerError):
    """Root of every error the ledger raises."""


class LedgerNotFound(LedgerError):
    """There is no ledger at the path (opened read-only, so none was created)."""


class NotALedger(LedgerError):
    """The file exists but is not a SQLite database, or not an evalledger one."""


class LedgerTooNew(LedgerError):
    """The ledger was written by a newer evalledger with a schema this one cannot read."""


class LedgerGone(LedgerError):
    """The ledger's file, or its ``-wal``, was deleted, moved or replaced while this
    process had it open: what it writes now reaches no ledger at that path."""


class LedgerLocked(LedgerError):
    """Another process held the write lock for longer than the busy timeout."""


class LedgerReadOnly(LedgerError):
    """A write was attempted on a ledger opened read-only, or on a read-only file."""


class AppendOnlyViolation(LedgerError):
    """Something tried to UPDATE or DELETE an event; the triggers refused it."""


class LedgerIOError(LedgerError):
    """Any other SQLite failure, with SQLite's own words attached."""


class NotUtf8(LedgerIOError):
    """A row holds text that is not UTF-8 (written into the file by hand): Python's
    sqlite3 cannot hand it back as text. ``verify`` names the row."""


class QueryInterrupted(LedgerError):
    """A query was stopped before it finished (Ctrl-C during ``sql``)."""


class InvalidEvent(LedgerError):
    """A stored payload does not fit the model of its event type."""


class RunNotFound(LedgerError):
    """No run answers to the name given (an id, a unique prefix of one, or ``latest``)."""


class BadAnchor(LedgerError, ValueError):
    """A file given as an anchor cannot be read or holds none (a checkpoint file, or a
    ``run.json`` with its ``anchor``)."""


class RunConflict(LedgerError):
    """Another process started or resumed the run since it was read (``append(if_run_at=)``)."""
