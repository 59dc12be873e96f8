"""``evalledger.hosts``: who recorded a run, and whether that process still lives."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from evalledger.hosts import host_info, run_ended, running_pid


def test_host_info_names_this_process() -> None:
    info = host_info()
    assert info["pid"] == os.getpid()
    assert info["hostname"] == socket.gethostname()
    assert info["python"] == sys.version.split()[0]
    for key in ("platform", "evalledger", "cwd", "user"):
        assert key in info


def test_running_pid_names_a_process_still_running_the_run() -> None:
    here = socket.gethostname()
    alive = os.getppid()  # pytest's parent: certainly alive, certainly not us
    assert running_pid({"hostname": here, "pid": alive}, finished=False) == alive
    # Finished, elsewhere, ourselves, or not a pid at all: nobody else is running it.
    assert running_pid({"hostname": here, "pid": alive}, finished=True) is None
    assert running_pid({"hostname": here + "-other", "pid": alive}, finished=False) is None
    assert running_pid({"hostname": here, "pid": os.getpid()}, finished=False) is None
    for pid in (0, -1, True, "123", 2**70):
        assert running_pid({"hostname": here, "pid": pid}, finished=False) is None
    assert running_pid({}, finished=False) is None


def test_a_process_that_is_gone_is_not_running() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    here = socket.gethostname()
    assert running_pid({"hostname": here, "pid": gone.pid}, finished=False) is None
    # Recorded here by a process that is gone: a crash, so the run has ended.
    assert run_ended({"hostname": here, "pid": gone.pid}, finished=False)


def test_run_ended() -> None:
    here = socket.gethostname()
    assert run_ended({}, finished=True)
    assert not run_ended({"hostname": here, "pid": os.getppid()}, finished=False)
    # On another host nobody here can tell: only run.finished ends it.
    assert not run_ended({"hostname": here + "-other", "pid": 1}, finished=False)
