"""The reports a batch leaves and ``report`` prints (``app/_reports``): rendered by
``evalledger.render``, never by the viewer, and Jinja loaded only for the HTML one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import json, sys
from evalledger.app import load_summary, render_report
from evalledger.ledger import Ledger, RunFinished, RunStarted, TaskCompleted, TaskStarted
from evalledger.statuses import FinalStatus, RunStatus

WATCHED = ("jinja2", "starlette", "evalledger.viewer")
with Ledger(sys.argv[1]) as ledger:
    ledger.append([
        RunStarted(run_id="r", planned=["default/a/00"]),
        TaskStarted(run_id="r", task_key="default/a/00", task_id="a"),
        TaskCompleted(run_id="r", task_key="default/a/00", final_status=FinalStatus.SUCCESS,
                      category=FinalStatus.SUCCESS.category),
        RunFinished(run_id="r", status=RunStatus.COMPLETED)])
    summary = load_summary(ledger, "r")
    said = {f: render_report(ledger, summary, f) for f in ("md", "json", "junit")}
    before = sorted(m for m in WATCHED if m in sys.modules)
    page = render_report(ledger, summary, "html")
    after = sorted(m for m in WATCHED if m in sys.modules)
print(json.dumps([before, after, "default/a/00" in page, sorted(said)]))
"""


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_run_md_json_and_junit_load_no_jinja_and_the_html_report_no_viewer(
        tmp_path: Path) -> None:
    """A batch's run.md needs no template engine; its report.html is rendered below the
    app, so no web framework and no viewer are loaded to write it."""
    done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "ledger.db")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    before, after, shows_the_task, rendered = json.loads(done.stdout)
    assert rendered == ["json", "junit", "md"]
    assert before == []
    assert after == ["jinja2"]
    assert shows_the_task
