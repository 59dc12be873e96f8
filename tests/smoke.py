"""The example suite (examples/smoke), copied for a test, and how each of its tasks ends."""

from __future__ import annotations

import shutil
from pathlib import Path

SMOKE = Path(__file__).resolve().parents[1] / "examples" / "smoke"
SMOKE_KEYS = {
    "default/add-numbers/00": "SUCCESS",
    "default/reverse-string/00": "SUCCESS",
    "default/fizzbuzz/00": "FAILURE",
    "default/hard-problem/00": "TIMEOUT",
}


def copy_smoke(dest: Path) -> Path:
    """examples/smoke copied to ``dest/smoke``, the stalling task's timeout cut to 1 s."""
    root = dest / "smoke"
    shutil.copytree(SMOKE, root)
    hard = root / "tasks" / "hard-problem.yaml"
    text = hard.read_text(encoding="utf-8")
    assert "timeout: 2\n" in text
    hard.write_text(text.replace("timeout: 2\n", "timeout: 1\n"), encoding="utf-8")
    return root
