"""``evalledger view`` as a real process: started once it has printed its URL, stopped
with Ctrl-C."""

from __future__ import annotations

import re
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.waiting import PATIENCE


def start(*args: str) -> tuple[subprocess.Popen[str], str]:
    """``evalledger ARGS...`` (a ``view``) as a real process, and the URL it printed."""
    process = subprocess.Popen([sys.executable, "-m", "evalledger.cli", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], PATIENCE)
        assert ready, "no URL printed"
        line = process.stdout.readline()
        found = re.search(r"http://\S+", line)
        assert found, line
    except BaseException:
        process.kill()
        process.communicate()
        raise
    return process, found.group(0)


def stop(process: subprocess.Popen[str]) -> int:
    """Ctrl-C, then its exit code (killed if it has not ended in PATIENCE)."""
    process.send_signal(signal.SIGINT)
    try:
        return process.wait(PATIENCE)
    finally:
        process.kill()


@contextmanager
def viewer(db: Path) -> Iterator[str]:
    """An ``evalledger view`` process over ``db``; yields its URL (no trailing slash), and
    stops it with Ctrl-C, which it must end by with exit code 0."""
    process, url = start("--ledger", str(db), "view", "--port", "0")
    try:
        yield url.rstrip("/")
    finally:
        assert stop(process) == 0
