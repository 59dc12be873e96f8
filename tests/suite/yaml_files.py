"""Task and experiment files written for a test: a minimal task, a file written
dedented, and the keys a loaded task set resolved to."""

from __future__ import annotations

import textwrap
from pathlib import Path

from evalledger.suite import TaskSet

MINIMAL = """\
command: echo hi
success_criteria: [{type: exit_code}]
"""


def write(path: Path, text: str) -> Path:
    """Write a YAML file (dedented), creating its folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def keys(task_set: TaskSet) -> list[str]:
    return [t.task_key for t in task_set.tasks]
