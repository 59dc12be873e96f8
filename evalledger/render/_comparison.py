"""A comparison (``compare``) as text for a terminal, markdown for a pull request and
JUnit XML for a CI's test view: each says the test used and its p-value."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from evalledger._text import visible
from evalledger.projections import TEST, Comparison, Side


def power_line(c: Comparison) -> str:
    """The smallest difference these pairs could show significant, in one line."""
    after = " after Holm's correction" if c.correction == "holm" else ""
    if c.detectable_difference is None:
        return (f"with {c.pairs} paired task(s) no difference can be significant at "
                f"{c.confidence:.0%}{after}: run more tasks")
    return (f"with {c.pairs} paired tasks the smallest difference that could be significant "
            f"at {c.confidence:.0%}{after} is {c.detectable_difference * 100:.1f} points "
            f"({round(c.detectable_difference * c.pairs)} tasks from always to never "
            "passing, all one way)")


def p_value_line(c: Comparison) -> str:
    holm = f", Holm-adjusted p = {c.adjusted_p:.4g}" if c.correction == "holm" else ""
    return (f"tasks worse in B: {c.worse_in_b}, better in B: {c.better_in_b}; "
            f"{TEST} p = {c.p_value:.4g}{holm}")


def rate_text(side: Side) -> str:
    """A side's pass rate, its interval and what kind it is."""
    i = side.pass_rate_interval
    return (f"{side.pass_rate:.1%} [{i.low:.1%}, {i.high:.1%}] (mean of the tasks' pass "
            f"rates, {side.graded} graded)")


def comparison_text(c: Comparison) -> list[str]:
    pct = f"{c.confidence:.0%}"
    lines = [f"compare {visible(c.a.name)} -> {visible(c.b.name)}: {c.pairs} task(s) both "
             f"graded ({len(c.only_a)} only in A, {len(c.only_b)} only in B)",
             f"  grade sets: A {visible(c.a.grades)}, B {visible(c.b.grades)}"
             + ("" if c.a.grades == c.b.grades else
                " (different gradings: a difference may be theirs, not the agents')")]
    if c.infra_left_out:
        lines.append(f"  {c.infra_left_out} infrastructure failure(s) left out of the pairs "
                     "(--count-infra counts them)")
    if c.nothing_because:
        lines.append(f"  nothing to compare: {visible(c.nothing_because)}")
    for side in (c.a, c.b):
        lines.append(f"  {visible(side.name)}: pass rate {rate_text(side)}")
    lines.append(f"  pass rate B - A: {_difference(c)}")
    if c.score_difference is not None:
        s = c.score_difference_interval
        lines.append(f"  mean score B - A: {c.score_difference:+.3f}"
                     + (f" [{s.low:+.3f}, {s.high:+.3f}]" if s else ""))
    lines += [f"  {p_value_line(c)}", f"  {power_line(c)}", f"verdict: {c.verdict} at {pct}"]
    return lines


def _difference(c: Comparison) -> str:
    d = c.pass_rate_difference_interval
    return f"{c.pass_rate_difference * 100:+.1f} points" + (
        f" [{d.low * 100:+.1f}, {d.high * 100:+.1f}] ({c.confidence:.0%} paired bootstrap, "
        f"seed {c.seed})" if d else "")


def comparison_markdown(found: Sequence[Comparison]) -> str:
    """One table row per comparison, the test and p-value named, then the power hint."""
    lines = ["| A | B | pairs | pass rate A | pass rate B | B - A "
             f"| {TEST}: p | verdict |", "|---|---|---:|---:|---:|---:|---:|---|"]
    for c in found:
        p = f"{c.p_value:.4g}" + (f" (Holm {c.adjusted_p:.4g})" if c.correction == "holm"
                                    else "")
        lines.append(" | ".join(["", _md(c.a.name), _md(c.b.name), str(c.pairs),
                                 _rate(c.a), _rate(c.b), _md(_difference(c)), p,
                                 f"**{c.verdict}** at {c.confidence:.0%}", ""]).strip())
    lines += ["", *(f"- {_md(c.b.name)}: {_md(power_line(c))}" for c in found)]
    return "\n".join(lines) + "\n"


def _rate(side: Side) -> str:
    i = side.pass_rate_interval
    return f"{side.pass_rate:.1%} [{i.low:.1%}, {i.high:.1%}]"


def _md(text: str) -> str:
    return visible(text).replace("|", "\\|")


def comparison_junit(found: Sequence[Comparison]) -> str:
    """One test case per comparison, failed when it is a significant regression; its
    properties hold the test, the p-values and the seed."""
    failures = sum(c.significant_regression() for c in found)
    suite = ET.Element("testsuite", {"name": "evalledger compare", "tests": str(len(found)),
                                     "failures": str(failures), "errors": "0"})
    for c in found:
        case = ET.SubElement(suite, "testcase", {
            "classname": visible(c.a.name), "name": f"{visible(c.b.name)} against "
                                                   f"{visible(c.a.name)}"})
        props = ET.SubElement(case, "properties")
        for name, value in (("test", TEST), ("p", f"{c.p_value:.6g}"),
                            ("adjusted_p", f"{c.adjusted_p:.6g}"), ("correction", c.correction),
                            ("confidence", str(c.confidence)), ("pairs", str(c.pairs)),
                            ("bootstrap_seed", str(c.seed)), ("verdict", c.verdict)):
            ET.SubElement(props, "property", {"name": name, "value": value})
        said = "\n".join(comparison_text(c))
        if c.significant_regression():
            failure = ET.SubElement(case, "failure", {
                "message": f"significant regression: {TEST} p = {c.adjusted_p:.4g}",
                "type": "significant-regression"})
            failure.text = said
        else:
            ET.SubElement(case, "system-out").text = said
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
