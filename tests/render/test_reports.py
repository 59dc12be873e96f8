"""``run.md`` (``render/_reports``): what it says, what it leaves out, and that text from
the ledger (an error message, a model's name, a path) never changes the document's
structure, read back by a CommonMark parser with tables."""

from __future__ import annotations

import pytest

from evalledger.ledger import (
    AnyEvent,
    RunFinished,
    RunResumed,
    RunStarted,
    TaskSkipped,
    TaskUsage,
)
from evalledger.render import render_markdown
from evalledger.statuses import FinalStatus, RunStatus
from tests.projections.builders import RUN, completed, key, started, summarize, usage
from tests.render.markdown import MD, REPORT_HEADINGS, headings, table_rows

K0 = "default/t0/00"


# -- what it says ----------------------------------------------------------------------------


def test_markdown_report_says_what_a_reader_needs() -> None:
    events: list[AnyEvent] = [
        RunStarted(run_id=RUN, planned=[key(0), key(1), key(2)], experiment_id="exp-7",
                   max_parallel=3),
        TaskSkipped(run_id=RUN, path="tasks/broken.yaml", reason="missing command | bad"),
        started(key(0)), usage(key(0), None, input_tokens=4),
        completed(key(0), FinalStatus.SUCCESS, weighted_score=1.0, duration_seconds=3.25,
                  cost_complete=False),
        started(key(1)),
        completed(key(1), FinalStatus.ERROR, error_message="sandbox\nvanished"),
        RunFinished(run_id=RUN, status=RunStatus.INTERRUPTED),
        resumed := RunResumed(
            run_id=RUN, to_run=[key(2)], max_parallel=3,
            drift={"lines": ["option timeout: 60 -> 90", f"task {key(2)}: definition changed"]},
        ),
        started(key(2)), completed(key(2), FinalStatus.FAILURE),
        RunFinished(run_id=RUN, status=RunStatus.COMPLETED),
    ]
    s = summarize(events)
    assert s.fingerprint_drift == [{"at": resumed.ts, "lines": [
        "option timeout: 60 -> 90", f"task {key(2)}: definition changed"]}]
    assert [(k.path, k.reason) for k in s.skipped_tasks] == [
        ("tasks/broken.yaml", "missing command | bad")
    ]
    md = render_markdown(s)
    assert md.startswith(f"# Run {RUN}\n")
    assert "- Status: **completed** (experiment `exp-7`)" in md
    assert "- Max parallel: 3" in md
    # The ERROR measures no agent: left out of the rate, and said so.
    assert "| 3 | 3 | 1 | 1 | 0 | 0 | 1 | 0 | 0 | 50.0% [9.5%, 90.5%] |" in md
    assert ("Pass rates: (1 infrastructure failure(s) left out; --count-infra counts "
            "them).") in md
    assert f"| {key(0)} | SUCCESS | 1.00 | 3.2s | 0 | unknown |" in md
    # An error of several lines: its digest in the row (one row stays one row, no
    # literal \n), the message whole below, line breaks kept.
    assert f"| {key(1)} | ERROR (infra) | 0.00 | 0.0s | 0 | unknown | sandbox … vanished |" in md
    assert f"## Errors in full\n\n- `{key(1)}`:\n\n  ```\n  sandbox\n  vanished\n  ```\n" in md
    assert "Cost is a floor: 1 task(s)" in md
    assert "## Skipped task files" in md
    assert "- `tasks/broken.yaml`: missing command \\| bad" in md
    assert "## Drift since the run started" in md
    assert (
        f"- at {resumed.ts}: option timeout: 60 -> 90; task {key(2)}: definition changed"
    ) in md


def test_markdown_leaves_out_sections_with_nothing_to_say() -> None:
    s = summarize([
        RunStarted(run_id=RUN, planned=[key(0)]),
        started(key(0)), completed(key(0), FinalStatus.SUCCESS),
        RunFinished(run_id=RUN, status=RunStatus.COMPLETED),
    ])
    md = render_markdown(s)
    assert "- Status: **completed**\n" in md
    for absent in ("Skipped task files", "Drift since", "floor", "experiment"):
        assert absent not in md


# -- text from the ledger must not change the document's structure -------------------------


@pytest.mark.parametrize("message", ["first\r\nsecond", "first\rsecond"])
def test_a_carriage_return_in_an_error_message_keeps_the_task_row_whole(message: str) -> None:
    # An error message taken from a tool's output with CRLF line ends. `_cell` turns
    # "\n" into a space but leaves "\r", which Markdown also reads as a line end: the
    # row is cut in two and "second" becomes a row of its own.
    s = summarize([RunStarted(run_id=RUN, planned=[K0]), started(K0),
                   completed(K0, FinalStatus.ERROR, error_message=message)])
    rows = [r for r in table_rows(render_markdown(s)) if len(r) == 7]  # the Tasks table
    assert len(rows) == 2, rows  # its header and exactly one task row
    assert rows[1][0] == K0
    assert "first" in rows[1][6] and "second" in rows[1][6]


def test_markup_in_an_error_message_is_shown_not_interpreted() -> None:
    # "expected <int>" is raw HTML to a Markdown renderer: the words vanish (or, for
    # <details> and the like, swallow the rest of the table) on GitHub and in viewers.
    message = "expected <int> got <details>"
    s = summarize([RunStarted(run_id=RUN, planned=[K0]), started(K0),
                   completed(K0, FinalStatus.FAILURE, error_message=message)])
    html = MD.render(render_markdown(s))
    assert "&lt;int&gt;" in html and "&lt;details&gt;" in html
    assert "<details>" not in html


@pytest.mark.parametrize("where", ["model", "environment", "drift"])
def test_free_text_from_the_ledger_adds_no_heading_to_run_md(where: str) -> None:
    # Model names come from the command's own usage lines, environment values and
    # drift lines are written out unescaped: a newline in any of them starts a new
    # Markdown block (here a heading) in run.md.
    evil = "x\n## Injected"
    events: list[AnyEvent] = [RunStarted(run_id=RUN, planned=[K0]), started(K0)]
    if where == "model":
        events.append(TaskUsage(run_id=RUN, task_key=K0, model=evil, cost_usd=0.0))
    env = {"agent": evil} if where == "environment" else {}
    events.append(completed(K0, environment_info=env))
    if where == "drift":
        events.append(RunResumed(run_id=RUN, drift={"lines": [f"task {evil}: new"]}))
    events += [TaskSkipped(run_id=RUN, path="tasks/bad.yaml", reason="bad"),
               RunFinished(run_id=RUN, status=RunStatus.COMPLETED)]
    found = headings(render_markdown(summarize(events)))
    assert "Injected" not in found, found
    assert set(found) <= set(REPORT_HEADINGS)


def test_a_skipped_path_with_a_backtick_is_one_code_span() -> None:
    path = "tasks/it`s.yaml"
    s = summarize([RunStarted(run_id=RUN), TaskSkipped(run_id=RUN, path=path, reason="bad")])
    spans = [
        child.content
        for token in MD.parse(render_markdown(s)) if token.children
        for child in token.children if child.type == "code_inline"
    ]
    assert path in spans, spans
