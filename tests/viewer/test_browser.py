"""The viewer in a real browser: Debian's Chromium, driven by Playwright's Python API.

The server is a real ``evalledger view`` process; a second ``evalledger run`` process
writes a run while the pages are open, and the pages must show it without a reload.

Where Chromium or Playwright is missing the tests skip with the reason; CI sets
``EVALLEDGER_REQUIRE_BROWSER=1`` and then they fail instead, so they always run there.
Screenshots go to ``$EVALLEDGER_SCREENSHOTS`` when it is set (else the test's folder).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ..waiting import PATIENCE, wait_until
from .browser import axe_violations, expect
from .scenes import AGENT_KEY, FIRST, IMPORTED, SECOND, Scenes, copy_ledger
from .serving import viewer
from .suites import Suite, run_json

# The slow tier: Chromium, driven by Playwright.
pytestmark = pytest.mark.slow


def _evalledger(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "evalledger.cli", *args], text=True,
                            **kwargs)


@pytest.fixture
def server(suite: Suite, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A viewer process over a copy of the suite's ledger; yields its URL and the copy."""
    db = tmp_path / "ledger.db"
    shutil.copy(suite.db, db)
    with viewer(db) as url:
        yield url, db


def _wait_for_lines(api: str) -> None:
    """Until the task has started and printed something (asked of the JSON API)."""

    def printed() -> bool:
        try:
            with urllib.request.urlopen(api, timeout=PATIENCE) as response:
                return bool(json.load(response)["lines"])
        except urllib.error.HTTPError as e:
            if e.code != 404:  # not started yet
                raise
            return False

    wait_until(printed, "the task to start and print", every=0.05)


def _held(api: str) -> bool:
    """A run's task is running (asked of the JSON API; a run not started yet is a 404)."""
    try:
        with urllib.request.urlopen(api, timeout=PATIENCE) as response:
            return bool(json.load(response).get("running"))
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise
        return False


def _shot(page: Any, tmp_path: Path, name: str) -> None:
    folder = Path(os.environ.get("EVALLEDGER_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def test_browse_from_the_runs_to_a_run_and_a_task(
    server: tuple[str, Path], page: Any, suite: Suite, tmp_path: Path
) -> None:
    url, _ = server
    page.goto(url + "/")
    assert page.locator("tr[data-run]").count() == 2
    _shot(page, tmp_path, "runs")
    page.click(f"tr[data-run='{suite.first}'] a")
    page.wait_for_url(f"**/runs/{suite.first}")
    expected = run_json(suite, suite.first)
    for field in ("tasks_run", "tasks_succeeded", "tasks_failed", "tasks_error"):
        assert page.text_content(f"[data-count={field}]") == str(expected[field])
    assert page.text_content("[data-count=pass_rate]") == f"{expected['pass_rate']:.1%}"
    _shot(page, tmp_path, "run")
    page.click("tr[data-task='default/long/00'] a")
    page.wait_for_url("**/tasks/default/long/00")
    assert page.locator("#lines tr").count() == 500
    assert page.text_content("#lines tr:first-child td.text") == "line 1 of 1200"
    _shot(page, tmp_path, "task")
    page.goto(url + f"/runs/{suite.first}/tasks/default/hostile/00")
    text = page.text_content("#lines")
    assert "<script>alert('x')</script>" in text and "\\x1b]0;title" in text
    assert page.text_content("#lines span.a-fg1") == "red"  # ANSI colour, as colour
    page.goto(url + f"/runs/{suite.first}/tasks/default/claude/00?view=conversation")
    assert "I will list the files." in page.text_content(".conversation")
    _shot(page, tmp_path, "conversation")


GATED = """
command: ["python3", "-c", "import os, sys, time\\nprint('waiting', flush=True)\\n\
while not os.path.exists(sys.argv[1]): time.sleep(0.05)\\nprint('released')", "{gate}"]
timeout: 120
success_criteria: [{{type: exit_code}}]
"""


@contextmanager
def _gated_run(
    db: Path, tmp_path: Path, run_id: str, extra: str = ""
) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """An ``evalledger run`` process whose one task prints ``waiting`` and holds until the
    gate file exists; the caller opens the gate. Whatever happens, the gate is opened and
    the runner stopped on the way out."""
    suite = tmp_path / run_id
    suite.mkdir()
    gate = tmp_path / f"{run_id}.gate"
    (suite / "gated.yaml").write_text(GATED.format(gate=gate) + extra, encoding="utf-8")
    with _running(db, tmp_path, gate, str(suite), "--run-id", run_id) as runner:
        yield runner, gate


@contextmanager
def _running(db: Path, tmp_path: Path, gate: Path,
             *args: str) -> Iterator[subprocess.Popen[str]]:
    """``evalledger run ARGS`` as a process whose tasks hold at ``gate``; whatever
    happens, the gate is opened and the runner stopped on the way out."""
    runner = _evalledger("--ledger", str(db), "run", *args, "--out", str(tmp_path / "runs"),
                         cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield runner
    finally:
        gate.write_text("go")
        if runner.poll() is None:
            runner.send_signal(signal.SIGINT)
            runner.wait(PATIENCE)


def test_pages_follow_a_run_written_by_another_process(
    server: tuple[str, Path], page: Any, tmp_path: Path
) -> None:
    url, db = server
    page.goto(url + "/")
    page.wait_for_selector("body[data-streaming='1']")
    loaded = page.evaluate("window.evalledgerLoadedAt")
    with _gated_run(db, tmp_path, "live-run") as (runner, gate):
        # The runs page shows the new run, running, without a reload.
        page.wait_for_selector("tr[data-run='live-run'] .st-running")
        assert page.evaluate("window.evalledgerLoadedAt") == loaded
        _shot(page, tmp_path, "runs-live")
        page.click("tr[data-run='live-run'] a")
        page.wait_for_url("**/runs/live-run")
        page.wait_for_selector("body[data-streaming='1']")
        loaded = page.evaluate("window.evalledgerLoadedAt")
        assert page.text_content("[data-count=tasks_succeeded]") == "0"
        gate.write_text("go")
        # The run page's numbers move as the task finishes, again without a reload.
        expect(page.locator("[data-count=tasks_succeeded]")).to_have_text("1")
        page.wait_for_selector(".lead .st-completed")
        assert page.evaluate("window.evalledgerLoadedAt") == loaded
        _shot(page, tmp_path, "run-live")
        assert runner.wait(PATIENCE) == 0


def test_a_silent_task_shows_the_stalled_pill_live_and_loses_it_when_it_speaks(
    server: tuple[str, Path], page: Any, tmp_path: Path
) -> None:
    """A warn stall: the task goes on, the run page marks it stalled without a reload;
    once it prints again (and ends), the pill is gone."""
    url, db = server
    with _gated_run(db, tmp_path, "quiet-run",
                    "stall_timeout: 0.5\nstall_action: warn\n") as (runner, gate):
        _wait_for_lines(url + "/api/runs/quiet-run/transcript/default/gated/00")
        page.goto(url + "/runs/quiet-run")
        page.wait_for_selector("body[data-streaming='1']")
        loaded = page.evaluate("window.evalledgerLoadedAt")
        row = page.locator("tr[data-task='default/gated/00']")
        expect(row.locator(".pill.stalled")).to_have_text("stalled")
        assert page.evaluate("window.evalledgerLoadedAt") == loaded
        _shot(page, tmp_path, "stalled-live")
        gate.write_text("go")
        expect(row.locator(".pill.o-succeeded")).to_have_text("SUCCESS")
        assert row.locator(".pill.stalled").count() == 0
        assert runner.wait(PATIENCE) == 0


def test_a_task_page_tails_the_transcript_live(
    server: tuple[str, Path], page: Any, tmp_path: Path
) -> None:
    url, db = server
    with _gated_run(db, tmp_path, "tail-run") as (runner, gate):
        _wait_for_lines(url + "/api/runs/tail-run/transcript/default/gated/00")
        page.goto(url + "/runs/tail-run/tasks/default/gated/00")
        page.wait_for_selector("body[data-streaming='1']")
        assert page.text_content("#lines").strip().endswith("waiting")
        gate.write_text("go")
        expect(page.locator("#lines")).to_contain_text("released")
        page.wait_for_selector("#attempts .pill.o-succeeded")
        _shot(page, tmp_path, "task-live")
        assert runner.wait(PATIENCE) == 0


# -- issue 21: compare, live from before the start, attempts apart, 400 px, colour ------------


@pytest.fixture
def scenes_server(scenes: Scenes, tmp_path: Path) -> Iterator[str]:
    """A viewer process over a copy of the first-hour ledger (``scenes``); yields its URL."""
    db = tmp_path / "scenes.db"
    copy_ledger(scenes.db, db)
    with viewer(db) as url:
        yield url


def _both_widths(page: Any, tmp_path: Path, name: str) -> None:
    """Screenshots at a desktop's width and a phone's, the page left at the desktop's."""
    for width in (1400, 400):
        page.set_viewport_size({"width": width, "height": 900})
        _shot(page, tmp_path, f"{name}-{width}")
    page.set_viewport_size({"width": 1300, "height": 900})


def test_two_runs_ticked_on_the_runs_page_compare_and_the_rows_lead_to_both_tasks(
    scenes_server: str, page: Any, tmp_path: Path
) -> None:
    page.goto(scenes_server + "/")
    page.check(f"tr[data-run='{SECOND}'] input[type=checkbox]")
    page.check(f"tr[data-run='{FIRST}'] input[type=checkbox]")
    page.click("form#compare button")
    page.wait_for_url(f"**/diff/{FIRST}/{SECOND}")
    expect(page.locator("tr.c-regression")).to_have_count(2)
    _both_widths(page, tmp_path, "diff")
    page.click("tr[data-task='alpha/flip/00'] a.after")
    page.wait_for_url(f"**/runs/{SECOND}/tasks/alpha/flip/00")
    expect(page.locator("#attempts .lead .pill")).to_have_text("FAILURE")
    page.go_back()
    page.click("tr[data-task='alpha/flip/00'] a.before")
    page.wait_for_url(f"**/runs/{FIRST}/tasks/alpha/flip/00")
    expect(page.locator("#attempts .lead .pill")).to_have_text("SUCCESS")
    # The run page leads to the same diff: "compare with the previous run".
    page.goto(scenes_server + f"/runs/{SECOND}")
    page.click("a.previous")
    page.wait_for_url(f"**/diff/{FIRST}/{SECOND}")


TWO_GATED = """
command: ["python3", "-c", "import os, sys, time\\nprint('waiting', flush=True)\\n\
while not os.path.exists(sys.argv[1]): time.sleep(0.05)\\nprint('released')", "{gate}"]
timeout: 120
success_criteria: [{{type: exit_code}}]
"""


def test_a_task_not_started_yet_goes_live_on_its_own_page(
    server: tuple[str, Path], page: Any, tmp_path: Path
) -> None:
    url, db = server
    suite = tmp_path / "two"
    suite.mkdir()
    gates = {name: tmp_path / f"{name}.gate" for name in ("first", "second")}
    for name, gate in gates.items():
        (suite / f"{name}.yaml").write_text(TWO_GATED.format(gate=gate), encoding="utf-8")
    runner = _evalledger("--ledger", str(db), "run", str(suite), "--run-id", "two", "-j", "1",
                         "--out", str(tmp_path / "runs"), cwd=tmp_path,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_lines(url + "/api/runs/two/transcript/default/first/00")
        page.goto(url + "/runs/two")
        expect(page.locator("tr[data-task='default/first/00'] .pill")).to_have_text("RUNNING")
        expect(page.locator("tr[data-task='default/second/00'] .pill")).to_have_text(
            "NOT STARTED")
        _both_widths(page, tmp_path, "run-live")
        page.click("tr[data-task='default/second/00'] a")
        page.wait_for_url("**/runs/two/tasks/default/second/00")
        page.wait_for_selector("body[data-streaming='1']")
        loaded = page.evaluate("window.evalledgerLoadedAt")
        expect(page.locator("#attempts .lead .pill")).to_have_text("NOT STARTED")
        _both_widths(page, tmp_path, "task-not-started")
        gates["first"].write_text("go")
        # The key starts: its attempt shows RUNNING and its lines arrive, no reload.
        expect(page.locator("#attempts .lead .pill")).to_have_text("RUNNING")
        expect(page.locator("#attempt-1 h2 .pill")).to_have_text("RUNNING")
        expect(page.locator("#lines")).to_contain_text("waiting")
        expect(page.locator("#no-lines")).to_have_count(0)
        _shot(page, tmp_path, "task-started-live")
        gates["second"].write_text("go")
        expect(page.locator("#lines")).to_contain_text("released")
        expect(page.locator("#attempts .lead .pill")).to_have_text("SUCCESS")
        assert page.evaluate("window.evalledgerLoadedAt") == loaded
        assert runner.wait(PATIENCE) == 0
    finally:
        for gate in gates.values():
            gate.write_text("go")
        if runner.poll() is None:
            runner.send_signal(signal.SIGINT)
            runner.wait(PATIENCE)


def test_the_conversation_shows_each_attempt_apart(
    scenes_server: str, page: Any, tmp_path: Path
) -> None:
    page.goto(scenes_server + f"/runs/{FIRST}/tasks/{AGENT_KEY}")
    marks = page.locator(".conversation h3.attempt-mark")
    expect(marks).to_have_count(2)
    assert marks.nth(0).text_content().startswith("Attempt 1")
    assert marks.nth(1).text_content().startswith("Attempt 2")
    # Everything the first attempt said comes before the second's mark, nothing after it.
    order = page.evaluate("""() => Array.from(document.querySelectorAll(
        '.conversation > .attempt-mark, .conversation > .msg'), e => e.className.split(' ')[0]
        + ':' + e.textContent.trim().slice(0, 40))""")
    assert order[0].startswith("attempt-mark:Attempt 1")
    second = next(i for i, item in enumerate(order) if item.startswith("attempt-mark:Attempt 2"))
    assert any("waiting for the gate" in item for item in order[:second])
    assert not any("waiting for the gate" in item for item in order[second:])
    expect(page.locator(".msg.m-result")).to_have_count(1)  # one final result: attempt 2's
    _both_widths(page, tmp_path, "conversation")


NARROW = ["/", f"/runs/{SECOND}", f"/runs/{FIRST}/tasks/{AGENT_KEY}",
          f"/runs/{FIRST}/tasks/alpha/colours/00?view=raw", f"/diff/{FIRST}/{SECOND}",
          f"/runs/{IMPORTED}", f"/runs/{IMPORTED}/tasks/default/parse/00", "/compare"]


@pytest.mark.parametrize("width", [400, 1000])
def test_no_page_scrolls_sideways_on_a_narrow_screen(
    scenes_server: str, page: Any, tmp_path: Path, width: int
) -> None:
    page.set_viewport_size({"width": width, "height": 800})
    for path in NARROW:
        page.goto(scenes_server + path)
        sizes = page.evaluate("[document.documentElement.scrollWidth, "
                              "document.documentElement.clientWidth]")
        assert sizes[0] <= sizes[1], (path, sizes)
        if width == 400:
            _shot(page, tmp_path, "narrow-" + (re.sub(r"\W+", "-", path).strip("-") or "runs"))
    # A run id never breaks across lines (its table scrolls in its own box instead).
    page.goto(scenes_server + "/")
    for run_id in (FIRST, SECOND, IMPORTED):
        lines = page.evaluate(
            f"document.querySelector(\"tr[data-run='{run_id}'] td.id a\").getClientRects()"
            ".length")
        assert lines == 1, run_id


def test_ansi_colour_is_shown_as_colour_and_markup_as_text(
    scenes_server: str, page: Any, tmp_path: Path
) -> None:
    page.goto(scenes_server + f"/runs/{FIRST}/tasks/alpha/colours/00")
    fail = page.locator("#lines span.a-fg1", has_text="FAIL")
    expect(fail).to_have_count(1)
    assert fail.evaluate("e => getComputedStyle(e).color") == "rgb(198, 40, 40)"
    assert page.locator("#lines span.a-b.a-fg2").text_content() == "PASS"
    text = page.text_content("#lines")
    assert "<b>not bold</b> & <script>x()</script>" in text  # shown, not made
    assert "\x1b" not in text and "[31m" not in text
    assert "\\x1b]0;title\\x07" in text  # an escape that is no colour: spelled out
    assert page.locator("#lines b, #lines script").count() == 0
    assert page.evaluate("document.querySelectorAll('script').length") == 1  # viewer.js
    _both_widths(page, tmp_path, "colours")
    page.goto(scenes_server + f"/runs/{FIRST}/report.html")
    expect(page.locator("#t-2[open] pre.tail span.a-fg1")).to_have_text("FAIL")
    page.click("table.tasks a[href='#t-1']")  # the report's task link lands on it, open
    expect(page.locator("details#t-1[open] pre.tail")).to_contain_text(
        "assistant: I will run the tests first.")
    _both_widths(page, tmp_path, "report")


# -- issue 27: each agent's conversation, read from its own stream format ----------------------

AGENTS_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agents"
# What each agent's fix-mean conversation shows first and last, in its own words.
FIRST_TOOL = {"claude-code": "Bash", "codex": "shell", "gemini": "run_shell_command",
              "opencode": "bash"}
LAST_RESULT = {"claude-code": "success, $0.0331, 6 turns", "codex": "turn completed",
               "gemini": "success", "opencode": "step stop, $0.0"}


def test_each_agents_conversation_reads_in_the_browser(
    browser: Any, page: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "agents"
    shutil.copytree(AGENTS_EXAMPLE, folder)
    db = tmp_path / "agents.db"
    done = subprocess.run([sys.executable, "-m", "evalledger.cli", "--ledger", str(db), "run",
                           "-e", "experiment.yaml", "--out", str(tmp_path / "out")],
                          cwd=folder, capture_output=True, text=True, timeout=PATIENCE * 4)
    assert done.returncode == 1, done.stderr  # three tasks fail, by design
    run_id = done.stdout.splitlines()[0]
    with viewer(db) as url:
        for agent, tool in FIRST_TOOL.items():
            page.goto(f"{url}/runs/{run_id}/tasks/{agent}/fix-mean/00")
            said = page.locator(".conversation .msg")
            expect(said.first).to_be_visible()
            expect(page.locator(".conversation .tool b").first).to_have_text(tool)
            expect(page.locator(".conversation .msg.m-result").last).to_contain_text(
                LAST_RESULT[agent])
            expect(page.locator(".conversation .m-raw")).to_have_count(0)
            _shot(page, tmp_path, f"conversation-{agent}")


@pytest.mark.parametrize("path", [
    "/", f"/runs/{FIRST}", f"/runs/{SECOND}", f"/runs/{IMPORTED}", f"/diff/{FIRST}/{SECOND}",
    f"/runs/{FIRST}/tasks/{AGENT_KEY}", f"/runs/{FIRST}/tasks/{AGENT_KEY}?view=raw",
    f"/runs/{FIRST}/tasks/alpha/colours/00", "/compare", "/search?q=e"])
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_finds_no_violation_on_the_first_hour_pages(
    scenes_server: str, browser: Any, path: str, scheme: str
) -> None:
    assert axe_violations(browser, scenes_server + path, scheme) == []


def test_the_runs_list_keeps_each_date_on_one_line_at_1280_px(scenes_server: str,
                                                             page: Any) -> None:
    """Issue #49: the runs list wrapped its dates at 1280 px (a laptop's width)."""
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(scenes_server + "/")
    lines = page.evaluate("""() => [...document.querySelectorAll('td.when')].map(td => {
        const range = document.createRange(); range.selectNodeContents(td);
        return range.getClientRects().length; })""")
    assert lines and set(lines) == {1}, lines


def test_a_live_runs_variants_count_the_tasks_it_plans_before_they_start(
    server: tuple[str, Path], page: Any, tmp_path: Path
) -> None:
    """#49, point 6: a live experiment's variants table read "tasks 2 run 0" while 12
    were planned. Two variants of three tasks, one at a time, the first held at its
    gate: each variant has its 3 tasks while fewer have run."""
    url, db = server
    suite, gate = tmp_path / "planned", tmp_path / "planned.gate"
    suite.mkdir()
    (suite / "a-gated.yaml").write_text(GATED.format(gate=gate), encoding="utf-8")
    for name in ("b", "c"):
        (suite / f"{name}.yaml").write_text("command: 'true'\nsuccess_criteria: "
                                            "[{type: exit_code}]\n", encoding="utf-8")
    (tmp_path / "experiment.yaml").write_text(json.dumps({
        "experiment_id": "planned", "tasks": [str(suite)], "variants": [
            {"variant_id": "v1"}, {"variant_id": "v2"}]}), encoding="utf-8")
    with _running(db, tmp_path, gate, "-e", str(tmp_path / "experiment.yaml"),
                  "--run-id", "planned-run", "-j", "1") as runner:
        # Whichever variant's gated task the batch started first holds at the gate.
        wait_until(lambda: _held(url + "/api/runs/planned-run"), "a gated task to start")
        page.goto(url + "/runs/planned-run")
        table = page.locator("table.variants")
        header = table.locator("thead th").all_text_contents()
        tasks, ran = header.index("tasks"), header.index("run")
        rows = {r.locator("td").first.text_content(): r.locator("td").all_text_contents()
                for r in table.locator("tbody tr").all()}
        assert sorted(rows) == ["v1", "v2"]
        assert [rows[v][tasks] for v in ("v1", "v2")] == ["3", "3"]
        assert sum(int(rows[v][ran]) for v in ("v1", "v2")) < 6  # one held: not all ran
        expect(page.locator(".lead .st-running")).to_have_count(1)
        gate.write_text("go")
        assert runner.wait(PATIENCE) == 0


def test_an_agents_attempts_say_what_they_spent_and_its_usage_never_goes_down(
    scenes_server: str, page: Any
) -> None:
    """#49, point 6: an interrupted attempt says its tokens and cost on its one line;
    the finished attempt's usage over time is a line that never goes down."""
    page.goto(f"{scenes_server}/runs/{FIRST}/tasks/{AGENT_KEY}")
    interrupted = page.locator("#attempt-1 details.meta summary")
    expect(interrupted).to_contain_text("interrupted \u00b7")
    assert re.search(r"interrupted · [\d,]+ tokens · (≥ )?\$\d", interrupted.text_content()
                     or ""), interrupted.text_content()
    line = page.locator("#attempt-2 figure svg path[stroke-width='2']")
    expect(line).to_have_count(1)
    heights = [float(y) for y in re.findall(r"L [\d.]+ ([\d.]+)", line.get_attribute("d")
                                            or "")]
    assert len(heights) >= 4
    assert heights == sorted(heights, reverse=True)  # SVG's y grows down: never down
