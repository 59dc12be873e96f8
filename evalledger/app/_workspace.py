"""What an agent changed: a task's kept workspace against the folder it started from.

A run keeps each key's latest workspace under ``<out>/<run_id>/artifacts/<task_key>``
(``run.started`` says where); the task's ``workdir`` (as its ``task.started`` recorded
it) is what the attempt began with. ``workspace_changes`` finds both from the ledger
and compares them (``evalledger._workspace_diff.compare``, the reading a judge's diff
shares: the files added, removed and modified, with a unified diff of each modified
text file, read as an adversary's tree). A run that came from another ledger
(``merge``, an import) names another machine's paths: nothing is read for it.
"""

from __future__ import annotations

from pathlib import Path

from evalledger._workspace_diff import MOST_FILES, WorkspaceChanges, compare
from evalledger.errors import InvalidRequest
from evalledger.ledger import EventType, Ledger, TaskStarted

from ._regrade import _artifacts_root, _transferred, kept_workspace


def workspace_changes(ledger: Ledger, run_id: str, task_key: str, *, page: int = 1,
                      most: int = MOST_FILES) -> WorkspaceChanges:
    """The key's kept workspace against the workdir its latest attempt started from: the
    ``page``-th ``most`` of its changed files."""
    started = None
    for event in ledger.events(run_id, task_key=task_key, types={EventType.TASK_STARTED}):
        if isinstance(event, TaskStarted):
            started = event
    if started is None:
        return WorkspaceChanges(why_not="the task has not started")
    if _transferred(ledger, run_id):
        return WorkspaceChanges(why_not="the run came from another ledger: its paths are "
                                        "another machine's")
    workdir = started.definition.get("workdir")
    try:
        kept = kept_workspace(_artifacts_root(ledger, run_id), task_key)
    except InvalidRequest:  # no run.started says where
        kept = None
    if kept is None or not kept.is_dir() or kept.is_symlink():
        return WorkspaceChanges(why_not="its workspace was not kept (--preservation-mode "
                                        "none), or is gone")
    original = Path(workdir) if isinstance(workdir, str) else None
    if original is not None and not original.is_dir():
        return WorkspaceChanges(why_not=f"its starting folder {original} is gone")
    return compare(original, kept, page=page, most=most)
