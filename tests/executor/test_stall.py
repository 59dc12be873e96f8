"""Stalls, failure classes, retries of infrastructure failures and the circuit breaker,
with real processes and a real ledger (docs/tasks.md, "Stalls and retries")."""

from __future__ import annotations

from pathlib import Path

from evalledger.executor import Callbacks
from evalledger.ledger import AnyEvent, Ledger, TaskCompleted, TaskEmitted, TaskOutput, TaskStalled
from evalledger.projections import SummaryFold, fold
from evalledger.statuses import FailureClass, FinalStatus, RunStatus
from tests.processes import still_alive
from tests.waiting import PATIENCE

from .batches import config, events, make_task, of_type, py, run, script

# Prints a line at once (a shell's echo: no interpreter to start first, which a loaded
# machine can take longer than the stall timeout to do), writes its pid, then hangs.
HANGS = ["sh", "-c", 'echo working; echo $$ > "$1"; exec sleep 600', "hangs"]

# Prints, then waits in silence until $1 exists, then prints again and ends well.
RECOVERS = ["sh", "-c", 'echo a; while [ ! -e "$1" ]; do sleep 0.01; done; echo b',
            "recovers"]


def _hung(tmp_path: Path, *, stall_timeout: float) -> tuple[list[AnyEvent], Path]:
    """The events of a run of HANGS (ended as stalled), and the file of its pid."""
    pidfile = tmp_path / "pid"
    task = make_task("hangs", [*HANGS, str(pidfile)], timeout=PATIENCE * 4,
                     stall_timeout=stall_timeout)
    with Ledger(tmp_path / "l.db") as ledger:
        run(ledger, [task], config(tmp_path))
        return events(ledger), pidfile


def test_an_agent_that_prints_then_hangs_is_stalled_and_ended_before_its_timeout(
    tmp_path: Path,
) -> None:
    evs, pidfile = _hung(tmp_path, stall_timeout=0.5)
    [stalled] = of_type(evs, TaskStalled)
    [line] = of_type(evs, TaskOutput)
    # Its evidence: the last thing it said, where the ledger holds it, and when.
    assert (stalled.action, stalled.attempt, stalled.last_n) == ("kill", 1, line.n)
    assert stalled.last_seq == line.seq and stalled.last_at == line.ts
    assert 0.5 <= stalled.idle_seconds < PATIENCE
    [done] = of_type(evs, TaskCompleted)
    assert done.final_status is FinalStatus.STALLED and done.category == "error"
    assert done.failure_class is FailureClass.INFRA
    assert done.error_message and done.error_message.startswith("stalled: no output for")
    assert done.duration_seconds < PATIENCE  # its timeout was four times that
    assert not still_alive([int(pidfile.read_text())])
    summary = fold(SummaryFold("run-1"), evs).summary()
    assert (summary.tasks_infra, summary.tasks[0].failure_class) == (1, FailureClass.INFRA)


def test_a_warned_stall_is_recorded_and_the_attempt_goes_on(tmp_path: Path) -> None:
    go = tmp_path / "go"

    def on_event(event: AnyEvent) -> None:
        # Its silence after "a" is in the ledger: let it speak. (A stall before "a", on
        # a machine slow to start the shell, is recorded too; the next one is after it.)
        if isinstance(event, TaskStalled) and event.last_n >= 1:
            go.touch()

    task = make_task("recovers", [*RECOVERS, str(go)], timeout=PATIENCE, stall_timeout=0.3,
                     stall_action="warn")
    with Ledger(tmp_path / "l.db") as ledger:
        run(ledger, [task], config(tmp_path), Callbacks(on_event=on_event))
        evs = events(ledger)
    stalls = of_type(evs, TaskStalled)
    assert {s.action for s in stalls} == {"warn"} and stalls[-1].last_n == 1
    [done] = of_type(evs, TaskCompleted)
    assert done.final_status is FinalStatus.SUCCESS and done.failure_class is None
    assert [e.line for e in of_type(evs, TaskOutput)] == ["a", "b"]


def test_a_json_event_or_a_line_is_what_keeps_an_attempt_alive(tmp_path: Path) -> None:
    """Steady output, every line well within the stall timeout: never stalled."""
    talks = script(tmp_path, "talks", "import time\nfor i in range(8):\n"
                   "    print('{\"i\": %d}' % i if i % 2 else i, flush=True)\n"
                   "    time.sleep(0.05)\n")
    task = make_task("talks", py(talks), stall_timeout=PATIENCE)
    with Ledger(tmp_path / "l.db") as ledger:
        run(ledger, [task], config(tmp_path))
        evs = events(ledger)
    assert not of_type(evs, TaskStalled)
    assert len(of_type(evs, TaskEmitted)) == 4
    assert of_type(evs, TaskCompleted)[0].final_status is FinalStatus.SUCCESS


def test_a_command_that_cannot_start_twice_is_retried_and_its_third_attempt_counts(
    tmp_path: Path,
) -> None:
    agent = tmp_path / "bin" / "agent"
    failures: list[TaskCompleted] = []

    def on_event(event: AnyEvent) -> None:
        # Committed before the batch hears of it: the second failure mends the machine.
        if isinstance(event, TaskCompleted) and event.failure_class is FailureClass.INFRA:
            failures.append(event)
            if len(failures) == 2:
                agent.parent.mkdir()
                agent.write_text("#!/bin/sh\necho started\n")
                agent.chmod(0o755)

    task = make_task("flaky", [str(agent)], retries=3)
    with Ledger(tmp_path / "l.db") as ledger:
        result = run(ledger, [task], config(tmp_path, retry_backoff=0.0),
                     Callbacks(on_event=on_event))
        evs = events(ledger)
    ended = of_type(evs, TaskCompleted)
    assert [(e.attempt, e.final_status, e.failure_class) for e in ended] == [
        (1, FinalStatus.ERROR, FailureClass.INFRA), (2, FinalStatus.ERROR, FailureClass.INFRA),
        (3, FinalStatus.SUCCESS, None)]
    assert "No such file or directory" in (ended[0].error_message or "")
    assert [e.attempt for e in evs if e.type == "task.started"] == [1, 2, 3]
    assert result.status is RunStatus.COMPLETED
    [row] = fold(SummaryFold("run-1"), evs).summary().tasks
    assert (row.final_status, row.attempts, row.failure_class) == (FinalStatus.SUCCESS, 3, None)


def test_an_agent_failure_is_never_retried(tmp_path: Path) -> None:
    task = make_task("fails", ["false"], retries=3)
    with Ledger(tmp_path / "l.db") as ledger:
        run(ledger, [task], config(tmp_path, retry_backoff=0.0))
        [done] = of_type(events(ledger), TaskCompleted)
    assert (done.attempt, done.final_status, done.failure_class) == (
        1, FinalStatus.FAILURE, FailureClass.AGENT)


def test_the_breaker_stops_dispatching_after_infrastructure_fails_in_a_row(
    tmp_path: Path,
) -> None:
    missing = str(tmp_path / "no-such-agent")
    tasks = [make_task(f"t{i}", [missing]) for i in range(6)]
    with Ledger(tmp_path / "l.db") as ledger:
        result = run(ledger, tasks, config(tmp_path, max_parallel=1, max_infra_failures=2))
        ended = of_type(events(ledger), TaskCompleted)
    assert result.status is RunStatus.INFRA_STOPPED
    # Two in a row trip it: nothing more is dispatched (its ends are counted first).
    assert len(ended) == 2
    assert all(e.failure_class is FailureClass.INFRA for e in ended)


def test_a_success_between_infrastructure_failures_resets_the_breaker(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-agent")
    tasks = [make_task("a", [missing]), make_task("b", ["true"]), make_task("c", [missing]),
             make_task("d", ["true"])]
    with Ledger(tmp_path / "l.db") as ledger:
        result = run(ledger, tasks, config(tmp_path, max_parallel=1, max_infra_failures=2))
        ended = of_type(events(ledger), TaskCompleted)
    assert result.status is RunStatus.COMPLETED
    assert len(ended) == 4


def _claude(lines: list[dict[str, object]], exit_code: int) -> str:
    """A script that prints these stream-json lines (Claude Code's shapes), then exits."""
    import json

    return (f"import sys\nfor line in {[json.dumps(x) for x in lines]!r}:\n"
            f"    print(line, flush=True)\nsys.exit({exit_code})\n")


INIT = {"type": "system", "subtype": "init", "model": "claude-sonnet-4-5", "session_id": "s"}
RETRY = {"type": "system", "subtype": "api_retry", "attempt": 10, "max_retries": 10,
         "retry_delay_ms": 500, "error_status": 529, "error": "overloaded"}
SPOKE = {"type": "assistant", "message": {"model": "claude-sonnet-4-5", "content": [
    {"type": "text", "text": "I will fix it."}], "usage": {"input_tokens": 10,
                                                           "output_tokens": 5}}}
GAVE_UP = {"type": "result", "subtype": "success", "is_error": True,
           "terminal_reason": "api_error", "api_error_status": 529,
           "result": "API Error: 529 Overloaded", "num_turns": 1}
FAILED = {"type": "result", "subtype": "success", "is_error": False, "result": "done",
          "num_turns": 2}


def test_claude_codes_overloaded_api_is_said_and_stays_the_agents_failure(
    tmp_path: Path,
) -> None:
    """A printed 529 made the failure infra and earned retries: an agent under test could
    print one to hide its failure (#45). Said in the message; the agent's; not retried."""
    tasks = [
        make_task("gave-up", py(script(tmp_path, "gave_up", _claude(
            [INIT, RETRY, RETRY, GAVE_UP], 1))), stream_format="claude-code", retries=2),
        make_task("mid-retry", py(script(tmp_path, "mid_retry", _claude(
            [INIT, SPOKE, RETRY], 1))), stream_format="claude-code", retries=2),
        # Retried, answered, then failed on its own: the agent's failure.
        make_task("own-fault", py(script(tmp_path, "own_fault", _claude(
            [INIT, RETRY, SPOKE, FAILED], 1))), stream_format="claude-code"),
    ]
    with Ledger(tmp_path / "l.db") as ledger:
        run(ledger, tasks, config(tmp_path))
        evs = events(ledger)
        ended = {e.task_key.split("/")[1]: e for e in of_type(evs, TaskCompleted)}
    assert {k: (e.final_status, e.failure_class) for k, e in ended.items()} == {
        "gave-up": (FinalStatus.FAILURE, FailureClass.AGENT),
        "mid-retry": (FinalStatus.FAILURE, FailureClass.AGENT),
        "own-fault": (FinalStatus.FAILURE, FailureClass.AGENT)}
    assert len(of_type(evs, TaskCompleted)) == 3  # none tried again
    assert "(the agent's model API failed: result is_error: 529" in (
        ended["gave-up"].error_message or "")
    assert "api_retry 10/10: 529 overloaded" in (ended["mid-retry"].error_message or "")
    # The agent's word is no evidence: its failures stay in the rates.
    summary = fold(SummaryFold("run-1"), evs).summary()
    assert (summary.tasks_infra, summary.graded, summary.pass_rate) == (0, 3, 0.0)


def test_a_stalled_attempt_is_never_regraded() -> None:
    """It was ended halfway: what it left is not its result, whatever criteria say."""
    from evalledger.executor._regrade import gradable

    assert not gradable(FinalStatus.STALLED)
    assert gradable(FinalStatus.FAILURE) and gradable(FinalStatus.TIMEOUT)


def test_a_stall_sooner_than_the_linger_comes_after_the_line_it_names(tmp_path: Path) -> None:
    """Its line still held (a stall_timeout under the half second lines are held for):
    written, and committed, before the stall, whose last_seq is its seq."""
    evs, _ = _hung(tmp_path, stall_timeout=0.2)
    [line] = of_type(evs, TaskOutput)
    stalled = of_type(evs, TaskStalled)[-1]
    assert (stalled.last_n, stalled.last_seq) == (line.n, line.seq)
    assert line.seq is not None and stalled.seq is not None and line.seq < stalled.seq
