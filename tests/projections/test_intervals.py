"""The intervals every summary shows, checked against SciPy and statsmodels on generated
data (Hypothesis), and the clustered interval's coverage measured in a simulation."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest
from statsmodels.api import OLS
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from evalledger.projections import pass_at, pass_hat
from evalledger.projections._intervals import (
    clustered_stderr,
    fewest_detectable,
    holm,
    normal_interval,
    wilson,
    z_value,
)

CONFIDENCES = st.sampled_from([0.8, 0.9, 0.95, 0.99])


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@settings(max_examples=200, deadline=None)
@given(st.integers(1, 500).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))),
       CONFIDENCES)
def test_wilson_is_scipys_and_statsmodels(drawn: tuple[int, int], confidence: float) -> None:
    k, n = drawn
    found = wilson(k, n, confidence)
    scipy = binomtest(k, n).proportion_ci(confidence, method="wilson")
    low, high = proportion_confint(k, n, alpha=1 - confidence, method="wilson")
    assert found.low == pytest.approx(max(0.0, scipy.low), abs=1e-6)
    assert found.high == pytest.approx(min(1.0, scipy.high), abs=1e-6)
    assert (found.low, found.high) == pytest.approx((low, high), abs=1e-6)
    assert found.low <= k / n <= found.high


def test_wilson_of_nothing_is_everything() -> None:
    assert (wilson(0, 0).low, wilson(0, 0).high) == (0.0, 1.0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.floats(0, 1, allow_nan=False)),
                min_size=2, max_size=60))
def test_the_clustered_stderr_is_statsmodels_cluster_robust_one(
    drawn: list[tuple[int, float]],
) -> None:
    clusters = [c for c, _ in drawn]
    values = [v for _, v in drawn]
    found = clustered_stderr(values, clusters)
    if len(set(clusters)) < 2:
        assert found is None
        return
    fit = OLS(np.asarray(values), np.ones(len(values))).fit(
        cov_type="cluster", cov_kwds={"groups": np.asarray(clusters)})
    assert found == pytest.approx(float(fit.bse[0]), rel=1e-6, abs=1e-9)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0, 1, allow_nan=False), min_size=2, max_size=40))
def test_one_value_per_cluster_is_the_plain_standard_error(values: list[float]) -> None:
    found = clustered_stderr(values, list(range(len(values))))
    assert found == pytest.approx(np.std(values, ddof=1) / math.sqrt(len(values)), abs=1e-9)


def test_the_clustered_interval_covers_the_true_mean_at_about_its_level() -> None:
    """400 simulated runs of 40 tasks x 3 replicates, each task with its own success rate
    (drawn from 0.1 .. 0.9, true mean 0.5): the share of 95% intervals holding 0.5.
    Measured here: 0.935. The plain stdev / sqrt(n) over the 120 keys, blind to the
    replicates being alike, holds it in 0.9025 of them: too narrow."""
    rng = random.Random(25)
    z = z_value(0.95)
    held = naive = 0
    trials = 400
    for _ in range(trials):
        values: list[float] = []
        clusters: list[int] = []
        for task in range(40):
            rate = rng.uniform(0.1, 0.9)
            for _ in range(3):
                values.append(float(rng.random() < rate))
                clusters.append(task)
        mean = sum(values) / len(values)
        se = clustered_stderr(values, clusters)
        assert se is not None
        interval = normal_interval(mean, se, 0.95)
        held += interval.low <= 0.5 <= interval.high
        plain = float(np.std(values, ddof=1)) / math.sqrt(len(values))
        naive += abs(mean - 0.5) <= z * plain
    assert 0.91 <= held / trials <= 0.98, held / trials
    assert naive < held


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@settings(max_examples=25, deadline=None)  # multipletests takes ~60 ms a call here
@given(st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=12))
def test_holm_is_statsmodels(pvalues: list[float]) -> None:
    _, expected, _, _ = multipletests(pvalues, method="holm")
    assert holm(pvalues) == pytest.approx(list(expected), abs=1e-12)


@pytest.mark.parametrize("confidence", [0.8, 0.9, 0.95, 0.99])
def test_the_fewest_detectable_pairs_are_the_first_significant_one_way(confidence: float
                                                                       ) -> None:
    d = fewest_detectable(confidence)
    assert binomtest(0, d, 0.5).pvalue < 1 - confidence <= binomtest(0, d - 1, 0.5).pvalue


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 7).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n),
                                                     st.integers(1, n))))
def test_pass_hat_k_and_pass_at_k_are_the_shares_of_k_subsets(drawn: tuple[int, int, int]
                                                             ) -> None:
    """Over every k-subset of n samples (c of them passing): pass^k is the share where
    all pass, pass@k the share where one does."""
    n, c, k = drawn
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(samples, k))
    assert pass_hat(n, c, k) == pytest.approx(sum(all(s) for s in subsets) / len(subsets))
    assert pass_at(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


def test_the_default_z_is_the_normal_quantile() -> None:
    from statistics import NormalDist

    assert z_value(0.95) == NormalDist().inv_cdf(0.975)


@given(st.lists(st.floats(0, 1), max_size=50))
def test_values_each_a_cluster_of_their_own_give_the_same_float_told_or_found(
    values: list[float],
) -> None:
    """``clusters=None`` (the caller knows each value is its own cluster: no table of a
    100,000 of them) is bit for bit what the same clusters named one by one give: a
    stored snapshot made either way checks."""
    assert clustered_stderr(values, None) == clustered_stderr(values, list(range(len(values))))
