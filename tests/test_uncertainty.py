"""Bootstrap intervals, and the bridgeability table built from them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dihal.predictors import ORIENTATION
from dihal.replace import DEPTH, bridgeability_table
from dihal.rows import SpearmanRow
from dihal.uncertainty import (
    bootstrap_interval,
    compare_intervals,
    jackknife_interval,
    resample_indices,
    spearman_interval,
)


def test_spearman_interval_matches_scipy_and_is_seeded():
    rng = np.random.default_rng(0)
    x = rng.normal(size=12)
    y = x + rng.normal(size=12)
    st = spearman_interval(x, y, n_boot=500, seed=1)
    assert st["rho"] == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
    assert st["low"] <= st["rho"] <= st["high"] and st["high"] - st["low"] > 0.05
    assert spearman_interval(x, y, n_boot=500, seed=1) == st
    assert spearman_interval(x, y, n_boot=500, seed=2) != st
    with pytest.raises(ValueError, match=">= 3 points"):
        spearman_interval(x[:2], y[:2])


def test_spearman_interval_of_a_monotone_relation_is_one_and_counts_undefined_resamples():
    x = np.arange(5.0)
    st = spearman_interval(x, x ** 3, n_boot=3000, seed=0)
    assert st["rho"] == st["low"] == st["high"] == 1.0  # ties are tied on both sides
    # a resample drawing one layer five times has no spread: 5 of the 5^5 equally likely draws
    assert 0 < st["undefined"] < 20


def test_unrelated_predictor_interval_covers_zero():
    rng = np.random.default_rng(3)
    st = spearman_interval(rng.normal(size=10), rng.normal(size=10), n_boot=1000)
    assert st["low"] < 0 < st["high"]


def test_compare_intervals():
    assert compare_intervals((0.5, 0.9), (0.1, 0.4)) == "above"
    assert compare_intervals((-0.5, 0.0), (0.1, 0.4)) == "below"
    assert compare_intervals((0.3, 0.9), (0.1, 0.4)) == "not distinguishable"
    assert compare_intervals((math.nan, 0.9), (0.1, 0.4)) == "not distinguishable"


def test_bootstrap_interval_of_a_mean():
    values = np.random.default_rng(4).normal(loc=2.0, size=400)
    lo, hi = bootstrap_interval(len(values), lambda idx: values[idx].mean(), n_boot=1000)
    se = values.std() / math.sqrt(len(values))
    assert lo < values.mean() < hi
    assert hi - lo == pytest.approx(2 * 1.96 * se, rel=0.15)
    assert resample_indices(4, 3, seed=5).shape == (3, 4)
    # the jackknife's interval for a mean is the textbook one: mean +- 1.96 s / sqrt(n)
    jlo, jhi = jackknife_interval(len(values), lambda idx: values[idx].mean())
    sd = values.std(ddof=1) / math.sqrt(len(values))
    assert (jlo, jhi) == pytest.approx((values.mean() - 1.959964 * sd, values.mean() + 1.959964 * sd))


def _layers(losses):
    return [{"layer": ll, "val_loss": v, "recon_error": v, "hybrid_nll": v}
            for ll, v in losses.items()]


def test_bridgeability_table_rivals_orientation_and_standing_against_depth():
    layers = list(range(1, 11))
    losses = {ll: 0.1 * ll for ll in layers}  # deeper is harder: depth is a perfect predictor
    rng = np.random.default_rng(6)
    score = [{"norm": "none", "layer": ll, "S": float(s), "candidate": True}
             for ll, s in zip(layers, rng.normal(size=10), strict=True)]
    # rivals: cond_distance grows with depth (oriented: -cond_distance, perfect), the others noise
    rivals = [{"layer": ll, **{name: float(rng.normal()) for name in ORIENTATION},
               "cond_distance": 0.05 * ll} for ll in layers]
    table = bridgeability_table(_layers(losses), score, rivals, n_boot=500)
    rows = {r.predictor: r.of("val_loss") for r in table["rows"]}
    assert set(rows) == {"S_l (none)", DEPTH, *(("-" if s < 0 else "") + n
                                                 for n, s in ORIENTATION.items())}
    assert rows[DEPTH].rho == 1.0 and rows[DEPTH].vs_depth == ""
    assert rows["-cond_distance"].rho == 1.0
    assert rows["-cond_distance"].vs_depth == "not distinguishable"
    assert rows["S_l (none)"].vs_depth == "below"
    # the typed row is written as the columns it always had, and read back from them
    first = table["rows"][0].to_dict()
    assert list(first) == ["predictor"] + [c.format(m) for m in ("val_loss", "recon_error",
                                                                 "hybrid_nll")
                                           for c in ("spearman_vs_-{}", "low_vs_-{}",
                                                     "high_vs_-{}", "vs_depth_-{}")]
    assert SpearmanRow.from_dict(first) == table["rows"][0]
    assert table["oracle"] == 1 and table["worst"] == 10
    # a rival table that lacks a swept layer is refused
    with pytest.raises(ValueError, match="lack swept layers"):
        bridgeability_table(_layers(losses), score, rivals[1:], n_boot=10)


def test_samples_to_separate_scales_the_facing_half_widths():
    from dihal.uncertainty import samples_to_separate

    # 100 [90, 110] vs 130 [115, 150] from 64 samples: facing half-widths 10 + 15 = 25 > gap 30?
    # no: 25 < 30, already apart
    assert samples_to_separate(100, (90, 110), 130, (115, 150), 64) == 64
    # 100 [80, 125] vs 130 [110, 160]: 25 + 20 = 45 over a gap of 30 -> 64 * 1.5^2 = 144
    assert samples_to_separate(100, (80, 125), 130, (110, 160), 64) == 144
    assert samples_to_separate(130, (110, 160), 100, (80, 125), 64) == 144  # symmetric
    assert samples_to_separate(100, (80, 125), 100, (90, 110), 64) is None
