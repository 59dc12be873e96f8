"""Syntax colour for a diff a page shows, by its file's name.

Pygments (already here: rich depends on it) lexes the diff's kept, added and removed
lines as one text, so a string or a comment spanning lines keeps its colour. Each token
becomes a span whose class comes from a fixed table (``hl-k`` a keyword, ``hl-s`` a
string, ...), never from the input, and every character is escaped after ``visible``
has spelled out control characters: the same safety as the rest of a transcript.

The file is the agent's, so is its name, and lexers are regular expressions: some of
Pygments' hundreds take exponential time on a line of a dozen brackets (a ``.tnt``
file), and common ones quadratic time on a long unclosed comment (HTML's ``<!--``). So
only the lexers of common languages are used (``LANGUAGES``), and a page colours code
for a ``Budget`` of time at most: checked between tokens (each one regular-expression
step), once it is spent the rest of the page's diffs are plain. A line longer than
``LONGEST`` leaves its diff plain too, as does a file of another language, or a lexer
that did not give the text back as it was. Loaded on first use: start-up matters.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any

from markupsafe import Markup, escape

from evalledger._text import visible

# Past this many characters a diff is shown plain: lexing it would cost more than it shows.
MOST_CHARS = 200_000
# A line longer than this (minified code, data) leaves the diff plain.
LONGEST = 1_000
# The languages coloured, by their Pygments lexer's first alias.
LANGUAGES = frozenset({
    "bash", "c", "cmake", "cpp", "csharp", "css", "docker", "go", "html", "ini", "java",
    "javascript", "json", "jsx", "kotlin", "make", "markdown", "php", "python", "ruby",
    "rust", "scala", "scss", "swift", "toml", "tsx", "typescript", "xml", "yaml"})
_CODE = ("add", "del", "ctx")  # a diff's line kinds that hold code (not a hunk header)
# What a page (the app's) and a report may spend colouring code, in seconds of the
# rendering thread's CPU: wall time would count a busy machine's preemption too (a page
# rendered plain under two copies of the suite).
PAGE_SECONDS = 0.1
REPORT_SECONDS = 1.0


@dataclass
class Budget:
    """CPU time one page may spend lexing code, shared by every diff on it (a lexer's
    loading and compiling its patterns is not counted: that is once a process)."""

    seconds: float = PAGE_SECONDS
    used: float = 0.0

    @property
    def spent(self) -> bool:
        return self.used > self.seconds


def highlighted(diff: Sequence[tuple[str, str]], path: str | None,
                budget: Budget | None = None) -> list[tuple[str, Markup]]:
    """``diff`` (``diff_lines``' kinds and lines) as HTML, each code line's text in spans
    of its tokens' classes, its ``+``/``-``/space marker kept; plain once ``budget`` (a
    fresh ``PAGE_SECONDS`` without one) is spent."""
    budget = budget or Budget()
    plain = [(kind, escape(visible(line))) for kind, line in diff]
    code = [i for i, (kind, line) in enumerate(diff) if kind in _CODE and line]
    text = "\n".join(diff[i][1][1:] for i in code)
    lexer = _lexer(PurePosixPath(path).name) if path and code else None
    if lexer is None or len(text) > MOST_CHARS or budget.spent or any(
            len(diff[i][1]) > LONGEST for i in code):
        return plain
    lines = _runs(lexer, text, budget)
    if lines is None or len(lines) != len(code):
        return plain  # spent, or the lexer changed the text: shown as it is
    for i, runs in zip(code, lines, strict=True):
        kind, line = diff[i]
        plain[i] = (kind, Markup(str(escape(line[0])) + "".join(
            _span(cls, str(escape(visible(part)))) for cls, part in runs)))
    return plain


def _runs(lexer: Any, text: str, budget: Budget) -> list[list[tuple[str, str]]] | None:
    """``text``'s lines, each as its runs of one class; None once ``budget`` is spent
    (the diffs after are plain too), or where the lexer changed the text (a BOM, a line
    end)."""
    lines: list[list[tuple[str, str]]] = [[]]
    given: list[str] = []
    began = time.thread_time()
    for n_token, (token, value) in enumerate(lexer.get_tokens(text)):
        if n_token % 8 == 7 and budget.used + time.thread_time() - began > budget.seconds:
            budget.used = budget.seconds + 1
            return None
        given.append(value)
        cls = _class(token)
        for n, part in enumerate(value.split("\n")):
            if n:
                lines.append([])
            runs = lines[-1]
            if runs and runs[-1][0] == cls:  # a string's quotes and body: one span
                runs[-1] = (cls, runs[-1][1] + part)
            elif part:
                runs.append((cls, part))
    budget.used += time.thread_time() - began
    return lines if "".join(given) == text else None


def _span(cls: str, shown: str) -> str:
    return f'<span class="hl-{cls}">{shown}</span>' if cls else shown


@lru_cache(maxsize=256)
def _lexer(name: str) -> Any:
    from pygments.lexers import get_lexer_for_filename
    from pygments.util import ClassNotFound

    try:
        lexer = get_lexer_for_filename(name, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return None
    return lexer if lexer.aliases and lexer.aliases[0] in LANGUAGES else None


@lru_cache(maxsize=512)
def _class(token: Any) -> str:
    """A token type's class: the kinds a reader tells apart, and none for the rest."""
    from pygments import token as t

    for kind, cls in ((t.Comment, "c"), (t.String, "s"), (t.Number, "m"),
                      (t.Keyword, "k"), (t.Name.Function, "nf"), (t.Name.Class, "nf"),
                      (t.Name.Builtin, "nb"), (t.Name.Decorator, "nb")):
        if token in kind:
            return cls
    return ""
