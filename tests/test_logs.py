"""Where evalledger's log records go (``evalledger._logs``): nowhere in a library, to
stderr in the CLI, whichever module is imported first."""

from __future__ import annotations

import subprocess
import sys

import pytest

# The executor's logger warns after the app set the handler up; the CLI may say it is
# running only after that (a module imported early), and is heard all the same.
_SCRIPT = """
import logging, sys
import evalledger.app._callbacks
import evalledger._logs
evalledger._logs.shown = sys.argv[1] == "cli"
logging.getLogger("evalledger.executor").warning("could not keep the sandbox of k")
logging.getLogger("evalledger.executor").info("said only where asked")
"""


@pytest.mark.parametrize(("mode", "printed"), [
    ("library", ""), ("cli", "could not keep the sandbox of k\n")])
def test_a_warning_reaches_stderr_in_the_cli_only(mode: str, printed: str) -> None:
    done = subprocess.run([sys.executable, "-c", _SCRIPT, mode], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == printed
