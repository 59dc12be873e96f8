"""The command line: click commands over the ledger, executor and projections."""

import os
import sys

from . import _query, _report, _resume, _run, _verify, _view  # noqa: F401  (registers commands)
from ._errors import EXIT_INTERRUPTED
from ._main import cli as cli


def main() -> None:
    try:
        cli(prog_name="evalledger")
    except KeyboardInterrupt:  # outside a batch (a batch handles Ctrl-C itself)
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:  # `evalledger events ... | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)


__all__ = ["cli", "main"]
