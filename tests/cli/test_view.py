"""``evalledger view`` on a port another program holds: one line naming where it tried
to listen and what to do, from a real process against a real listening socket."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from evalledger.ledger import Ledger, RunStarted

from .helpers import COMMAND, PATIENCE, _env


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_port_in_use_is_named_with_what_to_do(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    with Ledger(db) as ledger:
        ledger.append([RunStarted(run_id="r1")])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([*COMMAND, "--ledger", str(db), "view", "--port", str(port)],
                              cwd=tmp_path, env=_env(), capture_output=True, text=True,
                              timeout=PATIENCE, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"Error: cannot listen on 127.0.0.1:{port}: Address already "
                                  "in use; "), done.stderr
    assert "--port 0" in done.stderr
