"""Paired comparison of two runs, or two variants of one: is B better than A, or is it
noise? (docs/results.md, "Comparing runs").

The unit is a task (its replicates together): the pairs are the tasks both sides
graded. For each side a task's pass rate is its succeeded replicates over its graded
ones; a task *passes* when more than half of them succeeded. On the pairs:

- each side's pass rate (tasks passing / pairs) with a Wilson score interval;
- McNemar's exact test on the discordant pairs (passed on one side only): a two-sided
  binomial test of the B-only passes among all discordant pairs, at p = 0.5;
- a paired bootstrap (seeded; the seed is in the result) of the mean difference of the
  tasks' pass rates and of their mean scores, percentile intervals;
- the verdict: a significant regression when B passes fewer tasks than A and McNemar's
  p is below 1 - confidence; an improvement the other way round.

The statistics are SciPy's (``binomtest``, its Wilson interval, ``bootstrap``),
imported when a comparison is made: importing ``scipy.stats`` costs about 1.3 s cold
here, which no other command pays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from evalledger.statuses import GRADED, Category, left_out

from ._intervals import Interval, fewest_detectable, holm, wilson
from ._results import RunSummary, TaskRow

Verdict = Literal["significant regression", "significant improvement",
                  "no significant difference", "nothing to compare"]
RESAMPLES = 4000


class Side(BaseModel):
    """One side of the comparison, on the pairs."""

    model_config = ConfigDict(frozen=True)

    name: str
    """The run id (and ``/variant`` when comparing variants)."""
    tasks_passed: int
    pass_rate: float
    pass_rate_interval: Interval
    mean_score: float | None


class Comparison(BaseModel):
    """``evalledger compare A B``: the paired statistics of B against A."""

    model_config = ConfigDict(frozen=True)

    a: Side
    b: Side
    confidence: float
    seed: int
    pairs: int
    """Tasks both sides graded."""
    only_a: list[str]
    """Tasks only A graded (task ids, ``variant/task`` across variants)."""
    only_b: list[str]
    infra_left_out: int = 0
    """Rows (of both sides) whose attempt failed for its infrastructure's sake: no
    evidence either way, left out unless the summaries count them (``--count-infra``)."""
    passed_only_a: int
    """Discordant pairs: tasks that passed in A and not in B."""
    passed_only_b: int
    mcnemar_p: float
    """McNemar's exact p (two-sided); 1 when no pair is discordant."""
    adjusted_p: float
    """The p the verdict reads: ``mcnemar_p``, or Holm's adjustment of it when several
    variants were compared against one (``correction``)."""
    correction: Literal["none", "holm"] = "none"
    detectable_difference: float | None
    """The smallest difference in pass rate these pairs could show significant at this
    confidence (``fewest_detectable`` tasks, all flipping one way, over the pairs); None
    when there are too few pairs for any."""
    pass_rate_difference: float
    """B - A, the mean over pairs of the tasks' pass-rate differences."""
    pass_rate_difference_interval: Interval | None
    score_difference: float | None
    """B - A, the mean over pairs of the tasks' mean-score differences."""
    score_difference_interval: Interval | None
    verdict: Verdict

    def significant_regression(self) -> bool:
        return self.verdict == "significant regression"

    def corrected(self, adjusted_p: float) -> Comparison:
        """This comparison as one of several against one side, Holm's ``adjusted_p``
        deciding its verdict."""
        return self.model_copy(update={
            "adjusted_p": round(adjusted_p, 12), "correction": "holm",
            "verdict": _verdict(self.pairs, adjusted_p, self.confidence, self.passed_only_a,
                                self.passed_only_b)})


@dataclass(frozen=True)
class _Unit:
    """A task on one side: its graded replicates, how many succeeded, their mean score."""

    graded: int
    succeeded: int
    score: float

    @property
    def rate(self) -> float:
        return self.succeeded / self.graded

    @property
    def passed(self) -> bool:
        return self.succeeded * 2 > self.graded


def _units(rows: Sequence[TaskRow], variant: str | None, by_variant: bool,
           count_infra: bool) -> tuple[dict[str, _Unit], int]:
    """The units of one side, and how many infrastructure failures were left out."""
    found: dict[str, list[TaskRow]] = {}
    dropped = 0
    for row in rows:
        if row.category not in GRADED or (variant is not None and row.variant_id != variant):
            continue
        if left_out(row.category, row.failure_class) and not count_infra:
            dropped += 1  # a broken sandbox measures no agent: not a pair's evidence
            continue
        unit = f"{row.variant_id}/{row.task_id}" if by_variant else row.task_id
        found.setdefault(unit, []).append(row)
    return {unit: _Unit(len(graded), sum(r.category == Category.SUCCEEDED for r in graded),
                        sum(r.weighted_score or 0.0 for r in graded) / len(graded))
            for unit, graded in found.items()}, dropped


def compare_runs(a: RunSummary, b: RunSummary, *, confidence: float = 0.95, seed: int = 0,
                 variants: tuple[str, str] | None = None) -> Comparison:
    """B against A, paired by task (see the module's docstring). With ``variants``, A's
    rows are those of the first variant and B's those of the second (one run, or two)."""
    if not 0 < confidence < 1:
        raise ValueError(f"a confidence is between 0 and 1, not {confidence}")
    by_variant = variants is None and len({r.variant_id for r in (*a.tasks, *b.tasks)}) > 1
    units_a, infra_a = _units(a.tasks, variants[0] if variants else None, by_variant,
                              a.infra_counted)
    units_b, infra_b = _units(b.tasks, variants[1] if variants else None, by_variant,
                              b.infra_counted)
    both = sorted(units_a.keys() & units_b.keys())
    pa = [units_a[u] for u in both]
    pb = [units_b[u] for u in both]
    names = (f"{a.run_id}/{variants[0]}", f"{b.run_id}/{variants[1]}") if variants else (
        a.run_id, b.run_id)
    only_a, only_b = sorted(units_a.keys() - set(both)), sorted(units_b.keys() - set(both))
    passed_only_a = sum(x.passed and not y.passed for x, y in zip(pa, pb, strict=True))
    passed_only_b = sum(y.passed and not x.passed for x, y in zip(pa, pb, strict=True))
    p = mcnemar_exact(passed_only_a, passed_only_b)
    rate_diff = [y.rate - x.rate for x, y in zip(pa, pb, strict=True)]
    score_diff = [y.score - x.score for x, y in zip(pa, pb, strict=True)]
    fewest = fewest_detectable(confidence)
    return Comparison(
        a=_side(names[0], pa, confidence), b=_side(names[1], pb, confidence),
        confidence=confidence, seed=seed, pairs=len(both), only_a=only_a, only_b=only_b,
        infra_left_out=infra_a + infra_b,
        passed_only_a=passed_only_a, passed_only_b=passed_only_b, mcnemar_p=round(p, 12),
        adjusted_p=round(p, 12),
        detectable_difference=round(fewest / len(both), 6) if len(both) >= fewest else None,
        pass_rate_difference=round(_mean(rate_diff), 6) if both else 0.0,
        pass_rate_difference_interval=paired_bootstrap(rate_diff, confidence, seed),
        score_difference=round(_mean(score_diff), 6) if both else None,
        score_difference_interval=paired_bootstrap(score_diff, confidence, seed),
        verdict=_verdict(len(both), p, confidence, passed_only_a, passed_only_b),
    )


def compare_to_baseline(a: RunSummary, b: RunSummary, baseline: str, others: Sequence[str],
                        *, confidence: float = 0.95, seed: int = 0) -> list[Comparison]:
    """Each of ``others`` (variants of ``b``) against variant ``baseline`` of ``a``: one
    comparison each, their p-values adjusted together by Holm's method, so that testing
    several variants does not find a "significant" one by chance."""
    found = [compare_runs(a, b, confidence=confidence, seed=seed, variants=(baseline, other))
             for other in others]
    return [c.corrected(p) for c, p in zip(found, holm([c.mcnemar_p for c in found]),
                                            strict=True)]


def _verdict(pairs: int, p: float, confidence: float, passed_only_a: int,
             passed_only_b: int) -> Verdict:
    if not pairs:
        return "nothing to compare"
    if p < 1 - confidence and passed_only_a > passed_only_b:
        return "significant regression"
    if p < 1 - confidence and passed_only_b > passed_only_a:
        return "significant improvement"
    return "no significant difference"


def _side(name: str, units: list[_Unit], confidence: float) -> Side:
    passed = sum(u.passed for u in units)
    return Side(name=name, tasks_passed=passed,
                pass_rate=round(passed / len(units), 6) if units else 0.0,
                pass_rate_interval=wilson(passed, len(units), confidence),
                mean_score=round(_mean([u.score for u in units]), 6) if units else None)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """McNemar's exact test: the two-sided binomial p of ``only_b`` among the discordant
    pairs at 0.5 (SciPy's ``binomtest``); 1 with no discordant pair."""
    if only_a + only_b == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(only_b, only_a + only_b, 0.5).pvalue)


def paired_bootstrap(differences: Sequence[float], confidence: float, seed: int
                     ) -> Interval | None:
    """A percentile bootstrap interval of the mean of paired differences (SciPy's
    ``bootstrap``, ``RESAMPLES`` resamples of the pairs, seeded); None with fewer than two
    pairs. All differences equal: that value, both ends."""
    if len(differences) < 2:
        return None
    if len(set(differences)) == 1:
        return Interval(low=round(differences[0], 6), high=round(differences[0], 6))
    import numpy as np
    from scipy.stats import bootstrap

    found: Any = bootstrap((np.asarray(differences, dtype=float),), np.mean,
                           confidence_level=confidence, n_resamples=RESAMPLES,
                           method="percentile", rng=np.random.default_rng(seed))
    ci = found.confidence_interval
    return Interval(low=round(float(ci.low), 6), high=round(float(ci.high), 6))
