"""The final-status rule (``executor/_status.py``): a table of what can happen in an
attempt and the status, message and score each gets, then properties over every mix
of facts (docs/tasks.md, "The final status of an attempt")."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalledger.executor._criteria import CUT_OFF, NOT_RUN
from evalledger.executor._status import AttemptFacts, BudgetStop, Verdict, final_status
from evalledger.ledger import CriterionResult
from evalledger.statuses import FailureClass, FinalStatus

F = FinalStatus
AGENT, INFRA = FailureClass.AGENT, FailureClass.INFRA


def passed(kind: str = "exit_code", weight: float = 1.0) -> CriterionResult:
    return CriterionResult(type=kind, passed=True, weight=weight, detail="exit code 0")


def failed(kind: str = "file_exists", detail: str = "out.txt does not exist",
           weight: float = 1.0) -> CriterionResult:
    return CriterionResult(type=kind, passed=False, weight=weight, detail=detail)


TOKENS = BudgetStop(F.TOKEN_BUDGET_EXCEEDED, "used 120 tokens, budget 100")
COST = BudgetStop(F.COST_BUDGET_EXCEEDED, "spent $0.2000, budget $0.1000")

CASES: list[tuple[str, AttemptFacts, Verdict]] = [
    ("every criterion passed",
     AttemptFacts([passed(), passed("output_contains")], timeout=20),
     Verdict(F.SUCCESS, None, 1.0)),
    ("one of two failed: its detail is the message, the score its weight",
     AttemptFacts([passed(weight=3), failed()], timeout=20),
     Verdict(F.FAILURE, "file_exists: out.txt does not exist", 0.75, AGENT)),
    ("every failure is named, in order",
     AttemptFacts([failed(), failed("exit_code", "exit code 1, expected 0")]),
     Verdict(F.FAILURE, "file_exists: out.txt does not exist; exit_code: exit code 1, "
             "expected 0", 0.0, AGENT)),
    ("no criteria and the command ran to its end: nothing judges it",
     AttemptFacts([], timeout=20),
     Verdict(F.NOT_GRADED, None, 0.0)),
    ("the command ran past its deadline, whatever its criteria said",
     AttemptFacts([passed()], command_timed_out=True, timeout=20),
     Verdict(F.TIMEOUT, "timed out after 20s", 1.0, AGENT)),
    ("no criteria does not hide a timeout",
     AttemptFacts([], command_timed_out=True, timeout=0.5),
     Verdict(F.TIMEOUT, "timed out after 0.5s", 0.0, AGENT)),
    ("a run_command the deadline cut off is a timeout of the task",
     AttemptFacts([passed(), failed("run_command", CUT_OFF)], timeout=30),
     Verdict(F.TIMEOUT, "timed out after 30s", 0.5, AGENT)),
    ("a run_command not started past the deadline too",
     AttemptFacts([failed("run_command", NOT_RUN)], timeout=30),
     Verdict(F.TIMEOUT, "timed out after 30s", 0.0, AGENT)),
    ("a budget stop outranks the timeout and the criteria",
     AttemptFacts([failed()], command_timed_out=True, timeout=20, budget_stop=TOKENS),
     Verdict(F.TOKEN_BUDGET_EXCEEDED, "used 120 tokens, budget 100", 0.0, AGENT)),
    ("the cost budget says what was spent",
     AttemptFacts([passed()], timeout=20, budget_stop=COST),
     Verdict(F.COST_BUDGET_EXCEEDED, "spent $0.2000, budget $0.1000", 1.0, AGENT)),
    ("the runner's own error outranks what the command did",
     AttemptFacts([failed()], command_timed_out=True, budget_stop=COST,
                  error="OSError: [Errno 28] No space left on device"),
     Verdict(F.ERROR, "OSError: [Errno 28] No space left on device", 0.0, INFRA)),
    ("a judge that could not answer: an error, never a verdict, named",
     AttemptFacts([passed(), CriterionResult(type="llm_judge", passed=False, errored=True,
                                             detail="the judge did not answer in 60s")],
                  timeout=20),
     Verdict(F.ERROR, "llm_judge: the judge did not answer in 60s", 0.5, INFRA)),
    ("a timeout outranks a judge that could not answer",
     AttemptFacts([CriterionResult(type="llm_judge", passed=False, errored=True, detail="x")],
                  command_timed_out=True, timeout=20),
     Verdict(F.TIMEOUT, "timed out after 20s", 0.0, AGENT)),
    ("a sandbox that could not be prepared: the command never ran",
     AttemptFacts(build_failed="workdir /nope is not a folder"),
     Verdict(F.BUILD_FAILED, "workdir /nope is not a folder", 0.0, INFRA)),
    ("a build failure outranks everything",
     AttemptFacts([passed()], command_timed_out=True, budget_stop=TOKENS,
                  build_failed="cannot prepare the sandbox from w: disk full", error="E: e"),
     Verdict(F.BUILD_FAILED, "cannot prepare the sandbox from w: disk full", 1.0, INFRA)),
    ("silent past its stall_timeout: stalled, infrastructure's",
     AttemptFacts([failed()], timeout=20, stalled="stalled: no output for 30s"),
     Verdict(F.STALLED, "stalled: no output for 30s", 0.0, INFRA)),
    ("silent with no model call waiting on its API, as the gateway saw: its own stall",
     AttemptFacts([failed()], timeout=20, stalled="stalled: no output for 30s",
                  own_stall=True),
     Verdict(F.STALLED, "stalled: no output for 30s", 0.0, AGENT)),
    ("a failure while its model API was failing, by its own word: said, still the agent's",
     AttemptFacts([failed("exit_code", "exit code 1, expected 0")], timeout=20,
                  api_error="api_retry 10/10: 529 overloaded"),
     Verdict(F.FAILURE, "exit_code: exit code 1, expected 0 (the agent's model API failed: "
             "api_retry 10/10: 529 overloaded)", 0.0, AGENT)),
    ("a workspace the command made ungradable: a failure, the agent's",
     AttemptFacts([passed()], timeout=20, unfit="folders nested deeper than 256 levels"),
     Verdict(F.FAILURE, "the workspace cannot be graded: folders nested deeper than 256 "
             "levels", 1.0, AGENT)),
    ("a timeout outranks an ungradable workspace",
     AttemptFacts([], command_timed_out=True, timeout=20, unfit="a path too long"),
     Verdict(F.TIMEOUT, "timed out after 20s", 0.0, AGENT)),
    ("a success whatever its API went through",
     AttemptFacts([passed()], timeout=20, api_error="api_retry 1/10: 529 overloaded"),
     Verdict(F.SUCCESS, None, 1.0)),
]


@pytest.mark.parametrize(("facts", "expected"), [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_each_thing_that_can_happen_gets_its_status_message_and_score(
    facts: AttemptFacts, expected: Verdict
) -> None:
    assert final_status(facts) == expected


criteria = st.lists(st.builds(
    CriterionResult, type=st.sampled_from(["exit_code", "file_exists", "run_command"]),
    passed=st.booleans(), weight=st.floats(0.1, 10),
    detail=st.sampled_from(["exit code 0", "lacks ['x']", CUT_OFF, NOT_RUN]),
    errored=st.booleans() | st.just(False),
), max_size=5)
facts = st.builds(
    AttemptFacts, criteria=criteria, command_timed_out=st.booleans(),
    timeout=st.floats(0.1, 1e4),
    budget_stop=st.none() | st.sampled_from([TOKENS, COST]),
    build_failed=st.none() | st.just("workdir w is not a folder"),
    error=st.none() | st.just("RuntimeError: boom"),
    unfit=st.none() | st.just("folders nested deeper than 256 levels"),
)


def _cut_off(facts: AttemptFacts) -> bool:
    return any(c.detail in (CUT_OFF, NOT_RUN) for c in facts.criteria)


@settings(max_examples=200, deadline=None)
@given(facts)
def test_a_message_says_why_exactly_when_the_attempt_did_not_succeed(
    facts: AttemptFacts,
) -> None:
    verdict = final_status(facts)
    assert (verdict.error_message is None) == (verdict.status in (F.SUCCESS, F.NOT_GRADED))


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@settings(max_examples=200, deadline=None)
@given(facts)
def test_success_is_every_criterion_passing_with_nothing_cut_short(facts: AttemptFacts) -> None:
    clean = (facts.build_failed is None and facts.error is None and facts.budget_stop is None
             and not facts.command_timed_out and not _cut_off(facts) and facts.unfit is None)
    succeeded = final_status(facts).status is F.SUCCESS
    assert succeeded == (clean and bool(facts.criteria)
                         and all(c.passed and not c.errored for c in facts.criteria))


@settings(max_examples=200, deadline=None)
@given(facts)
def test_the_first_fact_in_the_documented_order_decides(facts: AttemptFacts) -> None:
    status = final_status(facts).status
    if facts.build_failed is not None:
        assert status is F.BUILD_FAILED
    elif facts.error is not None:
        assert status is F.ERROR
    elif facts.budget_stop is not None:
        assert status is facts.budget_stop.status
    elif facts.command_timed_out or _cut_off(facts):
        assert status is F.TIMEOUT
    elif facts.unfit is not None:
        assert status is F.FAILURE
    elif any(c.errored for c in facts.criteria):
        assert status is F.ERROR
    else:
        assert status in (F.NOT_GRADED, F.SUCCESS, F.FAILURE)


@settings(max_examples=200, deadline=None)
@given(facts)
def test_the_score_is_the_passed_weight_whatever_the_status(facts: AttemptFacts) -> None:
    total = sum(c.weight for c in facts.criteria)
    expected = sum(c.weight for c in facts.criteria if c.passed) / total if total else 0.0
    assert final_status(facts).score == pytest.approx(expected)
    assert 0.0 <= final_status(facts).score <= 1.0
