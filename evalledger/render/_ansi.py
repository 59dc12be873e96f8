"""ANSI colour in a task's output, shown as colour in HTML, safely.

A terminal program colours its output with SGR escape sequences (``ESC [ 31 m``). Here
each SGR sequence becomes a state (foreground, background, bold, dim, italic,
underline) and the text between them a ``<span>`` whose classes say that state: class
names come from a fixed table, never from the input, and every character of the text
is HTML-escaped after ``visible`` has spelled out every other control character (an
OSC title, a cursor move, a lone ESC: shown as the characters they are, never acted
on). 256-colour and true-colour codes are shown as the nearest of the 16 basic colours:
the page's style sheet is the app's own (no inline style under its
Content-Security-Policy).
"""

from __future__ import annotations

import re

from markupsafe import Markup, escape

from evalledger._text import visible

# ESC [ params m: a Select Graphic Rendition. Any other sequence is left to ``visible``.
_SGR = re.compile(r"\x1b\[([0-9;:]{0,64})m")
# The 16 basic colours as xterm draws them: what 256 and true colours are mapped onto.
_BASIC = [(0, 0, 0), (205, 0, 0), (0, 205, 0), (205, 205, 0), (0, 0, 238), (205, 0, 205),
          (0, 205, 205), (229, 229, 229), (127, 127, 127), (255, 0, 0), (0, 255, 0),
          (255, 255, 0), (92, 92, 255), (255, 0, 255), (0, 255, 255), (255, 255, 255)]
_FLAGS = {1: "b", 2: "d", 3: "i", 4: "u"}
_FLAGS_OFF = {22: ("b", "d"), 23: ("i",), 24: ("u",)}


def ansi_html(text: str, *, newlines: bool = False, mark: str = "") -> Markup:
    """``text`` as HTML: coloured spans for its SGR sequences, everything escaped; each
    ``mark`` in it (a search's text) inside ``<mark>`` (within one colour's run)."""
    if "\x1b[" not in text:  # nearly every line: as the plain filter would show it
        return Markup(_marked(visible(text, newlines=newlines), mark))
    out: list[str] = []
    state = _State()
    start = 0
    for match in _SGR.finditer(text):
        out.append(state.wrap(text[start:match.start()], newlines, mark))
        state.apply(match.group(1))
        start = match.end()
    out.append(state.wrap(text[start:], newlines, mark))
    return Markup("".join(out))


def _marked(shown: str, mark: str) -> str:
    """``shown`` escaped, each ``mark`` in it (whatever its case: as the search found it)
    wrapped in ``<mark>``: split before escaping, so a mark never lands inside an
    entity."""
    if not mark:
        return str(escape(shown))
    # A group in the pattern keeps each match, as written, at the odd places.
    parts = re.split(f"({re.escape(mark)})", shown, flags=re.IGNORECASE)
    return "".join(f"<mark>{escape(part)}</mark>" if i % 2 else str(escape(part))
                   for i, part in enumerate(parts))


class _State:
    __slots__ = ("bg", "fg", "flags")

    def __init__(self) -> None:
        self.fg: int | None = None
        self.bg: int | None = None
        self.flags: set[str] = set()

    def wrap(self, chunk: str, newlines: bool, mark: str = "") -> str:
        if not chunk:
            return ""
        shown = _marked(visible(chunk, newlines=newlines), mark)
        classes = [f"a-{flag}" for flag in sorted(self.flags)]
        if self.fg is not None:
            classes.append(f"a-fg{self.fg}")
        if self.bg is not None:
            classes.append(f"a-bg{self.bg}")
        return f'<span class="{" ".join(classes)}">{shown}</span>' if classes else shown

    def apply(self, params: str) -> None:
        codes = [int(p) if p.isdigit() else 0 for p in re.split("[;:]", params)]
        i = 0
        while i < len(codes):
            code = codes[i]
            i += 1
            if code == 0:
                self.fg, self.bg, self.flags = None, None, set()
            elif code in _FLAGS:
                self.flags.add(_FLAGS[code])
            elif code in _FLAGS_OFF:
                self.flags.difference_update(_FLAGS_OFF[code])
            elif 30 <= code <= 37:
                self.fg = code - 30
            elif 90 <= code <= 97:
                self.fg = code - 90 + 8
            elif code == 39:
                self.fg = None
            elif 40 <= code <= 47:
                self.bg = code - 40
            elif 100 <= code <= 107:
                self.bg = code - 100 + 8
            elif code == 49:
                self.bg = None
            elif code in (38, 48):
                colour, i = _extended(codes, i)
                if code == 38:
                    self.fg = colour
                else:
                    self.bg = colour


def _extended(codes: list[int], i: int) -> tuple[int | None, int]:
    """A 256-colour (``5;n``) or true-colour (``2;r;g;b``) code from ``codes[i]`` on, as
    one of the 16 basic colours; and where the codes after it start."""
    if i < len(codes) and codes[i] == 5 and i + 1 < len(codes):
        return _of_256(codes[i + 1]), i + 2
    if i < len(codes) and codes[i] == 2 and i + 3 < len(codes):
        return _nearest(tuple(min(255, c) for c in codes[i + 1:i + 4])), i + 4
    return None, len(codes)  # malformed: the rest of the sequence means nothing


def _of_256(n: int) -> int | None:
    if n < 16:
        return n
    if n < 232:
        n -= 16
        steps = (0, 95, 135, 175, 215, 255)
        return _nearest((steps[n // 36], steps[n // 6 % 6], steps[n % 6]))
    if n < 256:
        grey = 8 + (n - 232) * 10
        return _nearest((grey, grey, grey))
    return None


def _nearest(rgb: tuple[int, ...]) -> int:
    return min(range(16), key=lambda k: sum((a - b) ** 2 for a, b in zip(_BASIC[k], rgb,
                                                                       strict=True)))
