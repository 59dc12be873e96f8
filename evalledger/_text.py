"""Showing text a task produced without letting it act on the reader's screen.

Everything a task printed, and every criterion detail or error message derived
from it, is untrusted. The ledger keeps it raw; whatever shows it to a person
(a terminal, Markdown, HTML) passes it through ``visible`` first, so an ANSI or
OSC escape sequence (clear the screen, set the title, recolour everything after
it) is shown as the characters it is made of, never interpreted. A name the ledger
keeps (a run id, a task key's folders) may hold none of ``UNSAFE_IN_NAMES``, whoever
brings it: the legacy importer and ``import-events`` refuse the same characters.
"""

from __future__ import annotations

import re

# Characters no name (a run id, one folder of a task key) may hold, whether an import
# or a file brings it: C0 and C1 controls and DEL (a newline breaks the ledger's
# one-line envelope, ESC starts a terminal escape), the Unicode line and paragraph
# separators, the bidirectional overrides and isolates (they make a name display as
# another), and lone surrogates (a name that is not UTF-8, which text columns cannot
# hold).
UNSAFE_IN_NAMES = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                             "\ud800-\udfff]")

# C0 controls, DEL and the C1 controls (U+0080..U+009F: U+009B is a one-character
# CSI on some terminals), each spelled as Python would inside a string literal.
_CONTROLS = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]
_ESCAPED = {code: f"\\x{code:02x}" for code in _CONTROLS}
# Bidirectional overrides can make a line read differently from what it holds.
_ESCAPED.update({code: f"\\u{code:04x}" for code in (*range(0x202A, 0x202F),
                                                     *range(0x2066, 0x206A))})
_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}


def _table(keep: str) -> dict[int, str]:
    table = {**_ESCAPED, **_NAMED}
    for char in keep:
        table.pop(ord(char), None)
    return table


_ONE_LINE = _table("")
_WITH_TABS = _table("\t")
_MULTI_LINE = _table("\t\n")


def visible(text: str, *, tabs: bool = True, newlines: bool = False) -> str:
    """``text`` with every control character (but tabs and, with ``newlines``, line
    breaks) spelled out as an escape: ``"\\x1b[2J"`` shows as ``\\x1b[2J``."""
    if text.isprintable():  # the common case, checked in C
        return text
    table = _MULTI_LINE if newlines else _WITH_TABS if tabs else _ONE_LINE
    return text.translate(table)




def money(value: float | None, complete: bool = True) -> str:
    """A cost for people: rounded (JSON keeps it exact), a floor marked as one (``≥``),
    and ``unknown`` when nothing of it had a price: never ``$0`` for unknown."""
    if value is None or (not complete and not value):
        return "unknown"
    text = f"${value:,.4f}" if value < 100 else f"${value:,.2f}"
    return text if complete else f"\u2265 {text}"


__all__ = ["UNSAFE_IN_NAMES", "money", "visible"]
