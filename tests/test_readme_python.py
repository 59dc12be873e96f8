"""The README's "From Python" example runs as written, against the bundled suite, and
reads the summary it says it reads; ``import evalledger`` stays cheap."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evalledger.ledger import Ledger, verify

ROOT = Path(__file__).resolve().parent.parent


def _python_block(text: str, section: str) -> str:
    part = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"^```python\n(.*?)^```", part, re.MULTILINE | re.DOTALL)
    assert match, f"README.md: no python block under {section!r}"
    return match[1]


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_the_readme_python_example_runs_a_batch_and_reads_its_summary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = _python_block((ROOT / "README.md").read_text(encoding="utf-8"), "From Python")
    shutil.copytree(ROOT / "examples" / "smoke", tmp_path / "examples" / "smoke")
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})

    lines = printed.getvalue().splitlines()
    run_id = re.fullmatch(r"run (\S+): as_expected", lines[0])
    assert run_id, lines
    assert lines[1] == "2 of 4 succeeded, 2 failed"
    report = tmp_path / "runs" / run_id[1] / "run.json"
    assert lines[2] == f"run.json: {report}"
    assert json.loads(report.read_text())["tasks_succeeded"] == 2
    with Ledger(tmp_path / "evalledger.db", read_only=True) as ledger:
        assert ledger.run_ids() == [run_id[1]]
        assert verify(ledger).ok


def test_importing_the_package_imports_neither_trio_nor_pydantic_nor_click() -> None:
    """Every command imports the package; ``run`` and ``resume`` come on first use."""
    probe = ("import sys, evalledger; "
             "print(sorted(m for m in ('trio', 'pydantic', 'click', 'evalledger.app') "
             "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
