"""``render._charts``: what a chart draws of its numbers."""

from __future__ import annotations

import itertools
import re

from hypothesis import given
from hypothesis import strategies as st

from evalledger.render._charts import steps

POINT = st.tuples(st.floats(0, 1e4, allow_nan=False), st.floats(0, 1e9, allow_nan=False))


@given(st.lists(POINT, min_size=1, max_size=30).map(sorted))
def test_a_cumulative_line_never_goes_down(points: list[tuple[float, float]]) -> None:
    """Whatever the counts reported (an agent's own total at its end may be less than
    its messages' reports added up), what is used so far is drawn never shrinking, and
    a last count below the highest is said in words."""
    svg = str(steps(points, "tokens used", y_title="tokens"))
    path = re.search(r'<path d="([^"]+)"', svg)
    if path is None:  # nothing to draw: said in words
        assert "reported" in svg
        return
    heights = [float(y) for y in re.findall(r"[ML] [-\d.]+ ([-\d.]+)", path.group(1))]
    # SVG's y grows downwards: never up the page is never down in tokens.
    assert all(later <= earlier + 1e-6 for earlier, later in itertools.pairwise(heights))
    assert ("less than what it reported on the way" in svg) == (
        points[-1][1] < max(y for _, y in points))


def test_a_line_of_nothing_but_zeros_is_said_not_drawn_on_an_axis_of_nothing() -> None:
    svg = str(steps([(1.0, 0.0), (2.0, 0.0)], "tokens used", y_title="tokens"))
    assert "0 tokens reported" in svg and "<path" not in svg
