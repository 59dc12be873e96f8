"""The command line: click commands over the ledger, executor and projections."""

from . import _query, _report, _resume, _run, _verify  # noqa: F401  (registers commands)
from ._main import cli as cli


def main() -> None:
    cli(prog_name="evalledger")


__all__ = ["cli", "main"]
