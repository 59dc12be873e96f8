"""A command that replays an agent's transcript: prints its lines, then exits or hangs."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalledger.executor import BatchConfig
from evalledger.ledger import AnyEvent, Ledger
from evalledger.suite import ResolvedTask

from .batches import events, run


def replay(tmp_path: Path, lines: Sequence[Any], exit_code: int = 0, *,
           hang: bool = False, name: str = "transcript") -> list[str]:
    """A shell command printing ``lines`` (JSON objects as JSON, text as it is), then
    exiting with ``exit_code`` or, with ``hang``, waiting until it is stopped (a
    timeout, a budget): the shell prints at once, even on a loaded machine."""
    body = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines)
    transcript = tmp_path / f"{name}.jsonl"
    transcript.write_text(body + "\n", encoding="utf-8")
    then = "exec sleep 3600" if hang else f"exit {exit_code}"
    return ["/bin/sh", "-c", f"cat {shlex.quote(str(transcript))}; {then}"]


def ran(tmp_path: Path, tasks: Sequence[ResolvedTask], cfg: BatchConfig) -> list[AnyEvent]:
    """Run ``tasks`` as one batch into a new ledger in ``tmp_path``; the run's events."""
    with Ledger(tmp_path / "l.db") as ledger:
        run(ledger, tasks, cfg)
        return events(ledger)
