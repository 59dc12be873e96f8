"""Attempts on a Ray cluster, with this process the only ledger writer (``--executor ray``).

The driver (the ``evalledger`` process, ``_driver``) dispatches each attempt as a Ray
task and stays the one writer of the ledger. On the worker (``_worker``), the attempt
runs through the same ``run_task`` as locally (sandbox, process group, env, prompt,
timeout, live budgets, criteria, final status) and its events stream back to the
driver, which appends them in order and ends the attempt by the same protocol as a
local one (``run_attempt``): ``task.completed`` committed last, after the sandbox came
back to ``--out``, before the task counts as done.

What is shipped, and how often (``_packing``):

- a task's ``workdir``: packed once per distinct folder (a tar with normalised
  owners and times), put in the object store once, named by the hash of its
  content; each node unpacks a content once and copies it per attempt;
- the sandbox, on the way back (move-on-write, direct-write): a tar of at most
  ``MAX_ARTIFACTS_BYTES``; a larger one stays behind (removed) and a warning says so.

Nothing outlives the batch on any node: a worker process watches itself with the same
watchdog as a local batch, and the batch ends with a sweep on every live node that
kills whatever carries the batch's mark and removes the batch's folders.

Only ``--executor ray`` imports this package: a local run never loads it, nor Ray.
"""

from ._common import INSTALL_HINT as INSTALL_HINT
from ._common import import_ray as import_ray
from ._driver import RayExecutor as RayExecutor
from ._worker import WorkerSpec as WorkerSpec

__all__ = ["INSTALL_HINT", "RayExecutor", "WorkerSpec", "import_ray"]
