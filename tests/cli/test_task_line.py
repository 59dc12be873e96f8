"""The line ``run`` prints as each task finishes (``_progress.task_line``): its cost
said as ``show`` says it, its error as a digest (#49)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from evalledger.cli._progress import task_line
from evalledger.ledger import TaskCompleted
from evalledger.statuses import FinalStatus

from .helpers import evalledger, write_task


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


def test_run_and_show_say_the_same_floor_when_part_of_the_spend_has_no_price(
        tmp_path: Path) -> None:
    """#49: a task whose usage is part priced, part not (a model the rate card lacks)
    printed ``cost unknown`` as it finished, where ``show`` said ``≥ $0.0108``: what
    had a price is the attempt's cost, a floor, wherever it is said."""
    lines = [{"type": "usage", "model": "claude-sonnet-4-5", "input_tokens": 1000,
              "output_tokens": 520},  # $0.0108 on the rate card
             {"type": "usage", "model": "a-model-no-card-has", "input_tokens": 50}]
    script = "; ".join(f"print({json.dumps(json.dumps(line))})" for line in lines)
    write_task(tmp_path / "tasks" / "t.yaml", [sys.executable, "-c", script])
    db = tmp_path / "l.db"
    ran = evalledger(tmp_path, db, "run", "tasks")
    [line] = [line for line in ran.out_lines if "default/t/00" in line]
    assert "\u2265 $0.0108" in line and "unknown" not in line, ran.stdout
    shown = json.loads(evalledger(tmp_path, db, "show", "latest", "--json").stdout)
    [row] = shown["tasks"]
    assert (row["cost_usd"], row["cost_complete"]) == (pytest.approx(0.0108), False)
    assert (shown["total_cost_usd"], shown["cost_complete"]) == (row["cost_usd"], False)
