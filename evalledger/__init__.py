"""evalledger: run batches of evaluation tasks, keep an append-only ledger of all of it.

The public surface is small on purpose; everything else lives in ``_``-prefixed
modules and may change. ``run`` and ``resume`` are what ``evalledger run`` and
``evalledger resume`` call (docs/python.md): they take typed options, return a
``RunOutcome`` and print nothing.

The names below are imported when first used (PEP 562), not when the package is:
every ``evalledger`` command imports this package, and most of them need none of
it (``--version`` should not pay for pydantic models).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import attributes as _attributes
from ._version import __version__ as __version__

if TYPE_CHECKING:
    from .app import Callbacks as Callbacks
    from .app import Ending as Ending
    from .app import ResumeRequest as ResumeRequest
    from .app import RunOutcome as RunOutcome
    from .app import RunSettings as RunSettings
    from .app import compare as compare
    from .app import list_runs as list_runs
    from .app import regrade as regrade
    from .app import resume_run as resume
    from .app import search as search
    from .app import start_run as run
    from .app import summary as summary
    from .errors import EvalledgerError as EvalledgerError
    from .ledger import Ledger as Ledger
    from .ledger import LedgerError as LedgerError
    from .ledger import verify as verify
    from .options import RunOptions as RunOptions
    from .statuses import Category as Category
    from .statuses import FinalStatus as FinalStatus
    from .statuses import RunStatus as RunStatus

_LAZY = {
    "Callbacks": "evalledger.app", "Ending": "evalledger.app",
    "ResumeRequest": "evalledger.app", "RunOutcome": "evalledger.app",
    "RunSettings": "evalledger.app", "EvalledgerError": "evalledger.errors",
    "summary": "evalledger.app", "list_runs": "evalledger.app", "search": "evalledger.app",
    "compare": "evalledger.app", "regrade": "evalledger.app",
    "RunOptions": "evalledger.options",
    "Ledger": "evalledger.ledger", "LedgerError": "evalledger.ledger",
    "verify": "evalledger.ledger", "Category": "evalledger.statuses",
    "FinalStatus": "evalledger.statuses", "RunStatus": "evalledger.statuses",
}


_attribute = _attributes(__name__, _LAZY)


def __getattr__(name: str) -> object:
    # ``run`` and ``resume`` are the app's ``start_run`` and ``resume_run`` under the
    # names a Python caller uses (Inspect's ``eval()``); the rest keep their names.
    if name in ("run", "resume"):
        from . import app

        value = app.start_run if name == "run" else app.resume_run
        globals()[name] = value
        return value
    return _attribute(name)


__all__ = [
    "Callbacks",
    "Category",
    "Ending",
    "EvalledgerError",
    "FinalStatus",
    "Ledger",
    "LedgerError",
    "ResumeRequest",
    "RunOptions",
    "RunOutcome",
    "RunSettings",
    "RunStatus",
    "__version__",
    "compare",
    "list_runs",
    "regrade",
    "resume",
    "run",
    "search",
    "summary",
    "verify",
]
