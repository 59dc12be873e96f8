"""The README's audit queries, read from the README as a person copies them."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def audit_queries() -> dict[str, str]:
    """The README's audit queries by name (the words before the colon of each comment)."""
    text = README.read_text(encoding="utf-8")
    block = text[text.index("-- cost per model"):]
    block = block[:block.index("```")]
    queries: dict[str, str] = {}
    for chunk in re.split(r"^-- ", block, flags=re.M)[1:]:
        name, _, rest = chunk.partition(":")
        queries[name.strip()] = rest.split("\n", 1)[1].strip()
    return queries


QUERIES = audit_queries()
