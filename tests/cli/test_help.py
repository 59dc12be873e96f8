"""Every command documents itself: ``--help`` works and shows a runnable example.

The commands are discovered from the click group, so a command added later without
help, or without an ``Example:`` whose invocation starts with ``evalledger ``, fails
here. ``_problems`` is the check; it is itself tested against a deliberately bad
group so this file cannot pass vacuously.
"""

from __future__ import annotations

import re
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from evalledger.cli import cli

from .helpers import command_paths

# "Example:" (or "Examples:"), blank lines, then an indented invocation of the tool.
EXAMPLE = re.compile(r"^\s*Examples?:?\s*\n(?:\s*\n)*[ \t]+(evalledger [^\n]+)$", re.MULTILINE)
# The commands SPEC §8 and the README name that exist today; new ones are found too.
KNOWN = {"run", "resume", "report", "verify"}


COMMANDS = command_paths(cli)


def _help(group: click.Group, path: tuple[str, ...]) -> click.testing.Result:
    return CliRunner().invoke(group, [*path, "--help"], prog_name="evalledger",
                              catch_exceptions=False)


def _problems(group: click.Group, path: tuple[str, ...]) -> list[str]:
    """What is wrong with one command's help; empty when it is fine."""
    result = _help(group, path)
    if result.exit_code != 0:
        return [f"--help exited {result.exit_code}"]
    text = result.output
    problems = []
    # The description sits between the usage line and the options.
    description = text.split("\n\n", 1)[1].split("Options:")[0] if "\n\n" in text else ""
    if not description.strip():
        problems.append("no help text")
    examples = EXAMPLE.findall(description)
    if not examples:
        problems.append("no 'Example:' followed by an 'evalledger ...' invocation")
    elif path and not any(path[-1] in example.split() for example in examples):
        problems.append(f"no example invokes {path[-1]!r}: {examples}")
    return problems


def test_commands_are_discovered() -> None:
    names = {path[0] for path in COMMANDS}
    assert names >= KNOWN


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_command_help_has_an_example(path: tuple[str, ...]) -> None:
    assert _problems(cli, path) == []


def test_group_help_has_an_example_and_lists_every_command() -> None:
    assert _problems(cli, ()) == []
    text = _help(cli, ()).output
    listed = set(re.findall(r"^  ([a-z][a-z-]*)\s", text.split("Commands:", 1)[1], re.MULTILINE))
    assert listed == set(cli.list_commands(click.Context(cli)))


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_console_help_in_a_real_process() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "evalledger.cli", "--help"], capture_output=True, text=True,
        timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: evalledger ")
    for name in cli.list_commands(click.Context(cli)):
        assert re.search(rf"^  {re.escape(name)}\s", done.stdout, re.MULTILINE), name


def test_the_check_rejects_commands_without_help_or_example() -> None:
    @click.group()
    def bad() -> None:
        """A group.

        Example:

            evalledger bad thing
        """

    @bad.command()
    def silent() -> None:
        pass

    @bad.command()
    def vague() -> None:
        """Does a thing, but shows no example."""

    @bad.command()
    def elsewhere() -> None:
        """Shows an example of another tool.

        Example:

            othertool elsewhere
        """

    @bad.command()
    def unrelated() -> None:
        """Shows an example of another command.

        Example:

            evalledger vague
        """

    @bad.command()
    def good() -> None:
        """Does a thing.

        Example:

            evalledger good --now
        """

    assert _problems(bad, ("silent",)) == [
        "no help text", "no 'Example:' followed by an 'evalledger ...' invocation"
    ]
    assert _problems(bad, ("vague",)) == [
        "no 'Example:' followed by an 'evalledger ...' invocation"
    ]
    assert _problems(bad, ("elsewhere",)) == [
        "no 'Example:' followed by an 'evalledger ...' invocation"
    ]
    assert _problems(bad, ("unrelated",))[0].startswith("no example invokes 'unrelated'")
    assert _problems(bad, ("good",)) == []
    assert _problems(bad, ()) == []
