"""The one rule for a run's shown status (``ShownStatus``), a pure function.

Every reader that shows a run's status calls ``shown_status``: ``runs``, ``show``,
``report`` and ``run.md`` (through ``status_word``), ``events --follow`` (whether a run
is over), the viewer, and the watchdog's sweep (which batches died). The SQL ``runs``
view is its twin over the ledger alone (``ShownStatus.in_sql``; docs/ledger.md).

Liveness is I/O (``evalledger.hosts`` asks the operating system), so it is handed in
as a question, asked only of a run the ledger still calls running: a finished run's
status costs no look at its host.
"""

from __future__ import annotations

from collections.abc import Callable

from evalledger.statuses import ShownStatus


def shown_status(recorded: str, process_gone: Callable[[], bool]) -> ShownStatus:
    """The status a person reads for a run.

    Args:
        recorded: what the run's folds say (``SummaryFold.status``, a headline's
            ``status``): ``running`` while its latest start or resume has no
            ``run.finished`` after it, else that ``run.finished``'s ``RunStatus``.
        process_gone: whether the process that recorded the latest start or resume is
            gone (``hosts.run_ended``): asked only when ``recorded`` is ``running``.

    Raises:
        ValueError: ``recorded`` is no status this version knows.
    """
    status = ShownStatus(recorded)
    if status is ShownStatus.RUNNING and process_gone():
        return ShownStatus.CUT_OFF
    return status
