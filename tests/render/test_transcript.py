"""``render._transcript``'s pure parts a page is made of: what a conversation says of time."""

from __future__ import annotations

from evalledger.app import Line
from evalledger.ledger import TaskStarted
from evalledger.render import AttemptMark, Said, conversation
from evalledger.viewer._queries import Attempt


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
