"""A process killed while it creates a ledger leaves no ledger or a usable one.

Before, a SIGKILL between SQLite making the file and the first migration committing
left a file every reader refused ("is a SQLite database but not an evalledger
ledger", exit 2) until some later ``run`` quietly finished it. A file that holds no
table yet is now no ledger to a reader, and a writer finishes it.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from .helpers import PATIENCE, evalledger, write_task

TRIALS = 25
# Creates ledgers on fresh paths, one after another, until it is killed.
CREATOR = """\
import sys
from pathlib import Path
from evalledger.ledger import Ledger
folder = Path(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
for i in range(1_000_000):
    Ledger(folder / f"l{i:04d}.db").close()
"""


def _kill_while_creating(folder: Path, delay: float) -> None:
    creator = subprocess.Popen([sys.executable, "-c", CREATOR, str(folder)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert creator.stdout is not None and creator.stdin is not None
        assert creator.stdout.readline() == "ready\n"
        creator.stdin.write("go\n")
        creator.stdin.flush()
        time.sleep(delay)  # the random moment of the kill, not a wait for a state
        creator.send_signal(signal.SIGKILL)
        assert creator.wait(PATIENCE) == -signal.SIGKILL
    finally:
        creator.kill()
        creator.communicate()


def test_a_ledger_killed_while_being_created_is_no_ledger_or_a_usable_one(
    tmp_path: Path,
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
        _kill_while_creating(folder, rng.uniform(0, 0.05))
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
