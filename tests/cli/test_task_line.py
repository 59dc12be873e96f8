"""The line ``run`` prints as each task finishes (``_progress.task_line``): its cost
said as ``show`` says it, its error as a digest (#49)."""

from __future__ import annotations

import pytest

from evalledger.cli._progress import task_line
from evalledger.ledger import TaskCompleted
from evalledger.statuses import FinalStatus


def _done(**fields: object) -> TaskCompleted:
    status = fields.pop("final_status", FinalStatus.SUCCESS)
    assert isinstance(status, FinalStatus)
    return TaskCompleted(run_id="r", task_key="default/t/00", final_status=status,
                         category=status.category, duration_seconds=1.25, **fields)


@pytest.mark.parametrize(("cost", "complete", "said"), [
    (0.0108, True, "  $0.0108"),
    (0.0108, False, "  \u2265 $0.0108"),  # a floor, as show and run.md say it
    (None, False, "  cost unknown"),
    (0.0, False, "  cost unknown"),  # nothing of it priced: never $0
    (None, True, ""),  # nothing spent: nothing said
])
def test_a_tasks_cost_reads_as_show_says_it(cost: float | None, complete: bool,
                                            said: str) -> None:
    line = task_line(_done(cost_usd=cost, cost_complete=complete))
    assert line == f"SUCCESS               default/t/00  1.2s{said}"


def test_a_multi_line_error_is_its_digest_on_one_line() -> None:
    error = ("run_command: exit code 1: Traceback (most recent call last):\n"
             '  File "<string>", line 9, in <module>\n'
             "AssertionError: add(2, 3) == 6\n")
    line = task_line(_done(final_status=FinalStatus.FAILURE, error_message=error))
    assert line.endswith("  run_command \u2717 AssertionError: add(2, 3) == 6"), line
    assert "\n" not in line and "\\n" not in line and "Traceback" not in line
