"""ANSI colour in HTML (``_ansi``): SGR sequences become spans of fixed classes; every
other byte of the input is escaped or spelled out, whatever the input."""

from __future__ import annotations

import html
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from evalledger._text import visible
from evalledger.render._ansi import ansi_html

SPAN = re.compile(r'<span class="(a-(?:b|d|i|u|fg\d{1,2}|bg\d{1,2}))( a-(?:b|d|i|u|fg\d{1,2}|'
                  r'bg\d{1,2}))*">|</span>')


def test_colours_and_styles_become_spans() -> None:
    assert ansi_html("\x1b[31mred\x1b[0m plain") == '<span class="a-fg1">red</span> plain'
    assert ansi_html("\x1b[1;32mok\x1b[22m still green\x1b[39m") == (
        '<span class="a-b a-fg2">ok</span><span class="a-fg2"> still green</span>')
    assert ansi_html("\x1b[97;41mhi\x1b[m") == '<span class="a-fg15 a-bg1">hi</span>'
    assert ansi_html("\x1b[4;3mu\x1b[24mi\x1b[23m") == (
        '<span class="a-i a-u">u</span><span class="a-i">i</span>')


def test_many_colours_show_as_the_nearest_of_sixteen() -> None:
    assert ansi_html("\x1b[38;5;9mx") == '<span class="a-fg9">x</span>'
    assert ansi_html("\x1b[38;5;196mx") == '<span class="a-fg9">x</span>'  # pure red
    assert ansi_html("\x1b[48;5;240mx") == '<span class="a-bg8">x</span>'  # a grey
    assert ansi_html("\x1b[38;2;0;0;250mx") == '<span class="a-fg4">x</span>'
    assert ansi_html("\x1b[38;5mx") == "x"  # malformed: nothing


def test_markup_and_other_escapes_are_text() -> None:
    shown = ansi_html("\x1b[31m<script>alert(1)</script>\x1b[0m \x1b]0;title\x07 \x1b[2J \x9b1m")
    assert shown == ('<span class="a-fg1">&lt;script&gt;alert(1)&lt;/script&gt;</span> '
                     "\\x1b]0;title\\x07 \\x1b[2J \\x9b1m")
    assert ansi_html("a\nb", newlines=True) == "a\nb" and ansi_html("a\nb") == "a\\nb"


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("\x1b[;0123456789mK<>&\"'ab\x07\n\u202e ")),
               max_size=60))
def test_whatever_the_input_only_our_spans_are_markup(text: str) -> None:
    shown = str(ansi_html(text))
    bare = SPAN.sub("", shown)
    assert "<" not in bare and ">" not in bare and '"' not in bare.replace("&#34;", "")
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
    # What is left once the spans go is the text without its SGR sequences, spelled out.
    assert html.unescape(bare) == visible(re.sub(r"\x1b\[[0-9;:]{0,64}m", "", text))


def test_a_search_is_marked_in_what_is_shown_never_inside_an_escape() -> None:
    assert ansi_html("a<b>a", mark="a") == "<mark>a</mark>&lt;b&gt;<mark>a</mark>"
    assert ansi_html("fish & chips", mark="amp") == "fish &amp; chips"
    assert ansi_html("\x1b[31mred fail\x1b[0m ok", mark="fail") == (
        '<span class="a-fg1">red <mark>fail</mark></span> ok')
    assert ansi_html("nothing here", mark="") == "nothing here"


@given(st.text(max_size=200), st.text(min_size=1, max_size=5))
def test_marking_changes_no_text(text: str, mark: str) -> None:
    shown = str(ansi_html(text, mark=mark))
    assert shown.replace("<mark>", "").replace("</mark>", "") == str(ansi_html(text))


@given(st.text(alphabet="aAbB<&é É", max_size=30), st.text(alphabet="aAbB<&é É", min_size=1,
                                                          max_size=3))
def test_a_search_is_marked_whatever_its_case_and_as_it_is_written(text: str,
                                                                    mark: str) -> None:
    shown = str(ansi_html(text, mark=mark))
    # Taking the marks away leaves the line as it is shown, its own case kept.
    assert re.sub("</?mark>", "", shown) == str(ansi_html(text))
    marked = [html.unescape(m) for m in re.findall("<mark>(.*?)</mark>", shown)]
    assert all(m.lower() == mark.lower() for m in marked)
    assert len(marked) == len(re.findall(re.escape(mark), visible(text), re.IGNORECASE))
