"""``agent_version_command``: the agent's version asked once per batch, recorded in each
attempt's ``environment_info`` (where version drift is found), a failure recorded as
what it said."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalledger.ledger import Ledger, TaskCompleted
from evalledger.projections import SummaryFold, fold

from .batches import RUN, config, make_task, of_type, run
from .replay import ran


def _task(tmp_path: Path, name: str, ask: str, **fields: object):  # type: ignore[no-untyped-def]
    task = make_task(name, ["/bin/sh", "-c", "echo done"], agent_version_command=ask, **fields)
    # The command runs in the task's folder: a real one.
    return task.model_copy(update={"source": str(tmp_path / f"{name}.yaml")})


def test_it_is_asked_once_per_batch_and_recorded_by_every_attempt(tmp_path: Path) -> None:
    # Each run of the command adds a line to asked.txt (in the task's folder).
    ask = "echo asked >> asked.txt; printf '\\n  codex-cli 0.46.0  \\nmore\\n'"
    tasks = [_task(tmp_path, f"t{i}", ask) for i in range(4)]
    done = of_type(ran(tmp_path, tasks, config(tmp_path, max_parallel=4)), TaskCompleted)
    assert [d.environment_info["agent_version"] for d in done] == ["codex-cli 0.46.0"] * 4
    assert (tmp_path / "asked.txt").read_text() == "asked\n"


def test_a_failing_command_is_recorded_as_what_it_said(tmp_path: Path) -> None:
    task = _task(tmp_path, "t", "echo 'gemini: command not found' >&2; exit 127")
    [done] = of_type(ran(tmp_path, [task], config(tmp_path)), TaskCompleted)
    assert done.environment_info["agent_version"] == (
        "unknown: exit 127: gemini: command not found")
    assert done.final_status.value == "SUCCESS"  # the version is a fact, not a verdict


def test_two_versions_in_one_run_are_version_drift(tmp_path: Path) -> None:
    tasks = [_task(tmp_path, "old", "echo 0.45.0"), _task(tmp_path, "new", "echo 0.46.0")]
    with Ledger(tmp_path / "l.db") as ledger:
        run(ledger, tasks, config(tmp_path))
        summary = fold(SummaryFold(RUN), ledger.events(RUN)).summary()
    assert summary.version_drift["agent_version"] == {"0.45.0": 1, "0.46.0": 1}


def test_it_is_no_part_of_what_the_task_is(tmp_path: Path) -> None:
    """Asking another way is not drift: the definition (and its hash) leave it out."""
    one, other = _task(tmp_path, "t", "codex --version"), _task(tmp_path, "t", "codex -V")
    assert "agent_version_command" not in one.definition()
    assert one.definition_hash == other.definition_hash


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_it_is_asked_before_the_attempts_clock_starts(tmp_path: Path) -> None:
    """A slow answer is no part of the attempt: it cannot make the agent time out."""
    task = _task(tmp_path, "t", "sleep 1.5; echo 1.0", timeout=1)
    [done] = of_type(ran(tmp_path, [task], config(tmp_path)), TaskCompleted)
    assert (done.final_status.value, done.environment_info["agent_version"]) == (
        "SUCCESS", "1.0")


# Says "together" when the other question was asked while this one was: each marks its
# start, then looks for the other's for up to 20 s.
SIDE_BY_SIDE = ("touch {me}; for i in $(seq 200); do [ -e {other} ] && echo together && exit; "
                "sleep 0.1; done; echo alone")


def test_different_questions_are_asked_side_by_side(tmp_path: Path) -> None:
    a, b = tmp_path / "a.asked", tmp_path / "b.asked"
    tasks = [_task(tmp_path, "a", SIDE_BY_SIDE.format(me=a, other=b)),
             _task(tmp_path, "b", SIDE_BY_SIDE.format(me=b, other=a))]
    done = of_type(ran(tmp_path, tasks, config(tmp_path, max_parallel=2)), TaskCompleted)
    assert [d.environment_info["agent_version"] for d in done] == ["together"] * 2
