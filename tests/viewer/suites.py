"""A ledger made by real runs (``evalledger run`` in this process), shared by the viewer tests.

Two runs of one small suite: the first with a hostile task (markup, ANSI escapes,
control characters), a long transcript, a Claude Code ``stream-json`` transcript,
stderr, a truncated line and usage; the second with one of the first run's
successes turned into a failure (a regression for the diff). The session's fixture
(``suite``, in conftest.py) builds it once.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from click.testing import CliRunner

from evalledger.cli import cli

HOSTILE = (
    "<script>alert('x')</script> </textarea> & \x1b[31mred\x1b[0m \x1b]0;title\x07 "
    "\u202eevil"
)

CLAUDE = [
    {"type": "system", "subtype": "init", "model": "claude-sonnet-4-5", "tools": ["Bash"],
     "session_id": "s"},
    {"type": "assistant", "message": {"id": "m1", "model": "claude-sonnet-4-5", "content": [
        {"type": "text", "text": "I will list the files."},
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls -la"}}],
        "usage": {"input_tokens": 100, "output_tokens": 20}}},
    {"type": "user", "message": {"content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "total 0\n<b>not bold</b>"}]}},
    {"type": "result", "subtype": "success", "total_cost_usd": 0.0123, "num_turns": 2,
     "duration_ms": 1500, "result": "All done.",
     "usage": {"input_tokens": 100, "output_tokens": 40}},
]


@dataclass
class Suite:
    root: Path
    db: Path
    out: Path
    runs: list[str]

    @property
    def first(self) -> str:
        return self.runs[0]

    @property
    def second(self) -> str:
        return self.runs[1]


def _task(path: Path, command: str | list[str], **fields: object) -> None:
    data: dict[str, object] = {"command": command, "timeout": 30}
    data.update(fields)
    data.setdefault("success_criteria", [{"type": "exit_code", "equals": 0}])
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def write_suite(folder: Path, *, regress: bool) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "claude.py"
    script.write_text("import json\n" + "".join(
        f"print(json.dumps({line!r}))\n" for line in CLAUDE), encoding="utf-8")
    _task(folder / "ok.yaml", "echo hello; echo oops >&2", tags=["fast"])
    _task(folder / "flip.yaml", "exit 1" if regress else "exit 0", tags=["fast"])
    _task(folder / "fails.yaml", "echo nope", tags=["slow"],
          success_criteria=[{"type": "output_contains", "includes": ["yes"]}])
    _task(folder / "hostile.yaml", ["python3", "-c", f"print({HOSTILE!r}); print('x' * 70000)"],
          tags=["weird"], success_criteria=[
              {"type": "output_contains", "includes": ["<never printed>"]}])
    _task(folder / "long.yaml", ["python3", "-c",
                                 "for i in range(1, 1201): print(f'line {i} of 1200')"])
    _task(folder / "claude.yaml", ["python3", str(script)], stream_format="claude-code",
          model="claude-sonnet-4-5")
    _task(folder / "usage.yaml", ["python3", "-c", "import json; print(json.dumps("
                                  "{'type': 'usage', 'model': 'mystery-model', "
                                  "'input_tokens': 10, 'output_tokens': 5}))"])
    return folder


def run_suite(root: Path, db: Path, out: Path, suite: Path, run_id: str) -> None:
    result = CliRunner().invoke(cli, ["--ledger", str(db), "run", str(suite), "--run-id",
                                      run_id, "--out", str(out), "-j", "4"])
    assert result.exit_code == 1, result.output  # some tasks fail on purpose


def build_suite(root: Path) -> Suite:
    """The two runs, in a ledger under ``root`` (reports under ``root/runs``)."""
    db, out = root / "ledger.db", root / "runs"
    previous = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(root)  # the batches' sandboxes stay in this folder
    try:
        run_suite(root, db, out, write_suite(root / "suite-a", regress=False), "run-a")
        run_suite(root, db, out, write_suite(root / "suite-b", regress=True), "run-b")
    finally:
        if previous is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = previous
    return Suite(root, db, out, ["run-a", "run-b"])


def run_json(suite: Suite, run_id: str) -> dict[str, object]:
    return json.loads((suite.out / run_id / "run.json").read_text(encoding="utf-8"))
