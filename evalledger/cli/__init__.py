"""The command line: click commands over the ledger, executor and projections."""

from . import _verify  # noqa: F401  (registers the command on the group)
from ._main import cli as cli


def main() -> None:
    cli(prog_name="evalledger")


__all__ = ["cli", "main"]
