"""Intervals for every rate a summary shows, and the small corrections a comparison
needs (docs/results.md, "How sure a number is").

Standard library only: every read command shows these, and ``scipy.stats`` costs about
1.3 s to import cold here against well under a millisecond for ``statistics``. The
formulas are the textbook ones and the tests check each against SciPy and statsmodels:

- a proportion: the Wilson score interval (``scipy.stats.binomtest(...).proportion_ci``,
  ``statsmodels...proportion_confint(method="wilson")``);
- a mean over task keys where a task may have several replicates: the normal interval
  with the cluster-robust standard error, clusters being task ids (statsmodels' OLS on a
  constant with ``cov_type="cluster"``); without replicates it is the usual s / sqrt(n);
- several p-values tested together: Holm's step-down adjustment (statsmodels'
  ``multipletests(method="holm")``).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence

from pydantic import BaseModel, ConfigDict

CONFIDENCE = 0.95
# NormalDist().inv_cdf(0.975): the z every default interval uses, without importing
# ``statistics`` (9 ms cold) on the path of every read command.
_Z = {CONFIDENCE: 1.9599639845400536}


class Interval(BaseModel):
    model_config = ConfigDict(frozen=True)

    low: float
    high: float


def z_value(confidence: float) -> float:
    """The two-sided normal quantile of ``confidence`` (1.96 at 95%)."""
    if not 0 < confidence < 1:
        raise ValueError(f"a confidence is between 0 and 1, not {confidence}")
    if confidence in _Z:
        return _Z[confidence]
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson(successes: int, trials: int, confidence: float = CONFIDENCE) -> Interval:
    """The Wilson score interval of ``successes`` out of ``trials``; [0, 1] with none."""
    if trials <= 0:
        return Interval(low=0.0, high=1.0)
    z = z_value(confidence)
    p = successes / trials
    shrink = 1 + z * z / trials
    center = (p + z * z / (2 * trials)) / shrink
    half = z / shrink * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    # Rounded as the rates are; clamped, since the rounding must not step outside [0, 1].
    return Interval(low=max(0.0, round(center - half, 6)), high=min(1.0, round(center + half, 6)))


def clustered_stderr(values: Sequence[float], clusters: Sequence[Hashable] | None
                     ) -> float | None:
    """The standard error of ``mean(values)`` robust to correlation inside a cluster (the
    replicates of one task): ``sqrt(G / (G - 1) * sum_g (sum_i in g (x_i - mean))^2) / n``
    over G clusters; None with fewer than two clusters. One value per cluster: the plain
    ``stdev / sqrt(n)``. ``clusters`` None: the caller knows each value is a cluster of
    its own (no table of a 100,000 of them is made; the same float, bit for bit)."""
    if clusters is not None and len(values) != len(clusters):
        raise ValueError("one cluster per value")
    n = len(values)
    mean = math.fsum(values) / n if n else 0.0
    if clusters is None:
        deviations: Iterable[float] = (value - mean for value in values)
        groups = n
    else:
        sums: dict[Hashable, float] = {}
        for value, cluster in zip(values, clusters, strict=True):
            sums[cluster] = sums.get(cluster, 0.0) + (value - mean)
        deviations, groups = sums.values(), len(sums)
    if groups < 2:
        return None
    return math.sqrt(groups / (groups - 1) * math.fsum(s * s for s in deviations)) / n


def normal_interval(mean: float, stderr: float, confidence: float = CONFIDENCE, *,
                    low: float = -math.inf, high: float = math.inf) -> Interval:
    """``mean`` ± z·``stderr``, clipped to [``low``, ``high``] (a rate stays in [0, 1])."""
    z = z_value(confidence)
    return Interval(low=max(low, round(mean - z * stderr, 6)),
                    high=min(high, round(mean + z * stderr, 6)))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: the i-th smallest p times
    (m - i), made non-decreasing, capped at 1."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted = [0.0] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def fewest_detectable(confidence: float = CONFIDENCE) -> int:
    """The fewest paired tasks, all going one way from always to never passing, that the
    paired sign-flip test can call significant at ``confidence`` (McNemar's exact test
    alike): p = 2 * 0.5^d < 1 - confidence."""
    level = 1 - confidence
    d = 1
    while 2 * 0.5**d >= level:
        d += 1
    return d
