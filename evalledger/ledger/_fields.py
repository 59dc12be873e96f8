"""The field tables of docs/events.md, made from the event models.

A payload field is declared once, in its model in ``_events``: its name, its type, its
default, and the docstring under it, which is what the field means in the docs'
words. ``field_table`` renders a model as the Markdown table docs/events.md shows
under a ``<!-- fields: ModelName -->`` marker; ``rewrite`` puts every marked table
back in step, and a test fails while the docs differ from it. To refresh the docs
after changing a model::

    python -m evalledger.ledger._fields docs/events.md

The docstrings are read from the source here, when the docs are made, and not by
pydantic at import (``use_attribute_docstrings``): that measured 40 ms more to import
the event models, which every command that decodes an event pays. Nothing at run
time imports this module.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
import sys
import types
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ._events import ENVELOPE_FIELDS, _Event

MARKER = re.compile(r"^<!-- fields: (\w+) -->$")

_NAMES = {str: "text", int: "integer", float: "number", bool: "boolean"}
_PLURALS = {"text": "text", "integer": "integers", "number": "numbers",
            "boolean": "booleans", "object": "objects", "[text, object]": "[text, object] pairs"}


@functools.cache
def _docstrings(name: str) -> dict[str, dict[str, str]]:
    """Class name -> field name -> the docstring under it, for every class of the module
    ``name`` (its source as its loader gives it: a zip import too; none: no docstrings)."""
    try:
        tree = ast.parse(inspect.getsource(sys.modules[name]))
    except (OSError, TypeError):
        return {}
    found: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        docs = found[node.name] = {}
        for field, after in zip(node.body, node.body[1:], strict=False):
            if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[field.target.id] = inspect.cleandoc(after.value.value)
    return found


def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """Each field's docstring, the nearest class in the model's MRO that has one."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if cls.__module__ in sys.modules and not cls.__module__.startswith(
                ("pydantic", "builtins")):
            docs.update(_docstrings(cls.__module__).get(cls.__name__, {}))
    return docs


def payload_fields(model: type[BaseModel]) -> list[str]:
    """The fields a payload holds, as declared: an event's, all but the envelope's and
    ``type``; a nested object's, all."""
    if not issubclass(model, _Event):
        return list(model.model_fields)
    return [n for n in model.model_fields if n not in ENVELOPE_FIELDS and n != "type"]


def type_name(annotation: Any) -> str:
    """How the docs name a field's type: JSON's words (text, integer, object...)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return type_name(args[0])
    if origin in (Union, types.UnionType):
        shown = " or ".join(dict.fromkeys(type_name(a) for a in args if a is not type(None)))
        return f"{shown} or null" if type(None) in args else shown
    if origin is Literal:
        return " or ".join(dict.fromkeys(type_name(type(a)) for a in args))
    if origin is list:
        return f"list of {_PLURALS[type_name(args[0])]}"
    if origin is tuple:
        return "[" + ", ".join(type_name(a) for a in args) + "]"
    if origin is dict or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return "object"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return type_name(str) if issubclass(annotation, str) else "value"
    return _NAMES[annotation]


def _type_cell(field: FieldInfo) -> str:
    name = type_name(field.annotation)
    if field.exclude_if is not None and field.default is None:
        # Left out of the payload when None: an object, or nothing at all.
        return name.removesuffix(" or null") + ", left out when absent"
    return name


def _cell(text: str) -> str:
    """A docstring as one Markdown table cell: one line, ``code`` as `code`."""
    return " ".join(text.split()).replace("``", "`").replace("|", "\\|")


def field_table(model: type[BaseModel]) -> list[str]:
    """The model's payload fields as a Markdown table: field, type, and what it means
    (the meaning column only when some field has a docstring)."""
    docs = field_docs(model)
    names = payload_fields(model)
    if not any(n in docs for n in names):
        return ["| field | type |", "|---|---|",
                *(f"| `{n}` | {_type_cell(model.model_fields[n])} |" for n in names)]
    missing = [n for n in names if n not in docs]
    if missing:
        raise ValueError(f"{model.__name__}: no docstring under {', '.join(missing)}")
    return ["| field | type | meaning |", "|---|---|---|",
            *(f"| `{n}` | {_type_cell(model.model_fields[n])} | {_cell(docs[n])} |"
              for n in names)]


def documented_models() -> dict[str, type[BaseModel]]:
    """Every model docs/events.md tables, by class name: the event types and the nested
    objects their payloads hold."""
    from ._events import EVENT_TYPES, CriterionResult, Evidence, Fingerprint, RefusedGrade
    from ._tokens import TokenCounts

    models: list[type[BaseModel]] = [*EVENT_TYPES.values(), TokenCounts, CriterionResult,
                                     Fingerprint, RefusedGrade, Evidence]
    return {m.__name__: m for m in models}


def rewrite(text: str) -> str:
    """``text`` with the table after each ``<!-- fields: Model -->`` marker made anew.

    Raises:
        KeyError: a marker names a model that is not documented.
    """
    models = documented_models()
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        match = MARKER.match(line)
        if match is None:
            continue
        while i < len(lines) and not lines[i].strip():
            out.append(lines[i])
            i += 1
        while i < len(lines) and lines[i].startswith("|"):
            i += 1  # the table as it was
        out += field_table(models[match[1]])
    return "\n".join(out)


def main(argv: list[str]) -> int:
    """Rewrite the field tables of the files named (docs/events.md) in place."""
    for name in argv:
        path = Path(name)
        text = path.read_text(encoding="utf-8")
        made = rewrite(text)
        if made != text:
            path.write_text(made, encoding="utf-8")
            print(f"{name}: field tables rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
