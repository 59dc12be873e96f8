"""``evalledger regrade``: grade a finished run's attempts again from their kept
workspaces (``evalledger.app._regrade``), print each new verdict and the grade set."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from evalledger._text import visible

from ._errors import EXIT_TASKS_FAILED
from ._main import Settings, pass_settings


@click.command()
@click.argument("run")
@click.option("--criteria", type=click.Path(dir_okay=False, path_type=Path),
              help="A YAML file of criteria (a list, or success_criteria: [...]) to grade "
                   "every attempt by.")
@click.option("--from-tasks", type=click.Path(path_type=Path),
              help="Task files or a folder of them: each attempt graded by its task's "
                   "criteria there now.")
@click.option("--recorded", is_flag=True,
              help="Grade by the criteria each attempt recorded when it started, not by the "
                   "run's task files as they are now.")
@click.option("--only", multiple=True, metavar="KEY_OR_GLOB",
              help="Grade only these task keys or ids (globs too); the grade set is then not "
                   "complete. Repeatable.")
@click.option("--name", help="The grade set's name (default: regrade-N).")
@click.option("-j", "--max-parallel", type=click.IntRange(min=1), default=4, show_default=True,
              help="Attempts graded at once.")
@pass_settings
def regrade(settings: Settings, run: str, criteria: Path | None, from_tasks: Path | None,
            recorded: bool, only: tuple[str, ...], name: str | None, max_parallel: int) -> None:
    """Grade a finished run again from its kept workspaces; nothing is re-run.

    Each counted attempt (a task key's latest) is graded in a copy of its workspace,
    confined as its command was, by its task's criteria in the run's task files as they
    are now (or --criteria, --from-tasks, or --recorded: as the attempt recorded them).
    Each verdict is appended as a `task.graded` of a grade set; the run's own verdicts
    stay. Readers show the latest complete grade set (`--grades`
    picks another). An attempt whose workspace is gone or changed is refused, named.
    Exit code: 0, or 1 when some attempt was refused.

    Example:

        evalledger regrade latest --criteria stricter.yaml --name strict
    """
    from evalledger.app import RegradeRequest, grade_again

    def said(event: object, was: object) -> None:
        status = event.final_status.value  # type: ignore[attr-defined]
        change = "" if status == was.value else f"  (was {was.value})"  # type: ignore[attr-defined]
        click.echo(f"{status:<21} {visible(event.task_key)}{change}")  # type: ignore[attr-defined]

    request = RegradeRequest(name=name, criteria=criteria, from_tasks=from_tasks, only=only,
                             recorded=recorded, max_parallel=max_parallel)
    outcome = grade_again(settings.ledger_path, run, request, on_graded=said)
    for refused in outcome.refused:
        click.echo(f"refused {visible(refused.task_key)}: {visible(refused.reason)}", err=True)
    if outcome.reports:
        click.echo("reports: " + " ".join(str(path) for path in outcome.reports.values()))
    if outcome.reports_error:
        click.echo(f"warning: the run's reports were not written again: "
                   f"{visible(outcome.reports_error)}", err=True)
    kind = "complete" if outcome.complete else "partial"
    click.echo(f"grade set {outcome.grades} of run {outcome.run_id} ({kind}): "
               f"{len(outcome.graded)} graded, {len(outcome.refused)} refused")
    if outcome.refused:
        sys.exit(EXIT_TASKS_FAILED)
