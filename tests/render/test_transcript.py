"""``render._transcript``'s pure parts a page is made of: what a conversation says of time."""

from __future__ import annotations

import json
import re

import pytest

from evalledger.app import Attempt, Line
from evalledger.ledger import TaskCompleted, TaskStarted
from evalledger.render import AttemptMark, Said, conversation
from evalledger.render._html import environment
from evalledger.render._transcript import in_workspace
from evalledger.statuses import FinalStatus


def _started(attempt: int, second: int, seq: int) -> Attempt:
    return Attempt(started=TaskStarted(run_id="r", task_key="k", task_id="k", seq=seq,
                                       attempt=attempt, ts=f"2026-01-01T00:00:{second:02d}Z"))


def _line(seq: int, second: float, attempt: int) -> Line:
    return Line(seq=seq, ts=f"2026-01-01T00:00:{second:04.1f}Z", attempt=attempt, n=seq,
                stream="stdout", text=f"line {seq}")


TRIES = [_started(1, 0, 1), _started(2, 30, 10)]


def _times(items: list[Said | AttemptMark]) -> list[tuple[float | None, float | None]]:
    return [(i.elapsed, i.took) for i in items if isinstance(i, Said)]


def test_each_step_says_when_it_came_from_its_attempts_start() -> None:
    rows: list[Line | AttemptMark] = [
        _line(2, 1.5, 1), _line(3, 4.0, 1), AttemptMark(2, TRIES[1]), _line(11, 32.0, 2)]
    assert _times(conversation(rows, TRIES)) == [(1.5, 1.5), (4.0, 2.5), (2.0, 2.0)]


def test_a_page_that_starts_inside_an_attempt_knows_no_time_before_its_first_step() -> None:
    """Its line before is on the page before: what the first step took is not known
    here; an attempt that begins on the page measures from its start."""
    rows: list[Line | AttemptMark] = [
        _line(5, 9.0, 1), _line(6, 10.0, 1), AttemptMark(2, TRIES[1]), _line(11, 33.0, 2)]
    assert _times(conversation(rows, TRIES, from_start=False)) == [
        (9.0, None), (10.0, 1.0), (3.0, 3.0)]


SANDBOX = "/tmp/evalledger-20261207-053025-5234-0123456789abcdef/17"


@pytest.mark.parametrize(("text", "shown"), [
    (f"{SANDBOX}/median.py", "median.py"),
    (f"cd {SANDBOX} && python -m pytest tests/", "cd . && python -m pytest tests/"),
    (f"File created successfully at: {SANDBOX}/src/a.py", "File created successfully at: "
                                                         "src/a.py"),
    (f'{{"path": "{SANDBOX}"}}', '{"path": "."}'),
    (f"{SANDBOX}7/a.py", "a.py"),  # the 177th attempt's
    ("/work/median.py and /tmp/evalledger-notes.txt", "/work/median.py and "
                                                     "/tmp/evalledger-notes.txt"),
])
def test_a_path_into_an_attempts_sandbox_reads_relative_to_its_workspace(
        text: str, shown: str) -> None:
    assert in_workspace(text) == shown


def test_a_conversation_names_the_files_an_agent_without_isolation_touched_by_their_place(
) -> None:
    """Claude Code without isolation names the files it writes by their sandbox path:
    the conversation shows where they are in the workspace (the full path on hover)."""
    write = {"type": "assistant", "message": {"id": "m1", "role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "Write",
         "input": {"file_path": f"{SANDBOX}/median.py", "content": "print(2)\n"}}]}}
    done = {"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1",
         "content": f"File created successfully at: {SANDBOX}/median.py"}]}}
    rows = [Line(seq=2 + i, ts="2026-01-01T00:00:01.0Z", attempt=1, n=1 + i, stream="json",
                 text=json.dumps(data), data=data) for i, data in enumerate((write, done))]
    tries = [Attempt(started=TaskStarted(
        run_id="r", task_key="k", task_id="k", seq=1, attempt=1, ts="2026-01-01T00:00:00Z",
        definition={"stream_format": "claude-code"}))]
    page = environment().get_template("_conversation.html").render(
        items=conversation(rows, tries), search=None)
    assert '<span class="mono path" title="' + SANDBOX + '/median.py">median.py</span>' in page
    assert "File created successfully at: median.py" in page
    assert SANDBOX not in page.replace(f'title="{SANDBOX}/median.py"', "")


def _bash(call: str, command: str) -> dict[str, object]:
    return {"type": "assistant", "message": {"id": f"m-{call}", "role": "assistant",
            "content": [{"type": "tool_use", "id": call, "name": "Bash",
                         "input": {"command": command}}]}}


def _result(call: str) -> dict[str, object]:
    return {"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call, "content": "ok"}]}}


def _claude_rows(attempt: int, first_seq: int, *lines: dict[str, object]) -> list[Line]:
    return [Line(seq=first_seq + i, ts="2026-01-01T00:00:01.0Z", attempt=attempt, n=1 + i,
                 stream="json", text=json.dumps(data), data=data)
            for i, data in enumerate(lines)]


def _claude_try(attempt: int, seq: int, ended: FinalStatus | None) -> Attempt:
    started = TaskStarted(run_id="r", task_key="k", task_id="k", seq=seq, attempt=attempt,
                          ts="2026-01-01T00:00:00Z", definition={"stream_format": "claude-code"})
    completed = None if ended is None else TaskCompleted(
        run_id="r", task_key="k", attempt=attempt, final_status=ended,
        category=ended.category)
    return Attempt(started=started, completed=completed)


@pytest.mark.parametrize(("ended", "to_end", "said"), [
    (FinalStatus.TIMEOUT, True, "still running when the attempt timed out: no result came"),
    (FinalStatus.FAILURE, True, "still running when the attempt ended (FAILURE): no result "
                                "came"),
    (None, True, None),  # running: its result may come yet
    (FinalStatus.TIMEOUT, False, None),  # its result may be on the next page
])
def test_a_command_an_attempt_ended_without_a_result_for_reads_as_still_running(
        ended: FinalStatus | None, to_end: bool, said: str | None) -> None:
    """#49: a timed-out agent's last command (``sleep 600``) looked like any other step;
    it is marked as still running when the attempt ended. The answered one is not."""
    rows = _claude_rows(1, 2, _bash("t1", "ls"), _result("t1"), _bash("t2", "sleep 600"))
    page = environment().get_template("_conversation.html").render(
        items=conversation(rows, [_claude_try(1, 1, ended)], to_end=to_end), search=None)
    notes = re.findall(r'<div class="still-running" role="note">([^<]*)</div>', page)
    assert notes == ([] if said is None else [said])
    if said:  # under the unanswered call, not the answered one
        assert page.index("sleep 600") < page.index(said) and page.index("ls") < page.index(
            "sleep 600")


def test_an_earlier_attempts_unanswered_call_is_marked_though_the_page_goes_on() -> None:
    """The first attempt's rows end where the second's begin: its call is settled even
    on a page that is not the transcript's last."""
    rows: list[Line | AttemptMark] = [
        *_claude_rows(1, 2, _bash("t1", "sleep 600")),
        *_claude_rows(2, 11, _bash("t9", "make test"))]
    tries = [_claude_try(1, 1, FinalStatus.TIMEOUT), _claude_try(2, 10, FinalStatus.TIMEOUT)]
    items = conversation(rows, tries, to_end=False)
    said = [(i.unanswered, i.ended) for i in items if isinstance(i, Said)]
    assert said == [(frozenset({"t1"}), "timed out"), (frozenset(), "")]
