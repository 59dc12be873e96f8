"""``flaky_history``: a task flaky across runs is one whose verdicts disagree with its
definition and model unchanged; infrastructure failures are no verdict."""

from __future__ import annotations

from evalledger.ledger import NO_TOKENS
from evalledger.projections import RunSummary, SummaryFold, TaskRow, flaky_history
from evalledger.statuses import FailureClass, FinalStatus


def _run(run_id: str, statuses: dict[str, FinalStatus]) -> RunSummary:
    rows = [TaskRow(task_key=f"default/{task}/00", task_id=task, variant_id="default",
                    replicate_index=0, tags=[], attempts=1, final_status=status,
                    category=status.category, weighted_score=0.0, duration_seconds=1.0,
                    tokens=NO_TOKENS, cost_usd=0.0, cost_complete=True, error_message=None,
                    failure_class=(FailureClass.INFRA if status is FinalStatus.STALLED
                                   else None))
            for task, status in statuses.items()]
    return SummaryFold(run_id).summary().model_copy(update={"tasks": rows})


SAME = {"default/coin/00": ("h1", "m"), "default/stuck/00": ("h2", "m"),
        "default/edited/00": ("h3", "m")}


def test_flips_with_nothing_changed_are_flaky_and_a_stall_is_no_verdict() -> None:
    ok, bad, stalled = FinalStatus.SUCCESS, FinalStatus.FAILURE, FinalStatus.STALLED
    one = _run("one", {"coin": ok, "stuck": ok, "edited": ok})
    two = _run("two", {"coin": bad, "stuck": stalled, "edited": bad})
    edited = {**SAME, "default/edited/00": ("h4", "m")}  # another definition in run two
    found = flaky_history([(one, SAME), (two, edited)])
    assert [(f.task_id, f.passed, f.failed) for f in found] == [
        ("coin", {"one": 1}, {"two": 1})]
