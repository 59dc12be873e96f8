"""evalledger: run batches of evaluation tasks, keep an append-only ledger of all of it.

The public surface is small on purpose; everything else lives in ``_``-prefixed
modules and may change.

The names below are imported when first used (PEP 562), not when the package is:
every ``evalledger`` command imports this package, and most of them need none of
it (``--version`` should not pay for pydantic models).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import attributes as _attributes
from ._version import __version__ as __version__

if TYPE_CHECKING:
    from .ledger import Ledger as Ledger
    from .ledger import LedgerError as LedgerError
    from .ledger import verify as verify
    from .statuses import Category as Category
    from .statuses import FinalStatus as FinalStatus
    from .statuses import RunStatus as RunStatus

_LAZY = {
    "Ledger": "evalledger.ledger", "LedgerError": "evalledger.ledger",
    "verify": "evalledger.ledger", "Category": "evalledger.statuses",
    "FinalStatus": "evalledger.statuses", "RunStatus": "evalledger.statuses",
}


__getattr__ = _attributes(__name__, _LAZY)


__all__ = ["Category", "FinalStatus", "Ledger", "LedgerError", "RunStatus", "__version__", "verify"]
