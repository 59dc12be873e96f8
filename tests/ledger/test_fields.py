"""docs/events.md's field tables against the event models: made from them, field by field
(name, type, the docstring under it), so a field changed in a model and not in the docs
fails here. ``python -m evalledger.ledger._fields docs/events.md`` refreshes them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

from evalledger.ledger import EVENT_TYPES
from evalledger.ledger._fields import (
    MARKER,
    documented_models,
    field_docs,
    field_table,
    payload_fields,
    rewrite,
)

ROOT = Path(__file__).resolve().parents[2]
EVENTS_MD = ROOT / "docs" / "events.md"


def test_the_field_tables_of_events_md_are_made_from_the_models() -> None:
    text = EVENTS_MD.read_text(encoding="utf-8")
    made = rewrite(text)
    differing = [f"docs: {a}\nmade: {b}" for a, b in
                 zip(text.split("\n"), made.split("\n"), strict=False) if a != b]
    assert made == text, ("docs/events.md differs from the models; run "
                          "`python -m evalledger.ledger._fields docs/events.md`\n"
                          + "\n".join(differing[:3]))


def test_every_event_type_and_nested_object_has_its_table_in_its_section() -> None:
    text = EVENTS_MD.read_text(encoding="utf-8")
    marked: dict[str, str] = {}
    section = ""
    for line in text.split("\n"):
        if line.startswith("## "):
            section = line[3:].strip("`")
        elif match := MARKER.match(line):
            marked[match[1]] = section
    assert set(marked) == set(documented_models())
    for type_, model in EVENT_TYPES.items():
        assert marked[model.__name__] == type_, f"{model.__name__}'s table is not under {type_}"


def test_every_payload_field_says_what_it_means() -> None:
    for name, model in documented_models().items():
        if name != "TokenCounts":  # four counts, named by their names
            assert set(payload_fields(model)) <= set(field_docs(model)), name


class _Changed(BaseModel):
    count: int = 0
    """How many."""
    label: str | None = None
    """Its label, or null: ``none`` | ``some``."""


def test_a_model_changed_after_the_docs_makes_a_different_table() -> None:
    """The check can fail: a table made from the model, not copied once."""
    assert field_table(_Changed) == [
        "| field | type | meaning |", "|---|---|---|",
        "| `count` | integer | How many. |",
        "| `label` | text or null | Its label, or null: `none` \\| `some`. |",
    ]
    stale = "<!-- fields: RunFinished -->\n\n| field | type | meaning |\n|---|---|---|\n" \
            "| `status` | text | The run's status. |\n\nAfter."
    made = rewrite(stale)
    assert made != stale and made.endswith("\n\nAfter.")
    assert re.search(r"^\| `status` \| text \| `completed`, ", made, re.MULTILINE)


def test_the_module_rewrites_a_stale_file_in_place(tmp_path: Path) -> None:
    stale = tmp_path / "events.md"
    stale.write_text(EVENTS_MD.read_text(encoding="utf-8").replace(
        "| `reason` | text | Why it could not be used", "| `reason` | text | Why not"),
        encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "evalledger.ledger._fields", str(stale)],
                          capture_output=True, text=True, check=True)
    assert "field tables rewritten" in done.stdout
    assert stale.read_text(encoding="utf-8") == EVENTS_MD.read_text(encoding="utf-8")
