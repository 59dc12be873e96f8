"""A process killed while it creates a ledger leaves no ledger or a usable one.

Before, a SIGKILL between SQLite making the file and the first migration committing
left a file every reader refused ("is a SQLite database but not an evalledger
ledger", exit 2) until some later ``run`` quietly finished it. A file that holds no
table yet is now no ledger to a reader, and a writer finishes it.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers import evalledger, write_task

TRIALS = 25
# For each folder it reads, forks a creator of ledgers on fresh paths there, one after
# another, until it is killed (the import done once: a trial costs a fork).
CREATOR = """\
import os, sys
from pathlib import Path
from evalledger.ledger import Ledger
for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        folder = Path(line.strip())
        for i in range(1_000_000):
            Ledger(folder / f"l{i:04d}.db").close()
        os._exit(0)
    print(pid, flush=True)
    os.waitpid(pid, 0)
    print("reaped", flush=True)
"""


@pytest.fixture(scope="module")
def creator() -> Iterator[subprocess.Popen[str]]:
    server = subprocess.Popen([sys.executable, "-c", CREATOR], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    yield server
    server.kill()
    server.communicate()


def _kill_while_creating(creator: subprocess.Popen[str], folder: Path, delay: float) -> None:
    assert creator.stdout is not None and creator.stdin is not None
    creator.stdin.write(f"{folder}\n")
    creator.stdin.flush()
    pid = int(creator.stdout.readline())
    time.sleep(delay)  # the random moment of the kill, not a wait for a state
    os.kill(pid, signal.SIGKILL)
    assert creator.stdout.readline() == "reaped\n"


# The slow tier: a SIGKILL campaign, 25 kills at random moments of a ledger's creation.
@pytest.mark.slow
def test_a_ledger_killed_while_being_created_is_no_ledger_or_a_usable_one(
    tmp_path: Path, creator: subprocess.Popen[str],
) -> None:
    write_task(tmp_path / "tasks" / "t.yaml", "echo hi")
    rng = random.Random()
    seed = rng.randrange(2**32)
    rng.seed(seed)
    refused = []
    half_made = 0  # trials whose kill left a file that holds no ledger yet
    for trial in range(TRIALS):
        folder = tmp_path / f"trial-{trial:02d}"
        folder.mkdir()
        _kill_while_creating(creator, folder, rng.uniform(0, 0.05))
        made = sorted(folder.glob("l*.db"))
        no_ledger = {f"Error: no ledger at {db} (it holds no table yet: its creation was cut "
                     "off, or it is empty; `evalledger run` makes one there)\n" for db in made}
        for db in made:
            for command in (["runs"], ["verify"]):
                result = evalledger(tmp_path, db, *command)
                if result.returncode == 0:
                    continue
                if result.returncode == 2 and result.stderr in no_ledger:
                    half_made += command == ["runs"]
                    continue
                refused.append((db.name, command[0], result.returncode, result.stderr))
        if made:  # the one being made when the kill landed: a run makes it whole
            last = made[-1]
            ran = evalledger(tmp_path, last, "run", "tasks", "--out", str(folder / "out"))
            assert ran.returncode == 0, (trial, ran.stderr)
            assert evalledger(tmp_path, last, "verify").returncode == 0
    assert refused == [], f"seed {seed}: {refused}"
    assert half_made, "no kill landed while a ledger was being made"
