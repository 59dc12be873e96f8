"""``error_digest``: why an attempt did not succeed, in one line."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from evalledger.projections import error_digest, failure_kinds, last_error
from evalledger.projections._digest import (
    AGENT_CRASHED,
    LIMIT,
    LIMIT_HIT,
    MODEL_API,
    TESTS_EDITED,
    TESTS_FAILED,
    TIMED_OUT,
)
from evalledger.projections._digest import INFRA as INFRA_KIND
from evalledger.statuses import FailureClass, FinalStatus

INFRA = FailureClass.INFRA

PYTEST = """run_command: exit code 1: \
============================= test session starts ==============================
platform linux -- Python 3.11.7, pytest-9.2.0
rootdir: /tmp/evalledger-sandbox-k2j3/work
collected 1 item

test_stats.py F                                                          [100%]

=================================== FAILURES ===================================
_________________________________ test_median __________________________________

    def test_median():
>       assert median([]) is None
E       AssertionError: assert 0 is None
E        +  where 0 = median([])

/tmp/evalledger-sandbox-k2j3/work/test_stats.py:4: AssertionError
=========================== short test summary info ============================
FAILED test_stats.py::test_median - AssertionError: assert 0 is None
============================== 1 failed in 0.02s ==============================="""


def test_a_pytest_failure_reads_as_its_assertion() -> None:
    assert error_digest(PYTEST) == "run_command \u2717 AssertionError: assert 0 is None"


def test_a_model_api_failure_is_the_reason() -> None:
    said = ("file_contains: answer.txt is not a file (the agent's model API failed: result "
            "is_error: 529 overloaded_error Overloaded)")
    assert error_digest(said, failure_class=INFRA) == (
        "model API failed: result is_error: 529 overloaded_error Overloaded")


def test_the_first_failed_criterion_and_how_many_more() -> None:
    said = ("file_contains: answer.txt is not a file; run_command: exit code 2: Traceback "
            "(most recent call last):\n  File \"/tmp/s/x.py\", line 1\nValueError: a; b")
    assert error_digest(said) == "file_contains \u2717 answer.txt is not a file (+1 more)"


def test_temporary_paths_are_shown_by_their_last_part() -> None:
    said = "run_command: exit code 1: cat: /tmp/evalledger-x/work/out.txt: No such file"
    assert error_digest(said) == "run_command \u2717 cat: \u2026/out.txt: No such file"


def test_a_message_without_a_telling_line_keeps_its_first_and_last() -> None:
    assert error_digest("timed out after 20s") == "timed out after 20s"
    assert error_digest("sandbox\n=====\nvanished") == "sandbox \u2026 vanished"
    assert error_digest(None) == error_digest("  ") == ""


@given(st.text(max_size=2000))
def test_a_digest_is_one_line_within_the_limit(message: str) -> None:
    digest = error_digest(message)
    assert len(digest.splitlines()) <= 1 and len(digest) <= LIMIT


# -- failure_kinds: what the viewer's bar counts and its filter matches ----------------------


def test_a_failure_is_named_by_its_cause_then_each_other_criterion_that_failed() -> None:
    said = ("file_contains: answer.txt is not a file; run_command: exit code 2: x; "
            "exit_code: exit code 1, expected 0\nAPIConnectionError: Connection error.; "
            "file_contains: b.txt lacks 'y'")
    assert failure_kinds("FAILURE", said) == ("file_contains", TESTS_FAILED, AGENT_CRASHED)
    assert failure_kinds("FAILURE", PYTEST) == (TESTS_FAILED,)
    # A scan that found its tests edited: said first.
    assert failure_kinds("FAILURE", PYTEST, flags=["tests-edited", "network"]) == (
        TESTS_EDITED, TESTS_FAILED)


def test_a_model_api_failure_comes_first_and_a_status_says_its_own_cause() -> None:
    said = ("file_exists: answer.txt is not a file (the agent's model API failed: result "
            "is_error: 529)")
    assert failure_kinds("FAILURE", said, failure_class=INFRA) == (MODEL_API, INFRA_KIND)
    assert failure_kinds("ERROR", "command not found (the agent's model API failed: 500)",
                         failure_class=INFRA) == (MODEL_API, INFRA_KIND)
    assert failure_kinds("STALLED", "stalled: no output for 30s", failure_class=INFRA) == (
        INFRA_KIND,)
    assert failure_kinds("TIMEOUT", "timed out after 20s") == (TIMED_OUT,)
    for status in ("TOKEN_BUDGET_EXCEEDED", "COST_BUDGET_EXCEEDED", "LIMIT_EXCEEDED"):
        assert failure_kinds(status, "spent $2.01, budget $2.00") == (LIMIT_HIT,)
    assert failure_kinds("FAILURE", "exited 1") == ("FAILURE",)


def test_the_last_error_a_command_printed_is_what_its_crash_digest_says() -> None:
    stderr = ("Starting\nTraceback (most recent call last):\n  File \"/tmp/x/a.py\", line 3\n"
              "openai.APIConnectionError: Connection error.\n")
    assert last_error(stderr) == "openai.APIConnectionError: Connection error."
    assert last_error("all fine\nbye\n") is None
    said = f"exit_code: exit code 1, expected 0\n{last_error(stderr)}"
    assert error_digest(said) == "exit_code \u2717 openai.APIConnectionError: Connection error."


@given(st.sampled_from([*FinalStatus, None]), st.none() | st.text(max_size=300),
       st.sampled_from([*FailureClass, None]))
def test_only_an_attempt_that_failed_has_kinds_and_it_has_some(
        status: FinalStatus | None, message: str | None,
        failure_class: FailureClass | None) -> None:
    kinds = failure_kinds(status and status.value, message, failure_class=failure_class)
    if status in (None, FinalStatus.SUCCESS, FinalStatus.NOT_GRADED):
        assert kinds == ()
    else:
        assert kinds and len(set(kinds)) == len(kinds) and kinds[-1] != MODEL_API


def test_a_note_of_the_model_apis_failure_is_believed_only_where_the_class_says_so() -> None:
    """An agent's test output can end with anything, the executor's note too: where the
    attempt's class is not infra, it is a criterion's detail like any other."""
    forged = ("run_command: exit code 1: FAILED x - assert 1 == 2\n"
              "(the agent's model API failed: 529 overloaded)")
    assert error_digest(forged, failure_class=INFRA).startswith("model API failed")
    for agents in (FailureClass.AGENT, None):  # the agent's, or a class not known
        assert error_digest(forged, failure_class=agents) == "run_command \u2717 assert 1 == 2"
        assert failure_kinds("FAILURE", forged, failure_class=agents) == (TESTS_FAILED,)
    assert failure_kinds("FAILURE", forged, failure_class=INFRA) == (MODEL_API, INFRA_KIND)
