"""``evalledger schema``: the JSON Schema of task and experiment files, or the reference."""

from __future__ import annotations

import click


@click.command()
@click.argument("kind", type=click.Choice(["task", "experiment"]), default="task")
@click.option("--format", "format_", type=click.Choice(["json", "markdown"]), default="json",
              show_default=True,
              help="json: a JSON Schema for editors; markdown: the task-file reference of the "
                   "README (both files).")
def schema(kind: str, format_: str) -> None:
    """Print the JSON Schema of task files (KIND task) or experiment files (experiment).

    Point an editor's YAML support at it for completion and checks, e.g. a first
    line `# yaml-language-server: $schema=task.schema.json` in a task file.

    Example:

        evalledger schema task > task.schema.json
    """
    from evalledger.suite import json_schema, reference_markdown

    click.echo(reference_markdown() if format_ == "markdown" else json_schema(kind), nl=False)
