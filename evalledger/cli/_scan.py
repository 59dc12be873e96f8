"""``evalledger scan``: rules over a run's transcripts and kept workspaces
(``evalledger.app._scan``); print each finding with its evidence."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from evalledger._text import visible

from ._errors import EXIT_TASKS_FAILED
from ._main import Settings, pass_settings


@click.command()
@click.argument("run")
@click.option("--rules", type=click.Path(dir_okay=False, path_type=Path),
              help="A YAML file of rules (`rules: [{name, why, transcript: REGEX | workspace: "
                   "[GLOB...] | reads: [GLOB...]}]`; `builtin: true` keeps the built-in ones "
                   "too).")
@click.option("--only", multiple=True, metavar="KEY_OR_GLOB",
              help="Scan only these task keys or ids (globs too). Repeatable.")
@pass_settings
def scan(settings: Settings, run: str, rules: Path | None, only: tuple[str, ...]) -> None:
    """Scan a run's attempts for reward hacks; each finding is appended as a flag.

    The built-in rules: criteria-read (the agent named its own task file or criteria),
    git-history (it looked into git history), network (it tried to reach the network),
    tests-edited (a test file of its workdir was changed or deleted), grader-shadowed (it
    left a module graders import), exit-patched (it replaced sys.exit and the like),
    folder-read (its processes opened files of its task folder). A flag changes no
    verdict; `show`, run.json and the `task_flags` view list them, and `diff --fail-on
    flagged` gates on them. Scanning again with the same rules appends nothing.
    Exit code: 0, or 1 when some attempt was flagged.

    Example:

        evalledger scan latest
    """
    from evalledger.app import scan as scan_run

    outcome = scan_run(settings.ledger_path, run, rules, only)
    for flag in outcome.flags:
        click.echo(f"{visible(flag.task_key)} (attempt {flag.attempt}): {flag.rule}, "
                   f"{flag.matches} match(es)")
        for evidence in flag.evidence:
            where = f"seq {evidence.seq}" if evidence.seq is not None else "file"
            click.echo(f"  {where}: {visible(evidence.excerpt)}")
    for line in outcome.unchecked:
        click.echo(f"unchecked {visible(line)}", err=True)
    flagged = len({(f.task_key, f.attempt) for f in outcome.flags})
    click.echo(f"scanned {outcome.scanned} attempt(s) of run {outcome.run_id}: {flagged} "
               f"flagged, {outcome.added} new flag(s) recorded")
    if outcome.flags:
        sys.exit(EXIT_TASKS_FAILED)
