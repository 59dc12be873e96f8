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
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from .conftest import Suite, run_json

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PATIENCE = 30.0
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync"]


def _browser_or_skip() -> Any:
    reason = None
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        reason = "Playwright is not installed (pip install -e '.[test]')"
    if reason is None and not Path(CHROMIUM).exists():
        reason = "no Chromium at /usr/bin/chromium (apt-get install -y chromium)"
    if reason is not None:
        if os.environ.get("EVALLEDGER_REQUIRE_BROWSER"):
            pytest.fail(f"browser tests are required here: {reason}")
        pytest.skip(reason)
    expect.set_options(timeout=PATIENCE * 1000)
    return sync_playwright


def expect(target: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(target)


def _evalledger(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "evalledger.cli", *args], text=True,
                            **kwargs)


@pytest.fixture
def server(suite: Suite, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A viewer process over a copy of the suite's ledger; yields its URL and the copy."""
    db = tmp_path / "ledger.db"
    shutil.copy(suite.db, db)
    process = _evalledger("--ledger", str(db), "view", "--port", "0",
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], PATIENCE)
        assert ready, "the viewer printed no URL"
        line = process.stdout.readline()
        url = re.search(r"http://\S+", line)
        assert url, line
        yield url.group(0).rstrip("/"), db
    finally:
        process.send_signal(signal.SIGINT)
        try:
            assert process.wait(PATIENCE) == 0
        finally:
            process.kill()


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Any]:
    sync_playwright = _browser_or_skip()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            opened = browser.new_page(viewport={"width": 1300, "height": 900})
            opened.set_default_timeout(PATIENCE * 1000)
            errors: list[str] = []
            opened.on("pageerror", lambda error: errors.append(str(error)))
            opened.on("console", lambda message: errors.append(message.text)
                      if message.type == "error" else None)
            yield opened
            assert errors == [], errors  # no script error, no policy violation
        finally:
            browser.close()


def _wait_for_lines(api: str) -> None:
    """Until the task has started and printed something (asked of the JSON API)."""
    deadline = time.monotonic() + PATIENCE
    while True:
        try:
            with urllib.request.urlopen(api, timeout=PATIENCE) as response:
                if json.load(response)["lines"]:
                    return
        except urllib.error.HTTPError as e:
            if e.code != 404:  # not started yet
                raise
        assert time.monotonic() < deadline, "the task never started"
        time.sleep(0.05)


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
    assert "<script>alert('x')</script>" in text and "\\x1b[31mred" in text
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
    db: Path, tmp_path: Path, run_id: str
) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """An ``evalledger run`` process whose one task prints ``waiting`` and holds until the
    gate file exists; the caller opens the gate. Whatever happens, the gate is opened and
    the runner stopped on the way out."""
    suite = tmp_path / run_id
    suite.mkdir()
    gate = tmp_path / f"{run_id}.gate"
    (suite / "gated.yaml").write_text(GATED.format(gate=gate), encoding="utf-8")
    runner = _evalledger("--ledger", str(db), "run", str(suite), "--run-id", run_id,
                         "--out", str(tmp_path / "runs"), cwd=tmp_path,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield runner, gate
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
