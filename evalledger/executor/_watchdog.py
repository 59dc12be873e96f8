"""Nothing a batch started outlives its runner, even a runner killed by SIGKILL.

A runner that dies by SIGKILL (or the OOM killer) runs no cleanup: its agents
would live on, spending, and its sandboxes stay in the temp folder. So every
batch starts a watchdog: a small process in its own session (Ctrl-C and a closed
terminal do not reach it) that holds the read end of a pipe whose only write end
is the runner's. When the runner ends normally it writes ``done`` and the
watchdog leaves. When the runner dies, the kernel closes the write end, the
watchdog reads end-of-file, kills every process carrying the batch's mark (for a
few seconds, in case one was being spawned at that moment) and removes the
batch's sandbox folder.

A second line of defence: ``sweep_dead_batches`` runs when a batch starts and
does the same for every batch the ledger recorded on this host whose process is
gone and that never recorded ``run.finished``.

This file is also the watchdog's program: ``python _watchdog.py TOKEN ROOT``. Run
that way it imports nothing of the package, only ``_marks`` beside it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # the watchdog itself: a bare interpreter
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _marks import MARKER_VAR, batch_mark, kill_marked, ray_mark  # type: ignore[import-not-found]
else:
    from ._marks import MARKER_VAR, batch_mark, kill_marked, ray_mark

DONE = b"done"
# After the runner died: keep killing marked processes this long, so that one the
# runner was spawning at that very moment is caught too.
SWEEP_SECONDS = 2.0


def _remove(root: str) -> None:
    # rm walks a tree of any depth without following symlinks out of it.
    subprocess.run(["rm", "-rf", "--", root], capture_output=True, check=False)


def watch(token: str, root: str, shared: str = "", last: str = "") -> None:
    """The watchdog: wait for the runner to end; if it died, clean up after it.

    ``shared``: a folder the runner shared with its siblings (a Ray worker's batch
    folder on its node), removed too once every sibling's folder in it (named ``last``
    and its pid) belongs to a process that is gone: siblings dying together each see
    the others' folders still there, so absence alone would leave it behind.
    """
    if sys.stdin.buffer.read() == DONE:
        return
    # The attempts, and a local Ray started for the batch (its processes carry the mark).
    marks = (batch_mark(token), ray_mark(token))
    quiet_until = time.monotonic() + SWEEP_SECONDS
    while time.monotonic() < quiet_until:
        kill_marked(*marks, prefix=True)
        time.sleep(0.1)
    if root:
        _remove(root)
    if shared:
        try:
            siblings = [n[len(last):] for n in os.listdir(shared) if n.startswith(last)]
        except OSError:
            return  # gone already
        if not any(_alive(pid) for pid in siblings):
            _remove(shared)


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except ValueError:
        return True  # not a pid: not ours to judge
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Watchdog:
    """The runner's side: start the watchdog, and tell it when the batch ended well."""

    def __init__(self, token: str, sandbox_root: Path, shared: tuple[Path, str] | None = None
                 ) -> None:
        read, self._write = os.pipe()  # both ends not inherited by later children
        # With ``shared`` (a Ray worker): detached, not our child. Ray kills a dead
        # worker's children, and the watchdog has work to do after the worker died.
        also = ["detach", str(shared[0]), shared[1]] if shared else []
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-S", os.path.abspath(__file__), token, str(sandbox_root),
                 *also],
                stdin=read, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True,
                # Never marked itself: a sweep of whatever the runner carries (a local Ray
                # started for a batch, an outer batch) must not take its cleaner too.
                env={k: v for k, v in os.environ.items() if k != MARKER_VAR},
            )
        finally:
            os.close(read)

    def done(self) -> None:
        """The batch ended and cleaned up after itself: the watchdog may go."""
        try:
            os.write(self._write, DONE)
        except OSError:
            pass  # it is gone already; nothing to tell
        finally:
            os.close(self._write)


@dataclass
class Sweep:
    """What ``sweep_dead_batches`` cleaned up."""

    batches: int = 0
    killed: list[int] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


# Every run boundary and run.finished, with the few payload fields that say which
# batch it was and where it ran: json_extract in SQLite, not a decode of each
# (a run.started's payload lists every planned key).
_BOUNDARIES = """
SELECT run_id, type,
       json_extract(payload, '$.host.hostname'), json_extract(payload, '$.host.pid'),
       json_extract(payload, '$.batch_token'), json_extract(payload, '$.sandbox_root')
FROM events WHERE task_key IS NULL
  AND type IN ('run.started', 'run.resumed', 'run.finished')
ORDER BY seq
"""


def dead_batches(rows: list[tuple[Any, ...]], hostname: str,
                 alive: Any) -> list[tuple[str, str | None]]:
    """(token, sandbox root) of every batch recorded on ``hostname`` that never recorded
    ``run.finished`` and whose process ``alive(pid)`` says is gone.

    A run.finished ends its run's latest batch; a batch followed by another start of
    its run without one was cut off (a resume refuses to start while it lives).
    """
    batches: list[list[Any]] = []  # [run_id, host, pid, token, root, finished]
    latest: dict[str, list[Any]] = {}
    for run_id, type_, host, pid, token, root in rows:
        if type_ == "run.finished":
            if run_id in latest:
                latest[run_id][5] = True
        else:
            latest[run_id] = [run_id, host, pid, token, root, False]
            batches.append(latest[run_id])
    return [
        (token, root) for _, host, pid, token, root, finished in batches
        if not finished and token and host == hostname and isinstance(pid, int)
        and not alive(pid)
    ]


def sweep_dead_batches(ledger: Any) -> Sweep:
    """Kill what dead batches of this host left running, and remove their sandboxes."""
    import socket

    from evalledger.hosts import running_pid

    def alive(pid: int) -> bool:
        return running_pid({"hostname": hostname, "pid": pid}, finished=False) is not None

    hostname = socket.gethostname()
    _, rows = ledger.query(_BOUNDARIES)
    dead = dead_batches(rows, hostname, alive)
    sweep = Sweep(batches=len(dead))
    if not dead:
        return sweep
    sweep.killed = kill_marked(*(mark(token) for token, _ in dead
                                 for mark in (batch_mark, ray_mark)), prefix=True)
    for _, root in dead:
        if root and os.path.isdir(root):
            _remove(root)
            sweep.removed.append(root)
    return sweep


if __name__ == "__main__":
    if sys.argv[3:4] == ["detach"]:
        del sys.argv[3]
        if os.fork():  # the parent leaves; the child, no one's child now, watches
            os._exit(0)
    watch(*sys.argv[1:5])
