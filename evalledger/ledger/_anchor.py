"""Anchors: a point of a ledger's history kept outside the ledger.

A hash chain shows an edit of one row, but a chain cut short, or rewritten from
some row on, is a valid chain on its own. An anchor (the ledger's id and the seq
and hash of one row), kept somewhere an attacker of the file cannot reach (a git
commit, a CI artifact, a ``run.json`` sent elsewhere), pins the prefix up to that
row: ``verify --anchor`` fails when the ledger no longer holds it.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._errors import BadAnchor


class Anchor(BaseModel):
    """A point of a ledger's history kept somewhere else: which ledger, and the hash of
    the row at ``seq``. A ledger that still holds that exact prefix has that row."""

    model_config = ConfigDict(frozen=True)

    ledger_id: str
    # A seq SQLite can hold (a larger one from a hand-made file was a traceback).
    seq: int = Field(ge=0, lt=2**63)
    hash: str
    ts: str | None = None

    @classmethod
    def load(cls, path: str | Path) -> Anchor:
        """An anchor from a checkpoint file or a ``run.json`` (its ``anchor``).

        Raises:
            BadAnchor: the file cannot be read or holds no anchor (a ValueError too).
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise BadAnchor(f"{path}: not an anchor file: {e}") from e
        if isinstance(data, dict) and isinstance(data.get("anchor"), dict):
            data = data["anchor"]  # a run.json
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise BadAnchor(f"{path}: not an anchor (a checkpoint or a run.json with one): "
                             f"{where}: {first['msg']}") from e
