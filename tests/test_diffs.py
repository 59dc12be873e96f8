"""``evalledger._diffs``: a change as a unified diff's lines, each with its kind."""

from __future__ import annotations

from evalledger._diffs import LONGEST_LINE, diff_lines


def test_a_diff_line_is_cut_and_a_removed_line_like_a_header_is_kept() -> None:
    shown = diff_lines(["-- a comment", "x"], ["x", "++ y", "z" * (LONGEST_LINE + 5)])
    assert ("del", "--- a comment") in shown and ("add", "+++ y") in shown
    cut = [line for kind, line in shown if kind == "add" and "z" in line]
    assert cut == ["+" + "z" * (LONGEST_LINE - 1) + "\u2026 [6 more characters]"]
