"""What a regrade and a scan add, as the viewer shows it: each attempt's grade history,
the flags with links to the lines that show them, a badge and a filter on the run page."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from evalledger.viewer import create_app
from tests.cli.helpers import evalledger, write_tasks


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """A run of two tasks (one reads its own task file), regraded by stricter criteria
    under the name ``strict``, and scanned."""
    root = tmp_path_factory.mktemp("graded")
    check = [{"type": "output_contains", "includes": ["done"]}]
    tasks = write_tasks(root / "tasks", {
        "peek": {"command": 'cat "$EVALLEDGER_TASK_DIR/peek.yaml"; echo done',
                 "success_criteria": check},
        "plain": {"command": "echo done", "success_criteria": check}})
    db = root / "ledger.db"
    assert evalledger(root, db, "run", str(tasks), "--run-id", "g").returncode == 0
    strict = root / "strict.yaml"
    strict.write_text(json.dumps([{"type": "output_contains", "includes": ["never said"]}]))
    assert evalledger(root, db, "regrade", "g", "--criteria", str(strict),
                      "--name", "strict").returncode == 0
    assert evalledger(root, db, "scan", "g").returncode == 1
    with TestClient(create_app(db, interval=0.05, keepalive=0.2)) as opened:
        yield opened


def test_a_task_page_shows_each_grading_of_an_attempt_and_what_a_scan_found(
    client: TestClient,
) -> None:
    page = client.get("/runs/g/tasks/default/peek/00")
    assert page.status_code == 200
    text = html.unescape(page.text)
    history = text[text.index("Grade history"):text.index("Flags")]
    rows = re.findall(r"<tr(?: data-grades=\"([^\"]+)\")?><td class=\"mono\">([^<]+)</td>",
                      history)
    assert [name for _, name in rows] == ["original", "strict"]
    assert "SUCCESS" in history and "FAILURE" in history
    assert "criteria:" in history  # where the regrade's criteria came from
    flags = text[text.index("<h3>Flags</h3>"):]
    assert 'data-rule="criteria-read"' in flags
    seqs = re.findall(r'href="\?view=raw&after=(\d+)#seq-(\d+)"', flags)
    assert seqs and all(int(after) + 1 == int(seq) for after, seq in seqs)
    # The link lands on the line that shows it.
    after, seq = seqs[0]
    lines = client.get(f"/runs/g/tasks/default/peek/00?view=raw&after={after}")
    assert f'id="seq-{seq}"' in lines.text
    plain = client.get("/runs/g/tasks/default/plain/00").text
    assert "<h3>Flags</h3>" not in plain


def test_the_run_page_names_the_grade_set_and_badges_and_filters_the_flagged(
    client: TestClient,
) -> None:
    page = html.unescape(client.get("/runs/g").text)
    assert re.search(r"verdicts of grade set <span class=\"mono\" data-grades>strict</span> "
                     r"\(of original, strict\)", page)
    assert "1 flagged" in page
    # (and folder-read, where the runner watched what it opened: root, cgroups)
    assert re.search(r'title="flagged: criteria-read(, folder-read)?"', page)
    flagged = html.unescape(client.get("/runs/g?outcome=flagged").text)
    assert re.findall(r'<tr data-task="([^"]+)"', flagged) == ["default/peek/00"]
    assert client.get("/api/runs/g/tasks?outcome=flagged").json()["total"] == 1
