"""A change to a text as a unified diff's lines, each with its kind: the one diff every
reader of a change shows (the files an agent changed, an edit in its transcript).

Pure and standard library only (``difflib``): what it is given is the agent's text, so a
line is cut past ``LONGEST_LINE`` characters and a diff past ``MOST_LINES`` lines, each
cut said.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

MOST_LINES = 400  # diff lines of one file
LONGEST_LINE = 2_000  # characters of one diff line shown (minified code, data: cut)


def diff_lines(old: Sequence[str], new: Sequence[str], *, context: int = 3,
               most: int = MOST_LINES) -> tuple[tuple[str, str], ...]:
    """``old`` to ``new`` as a unified diff's lines, each with its kind (``add``,
    ``del``, ``hunk``, ``ctx``); past ``most`` lines, one saying how many more."""
    kinds = {"+": "add", "-": "del", "@": "hunk"}
    lines = iter(difflib.unified_diff(old, new, lineterm="", n=context))
    # Its two header lines (--- and +++) are dropped by place: a removed line "-- x"
    # reads "--- x" in the diff, and is kept.
    next(lines, None)
    next(lines, None)
    shown = [(kinds.get(line[:1], "ctx"), _cut(line)) for line in lines]
    if len(shown) > most:
        shown = [*shown[:most], ("hunk", f"\u2026 {len(shown) - most} more lines")]
    return tuple(shown)


def _cut(line: str) -> str:
    """A diff line, cut past ``LONGEST_LINE`` characters with how many were left out."""
    if len(line) <= LONGEST_LINE:
        return line
    return f"{line[:LONGEST_LINE]}\u2026 [{len(line) - LONGEST_LINE:,} more characters]"
