"""Paired comparison of two runs, or two variants of one: is B better than A, or is it
noise? (docs/results.md, "Comparing runs").

The unit is a task (its replicates together): the pairs are the tasks both sides
graded. A task's pass rate on a side is its succeeded replicates over its graded ones,
and a side's **pass rate** is the mean of its tasks' pass rates: one meaning, whatever
the replicate counts (a task is never reduced to "passed if most replicates did": with
different replicate counts on each side that made identical agents look different).
On the pairs:

- each side's pass rate with an interval clustered by task: the Wilson score interval
  when every task has one replicate, else the normal interval of the mean of the
  tasks' rates (replicates of one task are not independent evidence);
- a paired sign-flip permutation test of the mean of the tasks' pass-rate differences
  (SciPy's ``permutation_test``; exact when 2^n is within the resamples, else seeded);
- a paired bootstrap (seeded; the seed is in the result) of the mean difference of the
  tasks' pass rates and of their mean scores, percentile intervals;
- the verdict: a significant regression when B's mean rate is lower and the test's p is
  below 1 - confidence; an improvement the other way round; nothing to compare when a
  side graded no task (all infrastructure failures, or empty): every gate fails then.

The statistics are SciPy's (``permutation_test``, ``bootstrap``), imported when a
comparison is made: importing ``scipy.stats`` costs about 1.3 s cold here, which no
other command pays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from evalledger.statuses import GRADED, Category, left_out

from ._intervals import Interval, fewest_detectable, holm, normal_interval, wilson
from ._results import RunSummary, TaskRow

Verdict = Literal["significant regression", "significant improvement",
                  "no significant difference", "nothing to compare"]
RESAMPLES = 4000
PERMUTATIONS = 9999
TEST = "paired sign-flip permutation test on the tasks' pass rates"


class Side(BaseModel):
    """One side of the comparison, on the pairs."""

    model_config = ConfigDict(frozen=True)

    name: str
    """The run id (and ``/variant`` when comparing variants)."""
    grades: str = "original"
    """The grade set whose verdicts this side is (``original``, or a regrade's name): a
    regraded run against a plain one is a difference of gradings, not of agents."""
    graded: int
    """Graded replicates of the paired tasks, together."""
    pass_rate: float
    """The mean over the pairs of the tasks' pass rates."""
    pass_rate_interval: Interval
    """Clustered by task: Wilson with one replicate per task, else normal."""
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
    worse_in_b: int
    """Pairs whose pass rate is lower in B."""
    better_in_b: int
    """Pairs whose pass rate is higher in B."""
    test: str = TEST
    p_value: float
    """The test's two-sided p; 1 when no pair differs."""
    adjusted_p: float
    """The p the verdict reads: ``p_value``, or Holm's adjustment of it when several
    variants were compared against one (``correction``)."""
    correction: Literal["none", "holm"] = "none"
    detectable_difference: float | None
    """The smallest difference in pass rate these pairs could show significant at this
    confidence, after Holm's correction when there is one (``fewest_detectable`` tasks
    going from always to never passing, over the pairs); None when there are too few
    pairs for any."""
    nothing_because: str | None = None
    """Why there is nothing to compare (a side graded no task): every gate fails."""
    pass_rate_difference: float
    """B - A, the mean over pairs of the tasks' pass-rate differences."""
    pass_rate_difference_interval: Interval | None
    score_difference: float | None
    """B - A, the mean over pairs of the tasks' mean-score differences."""
    score_difference_interval: Interval | None
    verdict: Verdict

    def significant_regression(self) -> bool:
        return self.verdict == "significant regression"

    def fails(self, gate: str) -> bool:
        """Whether ``gate`` (``significant-regression``, ``regression``, ``never``)
        fails: on nothing to compare, every gate but never does."""
        if gate == "never":
            return False
        if self.verdict == "nothing to compare":
            return True
        if gate == "regression":
            return self.worse_in_b > 0
        return self.significant_regression()

    def corrected(self, adjusted_p: float, comparisons: int) -> Comparison:
        """This comparison as one of ``comparisons`` against one side, Holm's
        ``adjusted_p`` deciding its verdict; its power hint at the level the smallest
        p must pass (the level over the comparisons)."""
        level = (1 - self.confidence) / comparisons
        return self.model_copy(update={
            "adjusted_p": round(adjusted_p, 12), "correction": "holm",
            "detectable_difference": _detectable(self.pairs, 1 - level),
            "verdict": _verdict(self.pairs, adjusted_p, self.confidence,
                                self.pass_rate_difference)})


@dataclass(frozen=True)
class _Unit:
    """A task on one side: its graded replicates, how many succeeded, their mean score."""

    graded: int
    succeeded: int
    score: float

    @property
    def rate(self) -> float:
        return self.succeeded / self.graded



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
    rate_diff = [y.rate - x.rate for x, y in zip(pa, pb, strict=True)]
    score_diff = [y.score - x.score for x, y in zip(pa, pb, strict=True)]
    p = sign_flip_p(rate_diff, seed)
    difference = round(_mean(rate_diff), 6) if both else 0.0
    empty = [f"{name} graded no task" + (" (every attempt an infrastructure failure)"
                                        if infra else "")
             for name, units, infra in ((names[0], units_a, infra_a),
                                        (names[1], units_b, infra_b)) if not units]
    return Comparison(
        a=_side(names[0], a.grades, pa, confidence), b=_side(names[1], b.grades, pb, confidence),
        confidence=confidence, seed=seed, pairs=len(both), only_a=only_a, only_b=only_b,
        infra_left_out=infra_a + infra_b,
        worse_in_b=sum(d < 0 for d in rate_diff), better_in_b=sum(d > 0 for d in rate_diff),
        p_value=round(p, 12), adjusted_p=round(p, 12),
        detectable_difference=_detectable(len(both), confidence),
        pass_rate_difference=difference,
        pass_rate_difference_interval=paired_bootstrap(rate_diff, confidence, seed),
        score_difference=round(_mean(score_diff), 6) if both else None,
        score_difference_interval=paired_bootstrap(score_diff, confidence, seed),
        verdict=_verdict(len(both), p, confidence, difference),
        nothing_because="; ".join(empty) or (None if both else "no task graded on both sides"),
    )


def compare_to_baseline(a: RunSummary, b: RunSummary, baseline: str, others: Sequence[str],
                        *, confidence: float = 0.95, seed: int = 0) -> list[Comparison]:
    """Each of ``others`` (variants of ``b``) against variant ``baseline`` of ``a``: one
    comparison each, their p-values adjusted together by Holm's method, so that testing
    several variants does not find a "significant" one by chance."""
    found = [compare_runs(a, b, confidence=confidence, seed=seed, variants=(baseline, other))
             for other in others]
    return [c.corrected(p, len(found))
            for c, p in zip(found, holm([c.p_value for c in found]), strict=True)]


def _verdict(pairs: int, p: float, confidence: float, difference: float) -> Verdict:
    if not pairs:
        return "nothing to compare"
    if p < 1 - confidence and difference < 0:
        return "significant regression"
    if p < 1 - confidence and difference > 0:
        return "significant improvement"
    return "no significant difference"


def _detectable(pairs: int, confidence: float) -> float | None:
    fewest = fewest_detectable(confidence)
    return round(fewest / pairs, 6) if pairs >= fewest else None


def _side(name: str, grades: str, units: list[_Unit], confidence: float) -> Side:
    rates = [u.rate for u in units]
    mean = _mean(rates)
    if all(u.graded == 1 for u in units):  # 0/1 outcomes, independent: Wilson's
        interval = wilson(sum(u.succeeded for u in units), len(units), confidence)
    elif len(units) < 2:
        interval = Interval(low=0.0, high=1.0)
    else:  # the tasks' rates are the independent units (replicates cluster in them)
        spread = math.fsum((r - mean) ** 2 for r in rates) / (len(rates) - 1)
        interval = normal_interval(mean, math.sqrt(spread / len(rates)), confidence,
                                   low=0.0, high=1.0)
    return Side(name=name, grades=grades, graded=sum(u.graded for u in units),
                pass_rate=round(mean, 6) if units else 0.0, pass_rate_interval=interval,
                mean_score=round(_mean([u.score for u in units]), 6) if units else None)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def sign_flip_p(differences: Sequence[float], seed: int) -> float:
    """The two-sided p of a paired sign-flip permutation test of the mean of
    ``differences`` (SciPy's ``permutation_test``, ``permutation_type="samples"`` on one
    sample: each difference's sign flipped; exact when 2^n is at most
    ``PERMUTATIONS``, else that many seeded resamples). Differences of 0 flip to
    themselves and are left out. 1 when fewer than two differ. Valid whatever the replicate
    counts of each side: under no difference every task's rate difference has mean 0."""
    nonzero = [d for d in differences if d != 0]
    if len(nonzero) < 2:  # one difference flips to a tail of 1/2 each way: p = 1
        return 1.0
    import numpy as np
    from scipy.stats import permutation_test

    # Rounded: means of rates (ratios of small counts) that are equal must compare
    # equal, not differ in their last bits and fall on either side of the observed one.
    found: Any = permutation_test(
        (np.asarray(nonzero, dtype=float),), lambda x, axis: np.round(np.mean(x, axis=axis), 9),
        vectorized=True, permutation_type="samples", n_resamples=PERMUTATIONS,
        alternative="two-sided", rng=np.random.default_rng(seed))
    return min(1.0, float(found.pvalue))


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
