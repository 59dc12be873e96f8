"""The one root of every error a user can act on, and the errors no layer owns alone.

Every layer raises its own small classes (``LedgerError`` and its family,
``TaskLoadError``, ``ResumeRefused``, ``PricingConflict``, ``BadLine``...); each
derives from ``EvalledgerError``, so a caller catches one class for "the request or
the ledger is wrong, the message says what to do", and anything else is a bug. The
CLI's one error boundary (``cli/_main.py``) turns an ``EvalledgerError`` into one line
on stderr and exit code 2; no command converts one error into another.

A class keeps a second base where callers catch it by that one (``BadLine`` is a
``ValueError``). This module imports nothing: every layer may import it.
"""

from __future__ import annotations


class EvalledgerError(Exception):
    """Root of every error a user can act on; ``str(error)`` is one line saying what is
    wrong and, where there is one, what to do about it."""


class Unavailable(EvalledgerError):
    """Something a command needs is not there: Ray not installed, a cluster that does
    not answer. The message says what to do about it."""


class InvalidRequest(EvalledgerError, ValueError):
    """A command was asked something it cannot do as asked (a run id that cannot be one,
    a shard that is not K/N, a report path that is the ledger itself); nothing was
    done."""


class NothingToRun(EvalledgerError):
    """The paths, experiment and filters given leave no task to run; skipped task files
    were said first."""


class NothingToImport(EvalledgerError):
    """The folders given hold no run of the old harness (no ``run.json``)."""


class TransferFailed(EvalledgerError):
    """An export, import of events or merge could not read or write a file, or refused
    one (a ledger to merge that does not verify); the message says what was done before
    it (nothing, or whole batches)."""


__all__ = [
    "EvalledgerError",
    "InvalidRequest",
    "NothingToImport",
    "NothingToRun",
    "TransferFailed",
    "Unavailable",
]
