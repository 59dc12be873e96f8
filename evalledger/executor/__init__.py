"""The trio executor: runs resolved tasks in sandboxes and streams everything to the ledger.

The only package that knows trio.
"""

from ._batch import BatchConfig as BatchConfig
from ._batch import BatchResult as BatchResult
from ._batch import Callbacks as Callbacks
from ._batch import Resume as Resume
from ._batch import run_batch as run_batch
from ._lines import MAX_LINE as MAX_LINE
from ._process import DEFAULT_KILL_GRACE as DEFAULT_KILL_GRACE
from ._runner import RunContext as RunContext
from ._runner import run_task as run_task
from ._writer import LedgerWriter as LedgerWriter
from ._writer import WriterFailed as WriterFailed
from ._writer import open_writer as open_writer

__all__ = [
    "DEFAULT_KILL_GRACE",
    "MAX_LINE",
    "BatchConfig",
    "BatchResult",
    "Callbacks",
    "LedgerWriter",
    "Resume",
    "RunContext",
    "WriterFailed",
    "open_writer",
    "run_batch",
    "run_task",
]
