"""The end-of-batch sweep on a Ray node (``sweep_node``), run here as a plain function:
what still carries the batch's mark after the patience given to the workers gets
SIGTERM and its grace period before SIGKILL, so a stop that Ray delivers late (or a
worker that is gone) still leaves the attempt its grace period."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

from evalledger.executor._marks import MARKER_VAR
from evalledger.executor._sandbox import finish, remove_tree
from evalledger.executor.ray._worker import sweep_node

from ..cli.helpers import wait_until

# An attempt that says when it is asked to stop (SIGTERM) and then stops.
ATTEMPT = """\
import os, signal, sys, time
def term(*_):
    open(sys.argv[1], "w").close()
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
open(sys.argv[2], "w").close()
while True:
    time.sleep(0.05)
"""


def _attempt(tmp_path: Path, token: str) -> tuple[subprocess.Popen[bytes], Path]:
    term, ready = tmp_path / "term", tmp_path / "ready"
    child = subprocess.Popen([sys.executable, "-c", ATTEMPT, str(term), str(ready)],
                             env={**os.environ, MARKER_VAR: f"{token}-1"})
    wait_until(ready.exists, "the attempt to be ready")
    return child, term


def test_what_outlives_the_patience_gets_its_grace_period_first(tmp_path: Path) -> None:
    token = secrets.token_hex(8)
    child, term = _attempt(tmp_path, token)
    try:
        _, killed = sweep_node(token, patience=0.0, grace=30.0)
        assert child.wait(30) == 0  # it ended on its own, from its SIGTERM handler
        assert term.exists()
        assert killed == 0
    finally:
        child.kill()
        child.wait()


def test_without_a_grace_period_it_is_killed_at_once(tmp_path: Path) -> None:
    token = secrets.token_hex(8)
    child, term = _attempt(tmp_path, token)
    try:
        _, killed = sweep_node(token, patience=0.0)
        assert child.wait(30) == -9
        assert not term.exists()
        assert killed == 1
    finally:
        child.kill()
        child.wait()


def test_an_attempt_closing_after_the_sweep_makes_no_folder_again(tmp_path: Path) -> None:
    """On a loaded node the sweep removed the batch's folder before a cancelled attempt
    had closed; keeping its sandbox then made the folder again (the artifacts' parents),
    and it stayed until Ray ended the worker (a Ray Ctrl-C test failed so beside two
    other copies of the suite)."""
    batch = tmp_path / "batch"
    sandbox = batch / "worker-1" / "1"
    sandbox.mkdir(parents=True)
    (sandbox / "answer.txt").write_text("42\n")
    remove_tree(batch)  # the sweep
    kept = finish(sandbox, "move-on-write", batch / "worker-1" / "artifacts" / "default" / "t")
    assert kept is None
    assert not batch.exists()
