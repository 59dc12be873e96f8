"""``_highlight``: a diff's code in its language's colours, as safely as the rest of a
page shows what an agent wrote, and within the time a page has."""

from __future__ import annotations

import html
import re
import time

from hypothesis import given
from hypothesis import strategies as st

from evalledger._diffs import diff_lines
from evalledger._text import visible
from evalledger.render._highlight import LONGEST, Budget, highlighted

TAGS = re.compile(r'<span class="hl-(?:k|s|c|m|nf|nb)">|</span>')


def _text(shown: object) -> str:
    """What a reader sees of a highlighted line: its spans gone, its escapes read."""
    return html.unescape(TAGS.sub("", str(shown)))


def test_python_is_coloured_by_kind_and_every_character_escaped() -> None:
    diff = diff_lines(['x = "<b>"'], ['x = "<script>alert(1)</script>"  # why', "def f(): pass"])
    shown = dict(enumerate(str(line) for _, line in highlighted(diff, "work/app.py")))
    assert '<span class="hl-s">&#34;&lt;script&gt;alert(1)&lt;/script&gt;&#34;</span>' in shown[2]
    assert '<span class="hl-c"># why</span>' in shown[2]
    assert shown[3] == ('+<span class="hl-k">def</span> <span class="hl-nf">f</span>(): '
                        '<span class="hl-k">pass</span>')
    assert "<script>" not in "".join(shown.values())


@given(st.lists(st.text(max_size=60), max_size=12), st.sampled_from(
    ["a.py", "b.html", "c.js", "d.sh", "e.yaml", "f.rs", "g.unknown", "h.tnt", None]))
def test_colour_changes_no_character(lines: list[str], path: str | None) -> None:
    """Whatever the lines and the file's name, each line reads as the plain diff's."""
    diff = diff_lines([], lines)
    coloured = highlighted(diff, path, Budget(10.0))
    # The plain diff's text as is: unescaping it too read a line "&lt" as "<" (found by
    # Hypothesis in CI).
    plain = [visible(line) for _, line in diff]
    assert [kind for kind, _ in coloured] == [kind for kind, _ in diff]
    assert [_text(line) for _, line in coloured] == plain


def test_a_line_that_spells_an_entity_reads_as_itself() -> None:
    for path in ("a.py", None):
        shown = highlighted(diff_lines([], ["&lt", "&amp;", "<"]), path, Budget(10.0))
        assert [_text(line) for _, line in shown][1:] == ["+&lt", "+&amp;", "+<"]


def test_a_language_outside_the_common_ones_is_plain() -> None:
    # Pygments' TNT lexer takes exponential time on a line of brackets.
    diff = [("add", "+" + "(" * 40)]
    started = time.monotonic()
    assert highlighted(diff, "proof.tnt") == [("add", "+" + "(" * 40)]
    assert time.monotonic() - started < 1


def test_a_long_line_leaves_its_diff_plain() -> None:
    diff = [("add", "+x = 1"), ("add", "+" + "y" * LONGEST)]
    assert "hl-" not in "".join(str(line) for _, line in highlighted(diff, "a.py"))


def test_a_page_colours_within_its_budget_then_shows_the_rest_plain() -> None:
    """An unclosed HTML comment costs the lexer time that grows with the square of the
    text: the page's budget stops it, and the diffs after it are plain."""
    hostile = [("add", "+" + "<!--" * 100)] * 200  # 80,000 characters
    budget = Budget(0.05)
    started = time.monotonic()
    shown = highlighted(hostile, "index.html", budget)
    assert time.monotonic() - started < 2  # colouring all of it takes seconds
    assert budget.spent and "hl-" not in "".join(str(line) for _, line in shown)
    later = highlighted([("add", "+x = 1")], "a.py", budget)
    assert later == [("add", "+x = 1")]
    assert "hl-" in str(highlighted([("add", "+x = 1")], "a.py", Budget())[0][1])
