"""The viewer's routes, through Starlette's TestClient, on a ledger made by real runs."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from evalledger._text import money
from evalledger.app import search_run
from evalledger.ledger import Ledger
from evalledger.projections import SummaryFold, fold
from evalledger.render import render_json
from evalledger.viewer import create_app

from ..waiting import PATIENCE, wait_until
from .suites import Suite, run_json


@pytest.fixture(scope="module")
def client(suite: Suite) -> Iterator[TestClient]:
    with TestClient(create_app(suite.db, interval=0.05, keepalive=0.2)) as opened:
        yield opened


def rebuilt(db: Path, run_id: str, until: int | None = None) -> str:
    """run.json as of event ``until``: the fold stopped there, anchored there."""
    with Ledger(db, read_only=True) as ledger:
        events = ledger.events(run_id, types=SummaryFold.TYPES, until_seq=until)
        summary = fold(SummaryFold(run_id), events).summary()
        return render_json(summary.anchored(ledger.anchor(run_id, until_seq=until)))


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_runs_page_lists_runs_newest_first_with_their_numbers(
    client: TestClient, suite: Suite
) -> None:
    page = client.get("/")
    assert page.status_code == 200
    html = page.text
    assert html.index("run-b") < html.index("run-a")
    listing = client.get("/api/runs").json()
    assert [r["run_id"] for r in listing["runs"]] == ["run-b", "run-a"]
    for row in listing["runs"]:
        expected = run_json(suite, row["run_id"])
        for field in ("tasks_planned", "tasks_run", "tasks_succeeded", "tasks_failed",
                      "tasks_error", "pass_rate", "total_cost_usd", "cost_complete", "models"):
            assert row[field] == expected[field], field
        assert row["status"] == "completed"
    # An unpriced model makes the cost a floor, shown as one: never "$0" for unknown.
    assert "≥ $0.0123" in html


def test_runs_can_be_filtered_and_paged(client: TestClient) -> None:
    assert [r["run_id"] for r in client.get("/api/runs?q=run-a").json()["runs"]] == ["run-a"]
    assert client.get("/api/runs?status=running").json()["runs"] == []
    assert client.get("/api/runs?page=2").json()["runs"] == []
    assert "no runs match" in client.get("/?q=nothing-like-this").text


def test_run_page_headline_equals_run_json(client: TestClient, suite: Suite) -> None:
    expected = run_json(suite, suite.first)
    html = client.get(f"/runs/{suite.first}").text
    for field in ("tasks_run", "tasks_succeeded", "tasks_failed", "tasks_error"):
        assert re.search(rf'data-count="{field}">{expected[field]}<', html), field
    assert f'data-count="pass_rate">{expected["pass_rate"]:.1%}<' in html
    per_success = money(expected["cost_per_success"], expected["cost_complete"])
    assert expected["cost_per_success"] and (
        f'data-count="cost_per_success">{per_success}<' in html)
    # Charts are server-rendered SVG; the variants table and tags are there.
    assert html.count('class="chart"') == 6  # the bars of failure kinds are not charts
    assert "statuses per variant" in html and "pass rate per tag" in html
    assert ">weird<" in html and ">fast<" in html


def test_runs_are_named_by_prefix_and_latest(client: TestClient, suite: Suite) -> None:
    assert client.get("/api/runs/latest").json()["run_id"] == suite.second
    assert client.get("/api/runs/run-a").json()["run_id"] == suite.first
    assert client.get("/runs/run-").status_code == 404  # ambiguous
    assert client.get("/api/runs/run-").json() == {"error": "no run 'run-' in ledger.db"}


def test_summary_api_is_run_json_byte_for_byte(client: TestClient, suite: Suite) -> None:
    for run_id in suite.runs:
        body = client.get(f"/api/runs/{run_id}/summary").content
        assert body == (suite.out / run_id / "run.json").read_bytes()
        assert client.get(f"/runs/{run_id}/run.json").content == body


def test_downloads_are_the_reports(client: TestClient, suite: Suite) -> None:
    assert client.get(f"/runs/{suite.first}/run.md").text == (
        suite.out / suite.first / "run.md").read_text(encoding="utf-8")
    html = client.get(f"/runs/{suite.first}/report.html")
    assert html.text == (suite.out / suite.first / "report.html").read_text(encoding="utf-8")
    # Self-contained: its own style inline, no script, nothing from elsewhere.
    assert "<style>" in html.text and "<script" not in html.text
    assert "src=" not in html.text and 'rel="stylesheet"' not in html.text
    assert "script-src" not in html.headers["content-security-policy"]
    junit = ET.fromstring(client.get(f"/runs/{suite.first}/junit.xml").content)
    summary = run_json(suite, suite.first)
    assert int(junit.get("failures", "")) == summary["tasks_failed"]
    assert int(junit.get("errors", "")) == summary["tasks_error"]
    assert len(junit.findall(".//testcase")) == summary["tasks_run"]


def test_the_task_table_filters_sorts_and_pages(client: TestClient, suite: Suite) -> None:
    api = f"/api/runs/{suite.first}/tasks"
    failed = client.get(api, params={"outcome": "failed"}).json()["tasks"]
    assert {t["task_key"] for t in failed} == {"default/fails/00", "default/hostile/00"}
    assert [t["task_key"] for t in client.get(api, params={"tag": "fast"}).json()["tasks"]] \
        == ["default/flip/00", "default/ok/00"]
    assert [t["task_key"] for t in client.get(api, params={"q": "CLAUDE"}).json()["tasks"]] \
        == ["default/claude/00"]
    by_tokens = client.get(api, params={"sort": "tokens", "dir": "desc"}).json()["tasks"]
    assert by_tokens[0]["task_key"] == "default/claude/00"
    listing = client.get(api).json()
    assert (listing["total"], listing["page"], listing["pages"]) == (7, 1, 1)
    assert client.get(api, params={"page": 2}).json()["tasks"] == []
    html = client.get(f"/runs/{suite.first}", params={"outcome": "FAILURE"}).text
    assert "default/fails/00" in html and "default/ok/00</a>" not in html
    # Several statuses: repeated (as a form's boxes send them) or comma-separated (as
    # the page's links spell them), any of them kept; the first of the rest, failures.
    either = [t["task_key"] for t in listing["tasks"]
              if t["category"] in ("failed", "succeeded")]
    for params in ({"outcome": ["failed", "succeeded"]}, {"outcome": "failed,succeeded"}):
        kept = [t["task_key"] for t in client.get(api, params=params).json()["tasks"]]
        assert kept == either and {"default/fails/00", "default/ok/00"} <= set(kept)
    everything = [t["task_key"] for t in listing["tasks"]]
    categories = [t["category"] for t in listing["tasks"]]
    first_success = categories.index("succeeded")
    assert all(c in ("failed", "error") for c in categories[:first_success]), categories
    assert everything == [t["task_key"] for t in client.get(
        api, params={"sort": "failures"}).json()["tasks"]]
    by_key = [t["task_key"] for t in client.get(api, params={"sort": "key"}).json()["tasks"]]
    assert by_key == sorted(everything)
    # A failure kind: the failed criterion's type (or the status) of each failure.
    assert "\x1b" not in client.get(f"/runs/{suite.first}", params={"kind": "\x1b[2J"}).text
    kind = client.get(api, params={"kind": "output_contains"}).json()["tasks"]
    assert kind and all("output_contains" in t["error_message"] for t in kind)
    assert client.get(api, params={"kind": "nothing-like-it"}).json()["total"] == 0


def test_a_search_of_every_transcript_finds_each_line_by_task(
    client: TestClient, suite: Suite
) -> None:
    api = f"/api/runs/{suite.first}/search"
    found = client.get(api, params={"q": "oops"}).json()
    assert [t["task_key"] for t in found["tasks"]] == ["default/ok/00"]
    assert [line["text"] for line in found["tasks"][0]["lines"]] == ["oops"]
    assert (found["lines"], found["next"], found["timed"]) == (1, None, False)
    # The first 500 lines of the run that hold it, and where to go on from; going on
    # from there finds the rest, each line once.
    many = client.get(api, params={"q": "line"}).json()
    assert many["lines"] == 500 and many["next"] and not many["timed"]
    seen = [ln["seq"] for t in many["tasks"] for ln in t["lines"]]
    assert many["next"] == max(seen)
    after: int | None = many["next"]
    while after is not None:
        page = client.get(api, params={"q": "line", "after": after}).json()
        more = [ln["seq"] for t in page["tasks"] for ln in t["lines"]]
        assert all(seq > after for seq in more)
        seen += more
        after = page["next"]
    long = client.get(f"/api/runs/{suite.first}/transcript/default/long/00",
                      params={"q": "line", "limit": 5000}).json()["lines"]
    assert len(seen) == len(set(seen)) and {ln["seq"] for ln in long} <= set(seen)
    # Whatever its case: "OOPS" finds "oops", and the page marks it as it is written.
    shouted = client.get(api, params={"q": "OOPS"}).json()
    assert [line["text"] for t in shouted["tasks"] for line in t["lines"]] == ["oops"]
    # What a line shows holds it, not the field names it is stored under ("stream").
    assert "default/ok/00" not in {
        t["task_key"] for t in client.get(api, params={"q": "stderr"}).json()["tasks"]}
    assert client.get(f"/api/runs/{suite.first}/transcript/default/ok/00",
                      params={"q": "stderr"}).json()["lines"] == []
    assert client.get(api).json() == {"run_id": suite.first, "q": "", "after": 0, "lines": 0,
                                      "next": None, "timed": False, "tasks": []}
    page = client.get(f"/runs/{suite.first}/search", params={"q": "oops"}).text
    assert "<mark>oops</mark>" in page and "1 line in 1 task hold" in page
    # A task's own search marks what it found.
    task = client.get(f"/runs/{suite.first}/tasks/default/ok/00",
                      params={"q": "oop", "view": "raw"}).text
    assert "<mark>oop</mark>s" in task


def test_a_search_of_every_run_finds_each_runs_lines_newest_run_first(
    client: TestClient, suite: Suite
) -> None:
    found = client.get("/api/search", params={"q": "OOPS"}).json()
    assert [r["run_id"] for r in found["runs"]] == [suite.second, suite.first]
    assert [[(t["task_key"], [ln["text"] for ln in t["lines"]]) for t in r["tasks"]]
            for r in found["runs"]] == [[("default/ok/00", ["oops"])]] * 2
    assert (found["lines"], found["next_run"], found["timed"]) == (2, None, False)
    # The first 500 lines that hold it, and where to go on from; going on from there
    # finds what each run's own search finds, each line once.
    seen: list[tuple[str, int]] = []
    params: dict[str, object] = {"q": "line"}
    while True:
        page = client.get("/api/search", params=params).json()
        assert page["lines"] <= 500 and not page["timed"]
        seen += [(r["run_id"], ln["seq"]) for r in page["runs"] for t in r["tasks"]
                 for ln in t["lines"]]
        if page["next_run"] is None:
            break
        params = {"q": "line", "run": page["next_run"], "after": page["next_after"]}
    each: list[tuple[str, int]] = []
    for run_id in (suite.second, suite.first):
        after: int | None = 0
        while after is not None:
            one = client.get(f"/api/runs/{run_id}/search",
                             params={"q": "line", "after": after}).json()
            each += [(run_id, ln["seq"]) for t in one["tasks"] for ln in t["lines"]]
            after = one["next"]
    assert len(seen) > 500 and seen == each
    # From a run on; a run the ledger lacks; nothing read for no text.
    assert [r["run_id"] for r in client.get("/api/search", params={
        "q": "oops", "run": suite.first}).json()["runs"]] == [suite.first]
    assert client.get("/api/search", params={"q": "oops", "run": "nope"}).status_code == 404
    assert client.get("/api/search").json() == {
        "q": "", "run": None, "after": 0, "lines": 0, "next_run": None, "next_after": 0,
        "timed": False, "runs": []}
    page = client.get("/search", params={"q": "oops"}).text
    assert "2 lines in 2 runs hold" in page and page.count("<mark>oops</mark>") == 2
    assert 'action="/search"' in client.get("/").text


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@given(window=st.integers(1, 400), limit=st.integers(1, 700))
@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_search_that_stops_and_goes_on_finds_what_one_search_finds(
    suite: Suite, window: int, limit: int
) -> None:
    """Out of time after every window (``seconds=0``), or out of room after ``limit``
    lines: going on from where it stopped, each line is found once, in order."""
    with Ledger(suite.db, read_only=True) as ledger:
        whole = search_run(ledger, suite.first, "line", limit=10**6)
        seen: list[int] = []
        after: int | None = 0
        while after is not None:
            found = search_run(ledger, suite.first, "line", after=after,
                                        limit=limit, seconds=0, window=window)
            assert found.timed == (found.after is not None and found.lines < limit)
            seen += [ln.seq for t in found.tasks for ln in t.lines]
            after = found.after
    assert whole.after is None and len(seen) == len(set(seen))
    assert sorted(seen) == sorted(ln.seq for t in whole.tasks for ln in t.lines)


def test_a_task_page_shows_attempts_criteria_and_lines(client: TestClient, suite: Suite) -> None:
    html = client.get(f"/runs/{suite.first}/tasks/default/ok/00").text
    assert "Attempt 1" in html and "exit_code" in html
    assert ">hello<" in html
    assert 'class="ln-stderr"' in html and ">oops<" in html
    task = client.get(f"/api/runs/{suite.first}/tasks/default/ok/00").json()
    assert task["row"]["final_status"] == "SUCCESS"
    assert task["attempts"][0]["completed"]["criteria"][0]["type"] == "exit_code"


def test_unknown_runs_and_tasks_are_404(client: TestClient, suite: Suite) -> None:
    assert client.get("/runs/no-such-run").status_code == 404
    assert client.get(f"/runs/{suite.first}/tasks/default/nope/00").status_code == 404
    assert client.get(f"/api/runs/{suite.first}/tasks/default/nope/00").status_code == 404
    assert client.get("/api/runs/no-such-run/summary").status_code == 404
    assert client.get("/diff/no-such-run/run-a").status_code == 404
    assert client.get("/no/such/page").status_code == 404
    assert client.get(f"/runs/{suite.first}?at=soon").status_code == 400


def test_hostile_output_is_shown_as_text(client: TestClient, suite: Suite) -> None:
    page = client.get(f"/runs/{suite.first}/tasks/default/hostile/00")
    html = page.text
    assert "<script>alert" not in html and "</textarea> &" not in html
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html
    assert "&lt;/textarea&gt; &amp;" in html
    # Escape sequences and direction overrides never reach the page raw: colour is shown
    # as colour (a span of a fixed class), anything else is spelled out.
    assert "\x1b" not in html and "\u202e" not in html and "\x07" not in html
    assert '<span class="a-fg1">red</span>' in html and "\\x1b]0;title\\x07" in html
    assert "\\u202eevil" in html
    assert "[truncated]" in html
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    for path in (f"/runs/{suite.first}", f"/runs/{suite.first}/report.html"):
        assert "<script>alert" not in client.get(path).text


def test_a_long_transcript_is_paged_and_searchable(client: TestClient, suite: Suite) -> None:
    api = f"/api/runs/{suite.first}/transcript/default/long/00"
    first = client.get(api).json()
    assert len(first["lines"]) == 500 and first["more_after"] and not first["more_before"]
    assert first["lines"][0]["text"] == "line 1 of 1200"
    second = client.get(api, params={"after": first["lines"][-1]["seq"]}).json()
    assert second["lines"][0]["text"] == "line 501 of 1200"
    last = client.get(api, params={"before": -1}).json()
    assert last["lines"][-1]["text"] == "line 1200 of 1200" and not last["more_after"]
    assert last["more_before"]
    back = client.get(api, params={"before": last["lines"][0]["seq"]}).json()
    assert back["lines"][-1]["seq"] < last["lines"][0]["seq"]
    found = client.get(api, params={"q": "line 1199 "}).json()["lines"]
    assert [ln["text"] for ln in found] == ["line 1199 of 1200"]
    html = client.get(f"/runs/{suite.first}/tasks/default/long/00").text
    assert html.count('<tr class="ln-stdout"') == 500 and "next →" in html
    searched = client.get(f"/runs/{suite.first}/tasks/default/long/00?q=of+1200").text
    assert "line 7 <mark>of 1200</mark>" in searched


def test_a_claude_code_transcript_reads_as_a_conversation(
    client: TestClient, suite: Suite
) -> None:
    base = f"/runs/{suite.first}/tasks/default/claude/00"
    html = client.get(base).text  # a conversation by default
    assert "<b>conversation</b>" in html and "view=raw" in html
    assert html == client.get(base, params={"view": "conversation"}).text
    assert "I will list the files." in html
    assert "<b>Bash</b>" in html and "ls -la" in html
    assert "&lt;b&gt;not bold&lt;/b&gt;" in html
    assert "success, $0.0123, 2 turns, 1.5s" in html and "All done." in html
    assert "model claude-sonnet-4-5, 1 tool (Bash)" in html
    raw = client.get(base, params={"view": "raw"}).text
    assert "<b>raw lines</b>" in raw and '<tr class="ln-json"' in raw


def test_the_diff_puts_regressions_first(client: TestClient, suite: Suite) -> None:
    html = client.get(f"/diff/{suite.first}/{suite.second}").text
    assert html.index("default/flip/00") < html.index("default/claude/00")
    diff = client.get(f"/api/diff/{suite.first}/{suite.second}").json()
    assert diff["counts"]["regression"] == 1
    [regression] = [t for t in diff["tasks"] if t["change"] == "regression"]
    assert (regression["task_key"], regression["before"], regression["after"]) == (
        "default/flip/00", "SUCCESS", "FAILURE")


def _seqs(db: Path, run_id: str) -> list[int]:
    with Ledger(db, read_only=True) as ledger:
        return [row.seq or 0 for row in ledger.rows(run_id)]


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_time_travel_equals_the_fold_up_to_that_event(
    client: TestClient, suite: Suite, data: st.DataObject
) -> None:
    run_id = data.draw(st.sampled_from(suite.runs))
    seq = data.draw(st.sampled_from(_seqs(suite.db, run_id)))
    at = client.get(f"/api/runs/{run_id}/summary", params={"at": seq})
    assert at.text == rebuilt(suite.db, run_id, until=seq)
    page = client.get(f"/runs/{run_id}", params={"at": seq}).text
    assert f"once event {seq} was written" in page
    assert 'data-live="' not in page  # the past does not update


def test_time_travel_shows_a_run_half_way(client: TestClient, suite: Suite) -> None:
    seqs = _seqs(suite.db, suite.first)
    early = json.loads(client.get(f"/api/runs/{suite.first}/summary",
                                  params={"at": seqs[0]}).text)
    assert (early["status"], early["tasks_run"], early["tasks_planned"]) == ("running", 0, 7)
    assert json.loads(rebuilt(suite.db, suite.first)) == json.loads(
        client.get(f"/api/runs/{suite.first}/summary", params={"at": seqs[-1]}).text)


def test_the_token_gate(suite: Suite) -> None:
    with TestClient(create_app(suite.db, token="sesame"), follow_redirects=False) as client:
        assert client.get("/").status_code == 403
        assert client.get("/api/runs?token=wrong").status_code == 403
        opened = client.get("/?token=sesame")
        assert opened.status_code == 200
        assert "evalledger_token=sesame" in opened.headers["set-cookie"]
        assert client.get("/api/runs").status_code == 200  # the cookie carries it now
        client.cookies.clear()
        assert client.get("/api/runs").status_code == 403
        # Any caller may send a token beyond ASCII: a refusal too, not a 500.
        assert client.get("/api/runs?token=%C3%A9").status_code == 403
        assert client.get("/api/runs", headers={
            "cookie": "evalledger_token=\u00e9".encode("latin-1")}).status_code == 403


WRITER = """
import sys
from evalledger.hosts import host_info
from evalledger.ledger import Ledger, RunStarted, TaskStarted, TaskOutput
with Ledger(sys.argv[1]) as ledger:
    ledger.append([RunStarted(run_id="written-elsewhere", planned=["default/x/00"],
                              host=host_info())])
    ledger.append([TaskStarted(run_id="written-elsewhere", task_key="default/x/00",
                               task_id="x"),
                   TaskOutput(run_id="written-elsewhere", task_key="default/x/00",
                              line="from another process", n=1)])
"""


def test_a_writer_in_another_process_shows_up_through_the_event_stream(
    suite: Suite, tmp_path: Path
) -> None:
    db = tmp_path / "copy.db"
    with Ledger(suite.db, read_only=True):
        pass
    shutil.copy(suite.db, db)
    with TestClient(create_app(db, interval=0.05, keepalive=0.2)) as client, \
            client.stream("GET", "/api/stream") as stream:
        lines = stream.iter_lines()
        assert next(lines) == "event: hello"
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db)])

        def the_change() -> dict[str, Any] | None:
            line = next(lines)  # a keep-alive comment comes at least every 0.2 s
            if line.startswith("data: ") and "written-elsewhere" in line:
                change: dict[str, Any] = json.loads(line[len("data: "):])
                if ["written-elsewhere", "default/x/00"] in change["tasks"]:
                    return change
            return None

        seen = wait_until(the_change, "the change to come through the stream", every=0)
        assert writer.wait(PATIENCE) == 0
        assert "written-elsewhere" in seen["runs"]
        # The server folded it: its pages show the new run without re-reading anything.
        listing = client.get("/api/runs").json()["runs"]
        assert listing[0]["run_id"] == "written-elsewhere"
        assert listing[0]["status"] == "cut off"  # its writer is gone without run.finished
        tail = client.get("/runs/written-elsewhere/tasks/default/x/00",
                          params={"fragment": "tail", "after": 0})
        assert "from another process" in tail.text
        assert int(tail.headers["x-last-seq"]) > 0


def test_what_a_page_made_from_a_summary_changes_when_the_run_does(
    suite: Suite, tmp_path: Path
) -> None:
    """The summary API, the run page and its table are made once per summary: a run that
    records more is a new summary, and every one of them says so."""
    from evalledger.ledger import RunFinished, RunStarted, TaskCompleted, TaskStarted
    from evalledger.statuses import Category, FinalStatus

    db = tmp_path / "copy.db"
    shutil.copy(suite.db, db)
    key = "default/late/00"
    with Ledger(db) as ledger:
        ledger.append([RunStarted(run_id="growing", planned=[key]),
                       TaskStarted(run_id="growing", task_key=key, task_id="late")])
    with TestClient(create_app(db, interval=0.05, keepalive=0.2)) as client:
        before = client.get("/api/runs/growing/summary").json()
        assert [t["final_status"] for t in before["tasks"]] == [None]
        assert client.get("/api/runs/growing/summary").json() == before  # made once, kept
        assert "growing" in client.get("/runs/growing").text
        assert client.get("/api/runs/growing/tasks", params={"outcome": "succeeded"}
                          ).json()["total"] == 0
        with client.stream("GET", "/api/stream") as stream:
            lines = stream.iter_lines()
            assert next(lines) == "event: hello"
            with Ledger(db) as ledger:
                ledger.append([TaskCompleted(run_id="growing", task_key=key,
                                             final_status=FinalStatus.SUCCESS,
                                             category=Category.SUCCEEDED, weighted_score=1.0),
                               RunFinished(run_id="growing", status="completed")])
            # A keep-alive comment comes at least every 0.2 s.
            wait_until(lambda: (line := next(lines)).startswith("data: ") and "growing" in line,
                       "the change to come through the stream", every=0)

        after = client.get("/api/runs/growing/summary").json()
        assert [t["final_status"] for t in after["tasks"]] == ["SUCCESS"]
        assert after["tasks_succeeded"] == 1 and after["status"] == "completed"
        assert client.get("/api/runs/growing/tasks", params={"outcome": "succeeded"}
                          ).json()["total"] == 1


def test_a_run_that_is_over_is_told_unchanged_until_the_ledger_moves(
    suite: Suite, tmp_path: Path
) -> None:
    """A run that is not running is drawn from the ledger as read and the URL alone: its
    page and JSON carry an entity tag, a request naming it is a 304 with no body, and
    an append anywhere (the page shows the ledger's seq and the runs to compare with)
    makes new ones. A running run's carry none: its idle times change with the clock."""
    from evalledger.ledger import RunStarted, TaskStarted

    db = tmp_path / "copy.db"
    shutil.copy(suite.db, db)
    urls = [f"/runs/{suite.first}", f"/runs/{suite.first}?sort=key&outcome=failed",
            f"/runs/{suite.first}?fragment=live", f"/api/runs/{suite.first}",
            f"/api/runs/{suite.first}/tasks", f"/api/runs/{suite.first}/summary"]
    with TestClient(create_app(db, interval=0.05, keepalive=0.2)) as client:
        tags = {}
        for url in urls:
            first = client.get(url)
            tag = tags[url] = first.headers["etag"]
            assert first.headers["cache-control"] == "private, no-cache"
            again = client.get(url, headers={"If-None-Match": f'"other", W/{tag}'})
            assert (again.status_code, again.content) == (304, b""), url
            assert again.headers["etag"] == tag
            assert client.get(url, headers={"If-None-Match": '"other"'}).content == \
                first.content
        assert len(set(tags.values())) == len(urls)  # one per URL
        assert "etag" not in client.get(f"/runs/{suite.first}?sort=nonsense").headers
        with Ledger(db) as ledger:  # a run recorded elsewhere: running, for all we know
            ledger.append([RunStarted(run_id="elsewhere", planned=["default/a/00"],
                                      host={"hostname": "elsewhere.example", "pid": 4242}),
                           TaskStarted(run_id="elsewhere", task_key="default/a/00",
                                       task_id="a")])
        url = urls[0]
        moved = wait_until(lambda: (r := client.get(url, headers={
            "If-None-Match": tags[url]})).status_code == 200 and r, "the append to be read")
        assert moved.headers["etag"] != tags[url] and ">elsewhere</option>" in moved.text
        running = client.get("/runs/elsewhere")
        assert running.status_code == 200 and "etag" not in running.headers
        assert "etag" not in client.get("/api/runs/elsewhere").headers


def test_a_page_holds_its_style_and_script_and_the_policy_allows_those_alone(
    client: TestClient, suite: Suite
) -> None:
    """Drawn without another request: the stylesheet and script are in the page, and
    the policy allows them by their hashes (no other inline script or style runs)."""
    for url in (f"/runs/{suite.first}", "/", f"/runs/{suite.first}/tasks/default/ok/00"):
        page = client.get(url)
        [style] = re.findall(r"<style>(.*?)</style>", page.text, re.S)
        [script] = re.findall(r"<script>(.*?)</script>", page.text, re.S)
        assert "<script src" not in page.text and 'rel="stylesheet"' not in page.text
        policy = dict(d.strip().split(" ", 1) for d in
                      page.headers["content-security-policy"].split(";"))
        for text, directive in ((style, "style-src"), (script, "script-src")):
            digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
            assert policy[directive].split() == ["'self'", f"'sha256-{digest}'"]


def test_every_template_is_compiled_before_the_first_request(suite: Suite) -> None:
    from evalledger.render._html import environment

    env = environment()
    env.cache.clear()  # type: ignore[union-attr]
    with TestClient(create_app(suite.db)):
        compiled = {name for _, name in env.cache}  # type: ignore[union-attr]
    assert compiled == set(env.list_templates(extensions=["html"]))


def test_a_finished_run_s_pages_read_its_summary_as_show_does(tmp_path: Path) -> None:
    """A run that is over is read from its summary snapshot (in a worker thread), as
    ``show`` and ``report`` read it: a summary snapshot alone that says otherwise than
    the run's fold (forged: ``verify`` names it) is what every reader shows."""
    from evalledger.projections import ResumeFold
    from evalledger.projections._snapshots import snapshot_events
    from evalledger.statuses import FinalStatus
    from tests.cli.recorded import record_large_run

    db = tmp_path / "ledger.db"
    keys = record_large_run(db, "run-1", 120)
    with Ledger(db) as ledger:
        lied = [e.model_copy(update={"final_status": FinalStatus.SUCCESS,
                                     "category": FinalStatus.SUCCESS.category})
                if e.type == "task.completed" and e.task_key == keys[0] else e
                for e in ledger.events("run-1")]
        summary, resume = fold(SummaryFold("run-1"), lied), fold(ResumeFold("run-1"), lied)
        through = ledger.last_lifecycle_seq("run-1")
        ledger.append([e for e in snapshot_events("run-1", through, summary, resume)
                       if e.kind == "summary"])
    shown = subprocess.run([sys.executable, "-m", "evalledger.cli", "--ledger", str(db),
                            "show", "run-1", "--json"], capture_output=True, text=True)
    assert json.loads(shown.stdout)["tasks"][0]["final_status"] == "SUCCESS", shown.stderr

    with TestClient(create_app(db)) as client:
        row = client.get("/api/runs/run-1/tasks", params={"q": keys[0]}).json()["tasks"][0]
        api = client.get("/api/runs/run-1/summary").json()

    assert row["final_status"] == "SUCCESS"
    assert api["tasks"][0]["final_status"] == "SUCCESS"
    assert api["tasks_failed"] == json.loads(shown.stdout)["tasks_failed"]


# -- every query parameter out of range is a 400 with a one-line reason ----------------------

NOT_NUMBERS = ["x", "1.5", " 1", "1_0", "1e3", "0x10", "\u0663", str(2**63), "9" * 5000]
AT, AFTER = [*NOT_NUMBERS, "-1"], [*NOT_NUMBERS, "-1"]
BEFORE, PAGE = [*NOT_NUMBERS, "-2"], [*NOT_NUMBERS, "0", "-1"]
TABLE = {"at": AT, "page": PAGE, "sort": ["nope", "KEY"], "dir": ["up"],
         "outcome": ["nope", "success"]}
TRANSCRIPT = {"after": AFTER, "before": BEFORE}
# Per route of the app (all of them: a route added later fails the check below until it
# has a row), the parameters it reads and values out of their range.
PARAMETERS: dict[str, dict[str, list[str]]] = {
    "/": {"page": PAGE, "status": ["nope", "Running"], "fragment": ["nope"]},
    "/runs/{run_id}": {**TABLE, "fragment": ["nope", "tail"]},
    "/runs/{run_id}/run.json": {"at": AT},
    "/runs/{run_id}/run.md": {"at": AT},
    "/runs/{run_id}/report.html": {"at": AT},
    "/runs/{run_id}/junit.xml": {"at": AT},
    "/runs/{run_id}/tasks/{task_key:path}": {**TRANSCRIPT, "view": ["nope"],
                                             "fragment": ["nope", "live"], "files": PAGE},
    "/runs/{run_id}/search": {"after": AFTER},
    "/diff/{run_a}/{run_b}": {},
    "/compare": {},
    "/search": {"after": AFTER},
    "/api/runs": {"page": PAGE, "status": ["nope"]},
    "/api/runs/{run_id}": {"at": AT},
    "/api/runs/{run_id}/summary": {"at": AT},
    "/api/runs/{run_id}/tasks": TABLE,
    "/api/runs/{run_id}/tasks/{task_key:path}": {"files": PAGE},
    "/api/runs/{run_id}/transcript/{task_key:path}": {
        **TRANSCRIPT, "limit": [*NOT_NUMBERS, "0", "-1", "-2", "5001"]},
    "/api/runs/{run_id}/search": {"after": AFTER},
    "/api/search": {"after": AFTER},
    "/api/diff/{run_a}/{run_b}": {},
    "/api/compare": {},
    "/api/stream": {},
    "/static": {},
}
REASON = re.compile(r"^(\w+)=('.*'|\".*\") is not (a whole number from -?\d+ to \d+"
                    r"|one of: [\w ,]+)$")


def _routes(client: TestClient, suite: Suite) -> dict[str, str]:
    """Each route of the app as written, and a URL of it that exists."""
    app = client.app
    while not isinstance(app, Starlette):
        app = app.app  # type: ignore[attr-defined]
    values = {"run_id": suite.first, "run_a": suite.first, "run_b": suite.second,
              "task_key": "default/long/00"}
    found = {}
    for route in app.routes:
        if isinstance(route, Mount):
            found[route.path] = f"{route.path}/viewer.css"
            continue
        assert isinstance(route, Route), route
        url = route.path
        for name in route.param_convertors:
            url = re.sub(r"\{" + name + r"(:\w+)?\}", values[name], url)
        found[route.path] = url
    assert set(found) == set(PARAMETERS), "a route without a row in PARAMETERS"
    return found


@pytest.mark.parametrize("route", sorted(r for r, p in PARAMETERS.items() if p))
def test_a_parameter_out_of_range_is_a_400_with_one_line(
    client: TestClient, suite: Suite, route: str
) -> None:
    url = _routes(client, suite)[route]
    assert client.get(url).status_code == 200
    for name, values in PARAMETERS[route].items():
        for value in values:
            response = client.get(url, params={name: value})
            assert response.status_code == 400, (url, name, value, response.text[:200])
            if route.startswith("/api/"):
                reason = response.json()["error"]
            else:  # the error page shows the reason as its one paragraph
                found = re.search(r"<p>(.*?)</p>", response.text)
                assert found, response.text
                reason = html.unescape(found[1])
            match = REASON.match(reason)
            assert match and match[1] == name and "\n" not in reason, (name, value, reason)


def test_the_edges_of_each_range_are_served_and_one_past_them_refused(
    client: TestClient, suite: Suite
) -> None:
    top, past = str(2**63 - 1), str(2**63)  # SQLite's largest integer, and one more
    summary = client.get(f"/api/runs/{suite.first}/summary").text
    for path in (f"/api/runs/{suite.first}/summary", f"/runs/{suite.first}/run.json"):
        assert client.get(path, params={"at": top}).text == summary
        assert client.get(path, params={"at": past}).status_code == 400
    api = f"/api/runs/{suite.first}/transcript/default/long/00"
    assert client.get(api, params={"after": top}).json()["lines"] == []
    assert len(client.get(api, params={"before": top}).json()["lines"]) == 500
    for name in ("after", "before"):
        assert client.get(api, params={name: past}).status_code == 400
    assert client.get(api, params={"before": 0}).json() == client.get(
        api, params={"before": -1}).json()
    assert len(client.get(api, params={"limit": 5000}).json()["lines"]) == 1200
    assert len(client.get(api, params={"limit": 1}).json()["lines"]) == 1
    assert client.get(api, params={"limit": -2}).status_code == 400  # SQLite: no limit
    assert client.get("/api/runs", params={"page": top}).json()["runs"] == []
    tasks = client.get(f"/api/runs/{suite.first}/tasks", params={"page": top}).json()
    assert tasks["tasks"] == [] and tasks["page"] == 2**63 - 1
    # Empty means the default (a form's unset field); what a route does not read is ignored.
    assert client.get("/api/runs", params={"page": "", "status": "", "unknown": "x"}).json()[
        "runs"] == client.get("/api/runs").json()["runs"]
    assert client.get(f"/runs/{suite.first}", params={"at": "", "sort": "", "dir": ""}
                      ).status_code == 200


def test_an_interrupted_attempt_says_what_it_spent_as_a_floor(tmp_path: Path) -> None:
    """Its usage reports are what it spent: their tokens, and their cost as a floor
    (its last turn went unreported)."""
    from evalledger.ledger import (
        RunFinished,
        RunStarted,
        TaskInterrupted,
        TaskStarted,
        TaskUsage,
    )

    key = "default/cut/00"
    db = tmp_path / "l.db"
    with Ledger(db) as ledger:
        ledger.append([
            RunStarted(run_id="cut", planned=[key]),
            TaskStarted(run_id="cut", task_key=key, task_id="cut"),
            TaskUsage(run_id="cut", task_key=key, model="m", input_tokens=1200,
                      output_tokens=300, cost_usd=0.0123),
            TaskInterrupted(run_id="cut", task_key=key, reason="cancelled"),
            RunFinished(run_id="cut", status="interrupted")])
    with TestClient(create_app(db)) as client:
        page = html.unescape(client.get(f"/runs/cut/tasks/{key}").text)
    assert "this attempt: interrupted · 1,500 tokens · \u2265 $0.0123" in page
