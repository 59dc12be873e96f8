"""The task-file reference, made from the models that read task and experiment files.

``evalledger schema`` prints the JSON Schema of either file (for an editor's
completion and checks); ``reference_markdown`` renders the README's task-file
reference from the same models, field by field with its type, default and
docstring, so the two cannot say different things (a test compares the README
with it).
"""

from __future__ import annotations

import json
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ByteSize
from pydantic.fields import FieldInfo

from evalledger.ledger._fields import field_docs

from ._models import (
    TASK_ID_PATTERN,
    Budget,
    ExitCode,
    ExperimentFile,
    FileContains,
    FileExists,
    Limits,
    OutputContains,
    RayResources,
    RunCommand,
    TaskFile,
    TaskSettings,
    Variant,
)

SCHEMAS: dict[str, type[BaseModel]] = {"task": TaskFile, "experiment": ExperimentFile}
CRITERIA = (ExitCode, FileExists, FileContains, OutputContains, RunCommand)
# Every model a schema may hold in its $defs.
MODELS = (*CRITERIA, Budget, Limits, RayResources, TaskSettings, TaskFile, Variant, ExperimentFile)
BEGIN = "<!-- task-file reference: made by `evalledger schema --format markdown` -->"
END = "<!-- end of the task-file reference -->"


def json_schema(kind: str) -> str:
    """The JSON Schema of a task file (``task``) or an experiment file (``experiment``)."""
    model = SCHEMAS[kind]
    schema = model.model_json_schema()
    for part, of in [(schema, model), *((schema.get("$defs", {})[m.__name__], m)
                                       for m in MODELS if m.__name__ in schema.get("$defs", {}))]:
        docs = field_docs(of)
        fields = part.get("properties", {})
        for name, field in fields.items():
            if docs.get(name):
                # Keys sorted, as pydantic writes them: the schema reads as it always did.
                fields[name] = dict(sorted({**field, "description": docs[name]}.items()))
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def _type(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _type(args[0])
    if origin in (Union, types.UnionType):
        shown = [_type(a) for a in args if a is not type(None)]
        return " or ".join(dict.fromkeys(shown))
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin is list:
        if set(CRITERIA) & set(get_args(get_args(args[0])[0]) if get_args(args[0]) else ()):
            return "list of criteria (below)"
        return f"list of {_type(args[0])}"
    if origin is dict:
        return "mapping of text"
    if annotation is ByteSize:
        return "bytes (`2000000`, `\"50MB\"`, `\"1GiB\"`)"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {"TaskSettings": "task fields", "RayResources": "ray",
                                                 "Limits": "limits (below)"}.get(
            annotation.__name__, annotation.__name__.lower())
    return {str: "text", int: "integer", float: "number", bool: "boolean"}.get(
        annotation, str(annotation))


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None or value == [] or isinstance(value, BaseModel):
        return "-"
    if isinstance(value, list):  # the default variants: described in the meaning
        return "see meaning"
    return f"`{json.dumps(value)}`"


def _text(doc: str | None) -> str:
    """A docstring as one table cell of Markdown."""
    return " ".join((doc or "").split()).replace("``", "`").replace("|", "\\|")


def _table(model: type[BaseModel], leave_out: tuple[str, ...] = (),
           first: tuple[str, ...] = ()) -> list[str]:
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    names = [*first, *(n for n in model.model_fields if n not in first)]
    docs = field_docs(model)
    for name in names:
        field = model.model_fields[name]
        if name in leave_out:
            continue
        meaning = _text(docs.get(name))
        lines.append(f"| `{name}` | {_type(field.annotation)} | {_default(field)} | {meaning} |")
    return lines


def reference_markdown() -> str:
    """The task-file reference as Markdown (what the README shows between its markers)."""
    lines = [
        BEGIN,
        "",
        f"**Task files** (`*.yaml` / `*.yml`). The file name without its suffix is the "
        f"task id unless `task_id` says otherwise; either must match "
        f"`{TASK_ID_PATTERN}` (so `Fix-Discount.yaml` is skipped, with that reason). "
        "Unknown keys are refused.",
        "",
        *_table(TaskFile, first=("task_id",)),
        "",
        "**Success criteria** (`type` chooses; every criterion also takes `weight`, "
        "default 1):",
        "",
        "| type | keys | checks |",
        "|---|---|---|",
    ]
    for criterion in CRITERIA:
        kind = criterion.model_fields["type"].annotation
        keys = ", ".join(f"`{n}`" for n in criterion.model_fields if n not in ("type", "weight"))
        lines.append(f"| `{get_args(kind)[0]}` | {keys} | {_text(criterion.__doc__)} |")
    lines += ["", "**Budget** (`budget:`):", "", *_table(Budget), "",
              "**Limits** (`limits:`; `null` lifts one):", "", *_table(Limits), "",
              "**Ray resources** (`ray:`, with `--executor ray`):", "", *_table(RayResources),
              "",
              "**Experiment files** (`-e FILE`):", "", *_table(ExperimentFile), "",
              "**Variants** (`variants:`) take every task key above (but `task_id`) and:",
              "", *_table(Variant, leave_out=tuple(TaskFile.model_fields)), "", END]
    return "\n".join(lines) + "\n"


__all__ = ["json_schema", "reference_markdown"]
