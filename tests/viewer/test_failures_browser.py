"""Reading failures in the browser: why each failed in one line, and the keys that walk
from one failure to the next (Debian's Chromium, driven by Playwright; skipped, or in CI
failed, where they are missing: see test_browser.py).

The ledger: one run of four tasks made by a real ``evalledger run`` (in this process) —
a real pytest failing under a ``run_command`` criterion, a pretend Claude Code whose model
API answers 529 until it gives up, a task whose output lacks what its criterion wants,
and one that succeeds.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalledger.ledger import Ledger, RunStarted, TaskCompleted, TaskStarted
from evalledger.statuses import FinalStatus
from tests.cli.helpers import evalledger, write_tasks

from .browser import axe_violations, expect
from .serving import viewer

# The slow tier: Chromium, driven by Playwright.
pytestmark = pytest.mark.slow

RUN, CROSSED, HUNG, RENAMED = "failures-1", "crossed-1", "hung-1", "renamed-1"
# A Claude Code session whose model API is overloaded: two retries, then its result.
OVERLOADED = [
    {"type": "system", "subtype": "init", "model": "claude-sonnet-4-5", "session_id": "s",
     "tools": ["Bash"], "claude_code_version": "2.1.197"},
    {"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 2,
     "error_status": 529, "error": "overloaded_error"},
    {"type": "system", "subtype": "api_retry", "attempt": 2, "max_retries": 2,
     "error_status": 529, "error": "overloaded_error"},
    {"type": "result", "subtype": "success", "is_error": True, "api_error_status": 529,
     "result": "API Error: 529 Overloaded", "session_id": "s", "total_cost_usd": 0,
     "num_turns": 1, "usage": {"input_tokens": 0, "output_tokens": 0}},
]
STATS_TEST = "def test_median():\n    assert 0 is None\n"
# A Claude Code session, without isolation, that thinks, writes a file by its sandbox path
# and starts a command that outlives its attempt's timeout: what its one message used is
# booked as an estimate (its result line never came).
HANGING = """import json, os, time
def say(line):
    print(json.dumps(line), flush=True)
here = os.getcwd()
say({"type": "system", "subtype": "init", "model": "claude-sonnet-4-5", "session_id": "h",
     "tools": ["Bash", "Write"], "claude_code_version": "2.1.197"})
say({"type": "assistant", "message": {"id": "m1", "model": "claude-sonnet-4-5", "content": [
    {"type": "thinking", "thinking": "Write the median first, then run the long suite."},
    {"type": "tool_use", "id": "w1", "name": "Write",
     "input": {"file_path": here + "/median.py", "content": "print(2)"}}],
    "usage": {"input_tokens": 1200, "output_tokens": 300}}})
say({"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "w1",
     "content": "File created successfully at: " + here + "/median.py"}]}})
say({"type": "assistant", "message": {"id": "m2", "model": "claude-sonnet-4-5", "content": [
    {"type": "tool_use", "id": "b1", "name": "Bash", "input": {"command": "sleep 600"}}]}})
time.sleep(60)
"""
# A Claude Code session that runs the tests (30 lines of output), edits a file, and
# claims it worked.
EDITING = [
    {"type": "system", "subtype": "init", "model": "claude-sonnet-4-5", "session_id": "e",
     "tools": ["Bash", "Edit"], "claude_code_version": "2.1.197"},
    {"type": "assistant", "message": {"id": "m1", "model": "claude-sonnet-4-5", "content": [
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "pytest -q"}}],
        "usage": {"input_tokens": 100, "output_tokens": 20}}},
    {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t1",
                                               "is_error": True,
                                               "content": "\n".join(f"line {i}" for i in
                                                                    range(1, 31))}]}},
    {"type": "assistant", "message": {"id": "m2", "model": "claude-sonnet-4-5", "content": [
        {"type": "tool_use", "id": "t2", "name": "Edit", "input": {
            "file_path": "/work/stats.py", "old_string": "def median(xs):\n    return 0\n",
            "new_string": "def median(xs):\n    return None\n"}}],
        "usage": {"input_tokens": 150, "output_tokens": 30}}},
    {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t2",
                                               "content": "The file was updated."}]}},
    {"type": "result", "subtype": "success", "is_error": False, "result": "Fixed: all tests "
     "pass now.", "session_id": "e", "total_cost_usd": 0.002, "num_turns": 2,
     "usage": {"input_tokens": 250, "output_tokens": 50}},
]


@pytest.fixture(scope="module")
def failures(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A viewer over the run (its URL)."""
    root = tmp_path_factory.mktemp("failures")
    project = root / "project"
    project.mkdir()
    (project / "test_stats.py").write_text(STATS_TEST, encoding="utf-8")
    transcript = root / "overloaded.jsonl"
    transcript.write_text("".join(json.dumps(line) + "\n" for line in OVERLOADED))
    edited = root / "edited"
    edited.mkdir()
    (edited / "a.py").write_text("print('one')\n")
    (edited / "b.py").write_text("x = 1\n")
    (edited / "gone.txt").write_text("bye\n")
    (edited / "same.txt").write_text("kept\n")
    editing = root / "editing.jsonl"
    editing.write_text("".join(json.dumps(line) + "\n" for line in EDITING))
    pytest_cmd = (f"{sys.executable} -m pytest -q -p no:cacheprovider -p no:randomly "
                  "test_stats.py")
    tasks = write_tasks(root / "tasks", {name: {"timeout": 60, **fields} for name, fields in {
        "pytest-fails": {"command": "true", "workdir": str(project), "success_criteria": [
            {"type": "run_command", "command": pytest_cmd}]},
        "api-529": {"command": f"cat {transcript}; exit 1", "stream_format": "claude-code",
                    "success_criteria": [{"type": "file_exists", "path": "answer.txt"}]},
        "lacks-yes": {"command": "echo nope", "success_criteria": [
            {"type": "output_contains", "includes": ["yes"]}]},
        "ok": {"command": "true", "success_criteria": [{"type": "exit_code"}]},
        "edits": {"command": "sed -i s/one/uno/ a.py && echo 'x = 2' >> b.py && "
                             "echo new > new.py && rm gone.txt",
                  "workdir": str(edited), "success_criteria": [{"type": "exit_code"}]},
        "claims": {"command": f"cat {editing}", "stream_format": "claude-code",
                   "success_criteria": [{"type": "file_exists", "path": "stats.py"}]},
    }.items()})
    db = root / "l.db"
    done = evalledger(root, db, "run", str(tasks), "--run-id", RUN)
    assert done.returncode == 1, done.stdout + done.stderr
    # Two variants, two replicates each: "flaky" fails its second replicate in "a".
    write_tasks(root / "crossed", {name: {"timeout": 60, "success_criteria": [
        {"type": "exit_code"}]} for name in ("flaky", "steady")})
    (root / "experiment.yaml").write_text(yaml.safe_dump({
        "experiment_id": "crossed", "tasks": ["crossed/"], "repeats": 2, "variants": [
            {"variant_id": "a", "command": 'case "$EVALLEDGER_TASK_KEY" in a/flaky/01) '
                                           'exit 1;; esac'},
            {"variant_id": "b", "command": "true"}]}))
    done = evalledger(root, db, "run", "-e", str(root / "experiment.yaml"), "--run-id", CROSSED)
    assert done.returncode == 1, done.stdout + done.stderr
    # The same tasks again, their variants renamed (each agent named by its model, say),
    # and "flaky" fixed.
    (root / "renamed.yaml").write_text(yaml.safe_dump({
        "experiment_id": "crossed", "tasks": ["crossed/"], "repeats": 2, "variants": [
            {"variant_id": "model-a", "command": "true"},
            {"variant_id": "model-b", "command": "true"}]}))
    done = evalledger(root, db, "run", "-e", str(root / "renamed.yaml"), "--run-id", RENAMED)
    assert done.returncode == 0, done.stdout + done.stderr
    (root / "hanging.py").write_text(HANGING, encoding="utf-8")
    hung = write_tasks(root / "hung", {"hangs": {
        "command": f"{sys.executable} {root / 'hanging.py'}", "timeout": 2,
        "stream_format": "claude-code", "success_criteria": [{"type": "exit_code"}]}})
    done = evalledger(root, db, "run", str(hung), "--run-id", HUNG)
    assert done.returncode == 1, done.stdout + done.stderr
    with viewer(db) as url:
        yield url


def test_each_failure_says_why_in_one_line(failures: str, page: Any) -> None:
    page.goto(f"{failures}/runs/{RUN}")
    why = {key: page.text_content(f"tr[data-task='{key}'] td.why").strip()
           for key in ("default/pytest-fails/00", "default/api-529/00",
                       "default/lacks-yes/00", "default/ok/00")}
    assert why == {
        "default/pytest-fails/00": "run_command \u2717 assert 0 is None",  # pytest's E line
        # What the agent printed is its claim, not the runner's finding: its criterion
        # failed, and the claim is said beside it.
        "default/api-529/00": "file_exists \u2717 answer.txt does not exist (the agent's "
                              "model API failed: result is_error: 529 api error: 529 "
                              "overloaded)",
        "default/lacks-yes/00": "output_contains \u2717 output lacks ['yes']",
        "default/ok/00": ""}, why
    # The whole message is a hover away, and the task's header says the same line.
    whole = page.get_attribute("tr[data-task='default/pytest-fails/00'] td.why", "title")
    assert "\nFAILED test_stats.py::test_median - assert 0 is None\n" in whole
    # The 529 is searchable in the table's filter.
    page.fill("form.task-filter input[name=q]", "529")
    page.press("form.task-filter input[name=q]", "Enter")
    page.wait_for_url("**q=529**")
    assert page.locator("table.tasks tbody tr[data-task]").count() == 1
    page.click("tr[data-task='default/api-529/00'] a")
    expect(page.locator("p.lead .why")).to_have_text(why["default/api-529/00"])


def test_keys_walk_the_failures_and_the_crumbs_lead_back(failures: str, page: Any) -> None:
    page.goto(f"{failures}/runs/{RUN}")
    page.keyboard.press("Tab")  # the first Tab: the skip link
    expect(page.locator("a.skip")).to_be_focused()
    expect(page.locator("a.skip")).to_have_text("skip to the task table")
    page.click("tr[data-task='default/api-529/00'] a")
    expect(page.locator("h1")).to_have_text("default/api-529/00")
    for key, shown in (("j", "default/claims/00"), ("j", "default/lacks-yes/00"),
                       ("j", "default/pytest-fails/00"), ("k", "default/lacks-yes/00")):
        page.keyboard.press(key)
        expect(page.locator("h1")).to_have_text(shown)
    # The list is the table's, failures first: after them, the ones that succeeded.
    for shown in ("default/pytest-fails/00", "default/edits/00"):
        page.keyboard.press("ArrowRight")  # the next task, failed or not
        expect(page.locator("h1")).to_have_text(shown)
    expect(page.locator("nav.walk .at")).to_have_text("5 of 6")
    page.click("nav.crumbs a.back")
    expect(page.locator("table.tasks")).to_be_visible()


def test_the_walk_follows_the_filtered_list(failures: str, page: Any) -> None:
    page.goto(f"{failures}/runs/{RUN}?outcome=failed&sort=key&dir=desc")
    first = page.locator("table.tasks tbody tr[data-task] a").first
    first.click()
    expect(page.locator("h1")).to_have_text("default/pytest-fails/00")
    expect(page.locator("nav.walk .at")).to_have_text("1 of 4")
    page.keyboard.press("j")
    expect(page.locator("h1")).to_have_text("default/lacks-yes/00")
    page.click("nav.crumbs a.back")
    page.wait_for_url("**outcome=failed**")


def test_the_matrix_puts_the_flaky_cell_first(failures: str, page: Any) -> None:
    page.goto(f"{failures}/runs/{CROSSED}")
    matrix = page.locator("table.matrix")
    expect(matrix).to_be_visible()
    assert [th.strip() for th in matrix.locator("thead th").all_text_contents()] == [
        "task", "a", "b"]
    rows = matrix.locator("tbody tr")
    assert rows.locator("td:first-child").all_text_contents() == ["flaky", "steady"]
    flaky = rows.first.locator("td.cell").first
    assert "flaky" in (flaky.get_attribute("class") or "")
    assert flaky.text_content() == "\u25cf\u25cb"  # replicate 00 succeeded, 01 failed
    assert rows.nth(1).locator("td.cell").all_text_contents() == ["\u25cf\u25cf"] * 2
    flaky.locator("a.o-failed").click()
    expect(page.locator("h1")).to_have_text("a/flaky/01")


def test_the_conversation_reads_as_commands_and_diffs(failures: str, page: Any) -> None:
    page.goto(f"{failures}/runs/{RUN}/tasks/default/claims/00")
    expect(page.locator(".conversation pre.shell")).to_have_text("pytest -q")
    # 30 lines of output: 12 shown, the rest folded one click away.
    result = page.locator(".tool-result").first
    assert result.locator("pre").first.text_content().splitlines()[-1] == "line 12"
    more = result.locator("details.more")
    expect(more.locator("summary")).to_have_text("18 more lines")
    more.locator("summary").click()
    expect(more.locator("pre")).to_contain_text("line 30")
    diff = page.locator(".tool.t-diff")
    expect(diff.locator(".path")).to_have_text("/work/stats.py")
    assert diff.locator(".d-del").all_text_contents() == ["-    return 0"]
    assert diff.locator(".d-add").all_text_contents() == ["+    return None"]


def test_the_agents_claim_stands_beside_the_graders_verdict(failures: str, page: Any) -> None:
    page.goto(f"{failures}/runs/{RUN}/tasks/default/claims/00")
    claim = page.locator("p.claim")
    expect(claim).to_have_class(re.compile(r"\bmismatch\b"))
    expect(claim).to_contain_text("the agent said: it worked")
    expect(claim).to_contain_text("Fixed: all tests pass now.")
    expect(claim).to_contain_text("the grader: FAILURE: file_exists \u2717 stats.py")
    # The run's table keeps, under "claimed success, not passed", only such tasks: not
    # the 529 (its agent said it failed), not the ones without an agent.
    page.goto(f"{failures}/runs/{RUN}")
    page.check("input[name=outcome][value=claimed]")  # no submit: it filters
    page.wait_for_url("**outcome=claimed**")
    expect(page.locator("table.tasks tbody tr[data-task]")).to_have_count(1)
    expect(page.locator("table.tasks tbody tr[data-task]")).to_have_attribute(
        "data-task", "default/claims/00")


def test_failures_come_first_with_a_bar_of_their_kinds(failures: str, page: Any) -> None:
    page.goto(f"{failures}/runs/{RUN}")
    rows = page.locator("table.tasks tbody tr[data-task]")
    assert [r.get_attribute("data-task") for r in rows.all()] == [
        "default/api-529/00", "default/claims/00", "default/lacks-yes/00",
        "default/pytest-fails/00", "default/edits/00", "default/ok/00"]
    expect(page.locator("p.count")).to_contain_text("failures first")
    # Each kind with how many tasks failed so, by cause where a criterion says one (a
    # run_command's: the tests failed); the 529 the agent printed is no kind of its own:
    # that task lacked its file.
    kinds = page.locator("nav.kinds .kind")
    assert [" ".join(k.split()) for k in kinds.all_text_contents()] == [
        "file_exists \u2717 2", "output_contains \u2717 1", "tests failed 1"]
    kinds.nth(0).click()
    page.wait_for_url("**kind=file_exists**")
    assert [r.get_attribute("data-task") for r in rows.all()] == [
        "default/api-529/00", "default/claims/00"]
    expect(page.locator("nav.kinds a.kind.on")).to_have_attribute("aria-current", "true")
    # Several statuses at once, as they are ticked: no submit, no reload.
    page.goto(f"{failures}/runs/{RUN}")
    loaded = page.evaluate("window.evalledgerLoadedAt")
    page.check("input[name=outcome][value=succeeded]")
    expect(rows).to_have_count(2)
    page.check("input[name=outcome][value=claimed]")
    expect(rows).to_have_count(3)
    assert [r.get_attribute("data-task") for r in rows.all()] == [
        "default/claims/00", "default/edits/00", "default/ok/00"]
    expect(page.locator("input[name=outcome][value=claimed]")).to_be_focused()
    assert page.evaluate("window.evalledgerLoadedAt") == loaded
    assert "outcome=succeeded&outcome=claimed" in page.url
    page.click("tr[data-task='default/edits/00'] a")  # its walk is that list
    expect(page.locator("nav.walk .at")).to_have_text("2 of 3")
    page.keyboard.press("k")
    expect(page.locator("h1")).to_have_text("default/claims/00")


def test_a_long_criterion_detail_is_folded_under_its_reason(failures: str, page: Any) -> None:
    page.goto(f"{failures}/runs/{RUN}/tasks/default/pytest-fails/00")
    detail = page.locator("table.criteria tr.fail details.more")
    expect(detail.locator("summary")).to_have_text("run_command \u2717 assert 0 is None")
    assert detail.get_attribute("open") is None
    detail.locator("summary").click()
    expect(detail).to_contain_text("FAILED test_stats.py::test_median - assert 0 is None")


def test_a_search_of_every_transcript_marks_what_it_found(failures: str, page: Any) -> None:
    page.goto(f"{failures}/runs/{RUN}")
    page.fill("form.search-all input[name=q]", "529 overloaded")  # any case finds it
    page.press("form.search-all input[name=q]", "Enter")
    page.wait_for_url("**/search?q=529+overloaded")
    found = page.locator("section.found")
    expect(found).to_have_count(1)
    expect(found).to_have_attribute("data-task", "default/api-529/00")
    expect(page.locator("p.count")).to_contain_text("1 line in 1 task hold")
    expect(found.locator("mark")).to_have_text(["529 Overloaded"])  # as it is written
    found.locator("h2 a").click()  # the task's own lines that hold it, marked
    expect(page.locator("h1")).to_have_text("default/api-529/00")
    expect(page.locator("table.lines tbody tr[data-seq]")).to_have_count(1)
    expect(page.locator("table.lines mark")).to_have_text(["529 Overloaded"])


def test_a_search_of_every_run_finds_a_line_of_each(failures: str, page: Any) -> None:
    page.goto(failures)
    page.fill("form.search-every input[name=q]", "LINE 30")  # any case, every run
    page.press("form.search-every input[name=q]", "Enter")
    page.wait_for_url("**/search?q=LINE+30")
    found = page.locator("section.found-run")
    expect(found).to_have_count(1)
    expect(found).to_have_attribute("data-run", RUN)
    expect(found.locator("section.found")).to_have_attribute("data-task", "default/claims/00")
    expect(found.locator("mark")).to_have_text(["line 30"])  # as it is written
    # The hit is a tool's result in an agent's event: read as its conversation reads it,
    # under named columns, not as the event's JSON.
    hit = found.locator("table.found-lines tbody tr")
    expect(hit.locator("td").nth(2)).to_have_text("error")  # a tool's result marked one
    expect(hit.locator("td.text")).to_have_text("line 30")  # the line of it that holds it
    expect(hit.locator("td.text")).not_to_contain_text('"tool_use_id"')
    expect(found.locator("table.found-lines thead th")).to_have_text(
        ["line", "attempt", "what", "text"])
    expect(page.locator("p.count")).to_contain_text("1 line in 1 run hold")
    found.locator("h2 a").click()  # the run's own search
    page.wait_for_url(f"**/runs/{RUN}/search?q=LINE+30")
    expect(page.locator("section.found mark")).to_have_text(["line 30"])


def test_j_opens_the_first_failure_and_its_page_shows_the_failure_first(
        failures: str, page: Any) -> None:
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{failures}/runs/{RUN}")
    page.keyboard.press("j")  # the first failure of the table (failures first)
    page.wait_for_url(f"**/runs/{RUN}/tasks/default/api-529/00**")
    page.goto(f"{failures}/runs/{RUN}/tasks/default/pytest-fails/00")
    # What failed and why on the first screen: the error, then the criteria; what the
    # attempt was (started, isolation, tokens) folded under one line below them.
    error = page.locator("#attempt-1 .error-block")
    criteria = page.locator("#attempt-1 table.criteria")
    assert error.bounding_box()["y"] < criteria.bounding_box()["y"] < 500
    meta = page.locator("#attempt-1 details.meta")
    assert meta.get_attribute("open") is None
    assert criteria.bounding_box()["y"] < meta.bounding_box()["y"]
    expect(meta.locator("summary")).to_contain_text("exit code")


def test_typing_in_the_filter_narrows_the_table(failures: str, page: Any) -> None:
    page.goto(f"{failures}/runs/{RUN}")
    rows = page.locator("table.tasks tbody tr[data-task]")
    expect(rows).to_have_count(6)
    loaded = page.evaluate("window.evalledgerLoadedAt")
    box = page.locator("form.task-filter input[name=q]")
    box.click()
    page.keyboard.type("lacks")
    expect(rows).to_have_count(1)
    expect(rows).to_have_attribute("data-task", "default/lacks-yes/00")
    page.keyboard.type("-no")  # still typing: the caret stayed in the box
    expect(rows).to_have_count(0)
    expect(box).to_be_focused()
    expect(box).to_have_value("lacks-no")
    assert page.evaluate("window.evalledgerLoadedAt") == loaded  # never reloaded
    assert page.url.endswith("?q=lacks-no")


@pytest.mark.parametrize("path", [
    "/", f"/runs/{RUN}", f"/runs/{CROSSED}", f"/runs/{RUN}/tasks/default/claims/00",
    f"/runs/{RUN}/tasks/default/pytest-fails/00", f"/diff/{RUN}/{CROSSED}",
    f"/runs/{RUN}/search?q=529", f"/runs/{RUN}/tasks/default/api-529/00?q=529&view=raw",
    "/search?q=line", f"/runs/{HUNG}/tasks/default/hangs/00"])
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_finds_no_violation(failures: str, browser: Any, path: str, scheme: str) -> None:
    assert axe_violations(browser, failures + path, scheme) == []


def test_files_changed_shows_what_the_agent_did_to_its_workspace(failures: str, page: Any) -> None:
    page.goto(f"{failures}/runs/{RUN}/tasks/default/edits/00")
    panel = page.locator("section.changes")
    expect(panel.locator("p.lead")).to_have_text("1 added, 1 removed, 2 modified, 1 unchanged")
    files = {f.locator(".path").text_content(): f for f in panel.locator("details.file").all()}
    assert sorted(files) == ["a.py", "b.py", "gone.txt", "new.py"]
    assert files["a.py"].locator(".d-del").all_text_contents() == ["-print('one')"]
    assert files["a.py"].locator(".d-add").all_text_contents() == ["+print('uno')"]
    assert files["b.py"].locator(".d-add").all_text_contents() == ["+x = 2"]
    assert files["new.py"].locator(".d-add").all_text_contents() == ["+new"]
    expect(files["gone.txt"].locator(".pill")).to_have_text("removed")
    # Python in Python's colours: the builtin, the string, the number; each visibly so.
    added = files["a.py"].locator(".d-add")
    assert added.locator(".hl-nb").all_text_contents() == ["print"]
    assert added.locator(".hl-s").all_text_contents() == ["'uno'"]
    assert files["b.py"].locator(".d-add .hl-m").all_text_contents() == ["2"]
    plain, string = (added.evaluate("e => getComputedStyle(e).color"),
                     added.locator(".hl-s").evaluate("e => getComputedStyle(e).color"))
    assert plain != string


def test_a_narrow_screen_shows_task_cards_and_folds_long_errors(
        failures: str, page: Any) -> None:
    page.set_viewport_size({"width": 400, "height": 900})
    page.goto(f"{failures}/runs/{RUN}")
    row = page.locator("tr[data-task='default/pytest-fails/00']")
    assert row.evaluate("r => getComputedStyle(r).display") == "block"
    assert row.locator("td[data-label=score]").evaluate(
        "td => getComputedStyle(td, '::before').content") == '"score "'
    assert page.evaluate("document.documentElement.scrollWidth") <= 400
    page.goto(f"{failures}/runs/{RUN}/tasks/default/pytest-fails/00")
    folded = page.locator("#attempt-1 .error-block details.more")
    expect(folded.locator("summary")).to_have_text("run_command \u2717 assert 0 is None")
    folded.locator("summary").click()
    expect(folded).to_contain_text("FAILED test_stats.py::test_median")


def test_the_runs_list_says_each_start_on_one_line_when_squeezed(
        failures: str, page: Any) -> None:
    """#49: at 1280 px the runs list wrapped its dates (``2026-12-07`` over ``10:56``)
    where its runs had long names; these runs' names are short, so a narrower screen
    squeezes the table as they did (it scrolls sideways rather than wrap a date; at
    1280 px these rows fit whatever the rule: test_browser.py checks that width)."""
    page.set_viewport_size({"width": 800, "height": 800})
    page.goto(failures + "/")
    lines = page.evaluate("""() => [...document.querySelectorAll('tr[data-run] td.when')]
        .map(td => { const r = document.createRange(); r.selectNodeContents(td);
                     return r.getClientRects().length; })""")
    assert lines == [1, 1, 1, 1]


def test_a_timed_out_command_reads_as_still_running_beside_open_thinking_and_local_paths(
        failures: str, page: Any) -> None:
    """#49: what the agent thought is open on the page; the file it wrote reads by its
    place in the workspace, not by the sandbox's absolute path; and the command its
    attempt timed out in says it was still running then."""
    page.goto(f"{failures}/runs/{HUNG}/tasks/default/hangs/00")
    thinking = page.locator("details.thinking")
    expect(thinking).to_have_attribute("open", "")
    expect(thinking).to_contain_text("then run the long suite")
    assert thinking.evaluate("d => d.scrollHeight") > thinking.locator("summary").evaluate(
        "s => s.scrollHeight")  # its text shows, not only its summary line
    written = page.locator(".tool.t-write .path, .tool .path").first
    expect(written).to_have_text("median.py")
    assert "/evalledger-" in (written.get_attribute("title") or "")
    conversation = page.locator(".conversation").text_content() or ""
    assert "File created successfully at: median.py" in conversation
    assert "/evalledger-" not in conversation
    note = page.locator(".still-running")
    expect(note).to_have_count(1)
    expect(note).to_have_text("still running when the attempt timed out: no result came")
    assert page.locator(".msg", has=note).locator("code").text_content() == "sleep 600"


def test_a_diff_of_runs_whose_variants_are_named_apart_pairs_them_as_picked(
        failures: str, page: Any) -> None:
    """#49, point 3: two variants each, named apart, pair nothing by themselves (every
    task added or removed); picked in the form, they pair by task."""
    page.goto(f"{failures}/diff/{CROSSED}/{RENAMED}")
    lead = page.locator("p.lead")
    expect(lead).to_contain_text("8 added")
    expect(lead).to_contain_text("8 removed")
    form = page.locator("form.pairing")
    form.locator("select").nth(0).select_option(label="model-a")
    form.locator("select").nth(1).select_option(label="model-b")
    form.locator("button[type=submit]").click()
    page.wait_for_url("**variants=a%3Dmodel-a&variants=b%3Dmodel-b")
    expect(lead).to_contain_text("1 fix")
    expect(lead).to_contain_text("7 unchanged")
    expect(lead).to_contain_text("0 added")
    expect(page.locator("tr[data-task='model-a/flaky/01'] .pill")).to_have_text("fix")
    expect(page.locator("p.muted", has_text="paired with")).to_contain_text(
        "variant a of crossed-1 paired with model-a of renamed-1")
    assert axe_violations(page.context.browser, page.url, "dark") == []


def test_the_verdict_leads_to_the_tool_result_the_agent_saw_fail(
        failures: str, page: Any) -> None:
    """#49, point 5: from why the attempt failed to the step of its conversation that
    failed (its tests' run), in one click, on the screen."""
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{failures}/runs/{RUN}/tasks/default/claims/00")
    link = page.locator("#attempt-1 p.to-failing a")
    expect(link).to_have_text("the last tool result its agent saw fail \u2192")
    link.click()
    page.wait_for_url(re.compile(r".*\?after=\d+#seq-\d+$"))
    seq = page.url.rsplit("#seq-", 1)[1]
    target = page.locator(f"#seq-{seq}")
    expect(target).to_contain_text("line 30")
    expect(target.locator(".tool-result.is-error")).to_have_count(1)
    expect(target).to_be_in_viewport()


def test_an_attempt_that_reported_no_tokens_says_so_in_words(failures: str, page: Any) -> None:
    """#49, point 6: usage of nothing but zeros was drawn on an empty 0-1 axis."""
    page.goto(f"{failures}/runs/{RUN}/tasks/default/api-529/00")
    chart = page.locator("#attempt-1 figure svg")
    expect(chart).to_have_count(1)
    expect(chart.locator("text")).to_have_text(["0 tokens reported"])
    expect(chart.locator("path")).to_have_count(0)


def test_a_cut_off_agents_cost_per_model_reads_as_a_floor(failures: str, page: Any) -> None:
    """#49, point 6: the cost per model of an attempt cut off before its agent's totals
    came (its messages' usage booked as an estimate, priced) read as a plain figure."""
    page.goto(f"{failures}/runs/{HUNG}")
    chart = page.locator("figure", has=page.locator("figcaption", has_text="Cost per model"))
    expect(chart.locator("svg")).to_have_count(1)
    shown = chart.locator("svg > text").all_text_contents()
    assert "claude-sonnet-4-5" in shown, shown
    [cost] = [text for text in shown if "$" in text]
    assert re.fullmatch(r"\u2265 \$0\.\d{4}", cost), shown
    expect(page.locator('[data-count="total_cost_usd"]')).to_have_text(cost)


def test_durations_close_together_read_apart_on_their_axis(
        tmp_path: Path, page: Any) -> None:
    """#49, point 6: durations of 3.21 s to 3.24 s were labelled ``3.2s 3.2s 3.2s``
    under their chart, and each bar's tooltip the same; as many decimals as it takes
    now, each label clear of the next."""
    db = tmp_path / "ledger.db"
    keys = [f"default/t{i}/00" for i in range(3)]
    events: list[Any] = [RunStarted(run_id="close", planned=keys)]
    for key, seconds in zip(keys, [3.21, 3.22, 3.24], strict=True):
        events += [TaskStarted(run_id="close", task_key=key, task_id=key.split("/")[1]),
                   TaskCompleted(run_id="close", task_key=key, category="succeeded",
                                 final_status=FinalStatus.SUCCESS, duration_seconds=seconds)]
    with Ledger(db) as ledger:
        ledger.append(events)
    with viewer(db) as url:
        page.goto(f"{url}/runs/close")
        svg = page.locator("figure", has=page.locator(
            "figcaption", has_text="Task durations")).locator("svg")
        ticks = svg.locator("text", has_text=re.compile(r"^[\d.]+s$"))
        expect(ticks).to_have_text(["3.21s", "3.23s", "3.24s"])
        boxes = [ticks.nth(i).bounding_box() for i in range(3)]
        assert all(a["x"] + a["width"] < b["x"] for a, b in itertools.pairwise(boxes)), boxes
        bins = [t for t in svg.locator("rect > title").all_text_contents()
                if not t.endswith(": 0")]
        assert len(bins) == 3 and len({t.split(":")[0] for t in bins}) == 3, bins
