"""The trio executor: runs resolved tasks in sandboxes and streams everything to the ledger.

Where each part lives (every module imports the ledger, the suite, projections and
the domain modules only, never the CLI, the viewer or the application layer):

- ``_batch``: a batch (``run_batch``): the writer, the watchdog, dispatching under the
  concurrency limit, ``run.started`` / ``run.resumed`` / ``run.finished``;
- ``_runner``: one attempt here (``run_task``): sandbox, command, streams, live budgets,
  criteria (``_criteria``), usage (``_usage``), lines (``_lines``);
- ``_attempt``: how every attempt ends, local or on Ray (``run_attempt``): one
  ``task.completed`` committed before it counts, or a ``task.interrupted``;
- ``_status``: the final-status rule, a pure function of what happened;
- ``_process``, ``_sandbox``, ``_marks``, ``_watchdog``: process groups, sandboxes, and
  nothing outliving a batch, even a runner killed by SIGKILL;
- ``isolation``: what a confined command sees (bwrap, docker) and the probes that say
  what was in force (docs/isolation.md); public, standard library only: the app asks it
  whether an isolation runs here, the watchdog removes containers with it;
- ``_writer``: the one ledger writer of a batch (group commit);
- ``ray``: ``--executor ray`` (driver, worker, packing); imported only for it.

Attempts run on trio here alone: the CLI starts a loop only to call ``run_batch`` (and
to catch signals), the viewer only to serve.
"""

from ._attempt import AttemptOutcome as AttemptOutcome
from ._batch import BatchConfig as BatchConfig
from ._batch import BatchResult as BatchResult
from ._batch import Callbacks as Callbacks
from ._batch import Resume as Resume
from ._batch import run_batch as run_batch
from ._lines import MAX_LINE as MAX_LINE
from ._process import DEFAULT_KILL_GRACE as DEFAULT_KILL_GRACE
from ._runner import RunContext as RunContext
from ._runner import run_task as run_task
from ._usage import owed as owed
from ._writer import LedgerWriter as LedgerWriter
from ._writer import WriterFailed as WriterFailed
from ._writer import open_writer as open_writer

__all__ = [
    "DEFAULT_KILL_GRACE",
    "MAX_LINE",
    "AttemptOutcome",
    "BatchConfig",
    "BatchResult",
    "Callbacks",
    "LedgerWriter",
    "Resume",
    "RunContext",
    "WriterFailed",
    "open_writer",
    "owed",
    "run_batch",
    "run_task",
]
