"""The application layer: the commands that run, resume, import and carry runs.

A command takes typed options (``RunOptions``, what a run records; ``RunSettings``,
what it does not; ``ResumeRequest``), does its work and returns an outcome value
(``RunOutcome``, ``ImportOutcome``, ``TransferOutcome``). It prints nothing and never
exits: what a person sees as it goes is told to ``Callbacks`` (the CLI shows it, a
Python caller may), and the exit code is the caller's (the CLI maps the outcome to
one). Every error a user can act on is an ``EvalledgerError``; no command converts one
into another. ``evalledger.run`` and ``evalledger.resume`` are ``start_run`` and
``resume_run``: the CLI calls exactly these.

Layering: this package may import every package below it (ledger, suite, importers,
projections, executor); only the CLI and the viewer import it.

Names are imported on first use (PEP 562): ``evalledger export`` needs neither trio
nor the executor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evalledger._lazy import attributes as _attributes

# Where a command finds the ledger when none is named (the CLI: no --ledger and no
# $EVALLEDGER_LEDGER). Here, not in a module: the CLI reads it on every start.
DEFAULT_LEDGER = "evalledger.db"

if TYPE_CHECKING:
    from evalledger.projections import ResumeRequest as ResumeRequest

    from ._batch import Ending as Ending
    from ._batch import RunOutcome as RunOutcome
    from ._batch import Verdict as Verdict
    from ._callbacks import Callbacks as Callbacks
    from ._import import ImportOutcome as ImportOutcome
    from ._import import RunImport as RunImport
    from ._import import import_runs as import_runs
    from ._prepare import shard_spec as shard_spec
    from ._read import list_runs as list_runs
    from ._read import summary as summary
    from ._resume import resume_run as resume_run
    from ._run import start_run as start_run
    from ._search import search as search
    from ._settings import RunSettings as RunSettings
    from ._transfer import ExportOutcome as ExportOutcome
    from ._transfer import TransferOutcome as TransferOutcome
    from ._transfer import export as export
    from ._transfer import import_events as import_events
    from ._transfer import merge as merge

_WHERE = {
    "ResumeRequest": "evalledger.projections",
    "Ending": "_batch",
    "RunOutcome": "_batch",
    "Verdict": "_batch",
    "Callbacks": "_callbacks",
    "ImportOutcome": "_import",
    "RunImport": "_import",
    "import_runs": "_import",
    "list_runs": "_read",
    "search": "_search",
    "summary": "_read",
    "resume_run": "_resume",
    "start_run": "_run",
    "RunSettings": "_settings",
    "shard_spec": "_prepare",
    "ExportOutcome": "_transfer",
    "TransferOutcome": "_transfer",
    "export": "_transfer",
    "import_events": "_transfer",
    "merge": "_transfer",
}

__getattr__ = _attributes(__name__, _WHERE)

__all__ = [
    "DEFAULT_LEDGER",
    "Callbacks",
    "Ending",
    "ExportOutcome",
    "ImportOutcome",
    "ResumeRequest",
    "RunImport",
    "RunOutcome",
    "RunSettings",
    "TransferOutcome",
    "Verdict",
    "export",
    "import_events",
    "import_runs",
    "list_runs",
    "merge",
    "resume_run",
    "search",
    "shard_spec",
    "start_run",
    "summary",
]
