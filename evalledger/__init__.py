"""evalledger: run batches of evaluation tasks, keep an append-only ledger of all of it.

The public surface is small on purpose; everything else lives in ``_``-prefixed
modules and may change.
"""

from importlib.metadata import PackageNotFoundError, version

from .ledger import Ledger as Ledger
from .ledger import LedgerError as LedgerError
from .ledger import verify as verify
from .statuses import Category as Category
from .statuses import FinalStatus as FinalStatus
from .statuses import RunStatus as RunStatus

try:
    __version__ = version("evalledger")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["Category", "FinalStatus", "Ledger", "LedgerError", "RunStatus", "__version__", "verify"]
