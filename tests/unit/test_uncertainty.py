"""Bootstrap intervals, and the bridgeability table built from them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dihal.locate.predictors import ORIENTATION
from dihal.replace.stage import DEPTH, bridgeability_table
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
    # the standing is the paired test's: depth's own row has none, the others carry it
    assert rows[DEPTH].diff is None and rows["-cond_distance"].diff == 0.0
    assert rows["S_l (none)"].diff < 0 and rows["S_l (none)"].diff_high < 0
    assert rows["S_l (none)"].p_holm >= rows["S_l (none)"].p
    # the typed row is written as its columns, and read back from them
    first = table["rows"][0].to_dict()
    assert list(first) == ["predictor"] + [c.format(m) for m in ("val_loss", "recon_error",
                                                                 "hybrid_nll")
                                           for c in ("spearman_vs_-{}", "low_vs_-{}",
                                                     "high_vs_-{}", "vs_depth_-{}",
                                                     "diff_vs_depth_-{}", "diff_low_vs_depth_-{}",
                                                     "diff_high_vs_depth_-{}", "p_vs_depth_-{}",
                                                     "p_holm_vs_depth_-{}",
                                                     "partial_given_depth_-{}",
                                                     "partial_low_given_depth_-{}",
                                                     "partial_high_given_depth_-{}")]
    assert SpearmanRow.from_dict(first) == table["rows"][0]
    assert [SpearmanRow.from_dict(r.to_dict()) for r in table["rows"]] == table["rows"]
    assert table["oracle"] == 1 and table["worst"] == 10
    # a rival table that lacks a swept layer is refused
    with pytest.raises(ValueError, match="lack swept layers"):
        bridgeability_table(_layers(losses), score, rivals[1:], n_boot=10)


def _score(values, norm="none"):
    return [{"norm": norm, "layer": ll, "S": float(v), "candidate": True}
            for ll, v in enumerate(values, start=1)]


@pytest.mark.parametrize("verdict", ["above", "below", "not distinguishable"])
def test_bridgeability_table_gives_every_standing_on_hand_made_layers(verdict):
    """Through bridgeability_table on hand-made layer rows: a score that ranks the layers
    perfectly where depth barely does is "above"; a score unrelated to a target that depth
    ranks perfectly is "below"; a score equal in rank to depth is "not distinguishable"."""
    n = 12
    layers = list(range(1, n + 1))
    if verdict == "above":  # the loss follows a shuffle of the layers; the score ranks it exactly
        order = np.random.default_rng(3).permutation(n)
        losses = {ll: float(order[i]) for i, ll in enumerate(layers)}
        score = _score([-losses[ll] for ll in layers])
    elif verdict == "below":  # deeper is harder; the score is noise
        losses = {ll: 0.1 * ll for ll in layers}
        score = _score(np.random.default_rng(4).permutation(n))
    else:  # deeper is harder, and the score is (a rescaled) depth: no difference
        losses = {ll: 0.1 * ll + 0.01 * (ll % 3) for ll in layers}
        score = _score([-2.0 * ll for ll in layers])
    table = bridgeability_table(_layers(losses), score, n_boot=1000)
    rows = {r.predictor: r for r in table["rows"]}
    for target in ("val_loss", "recon_error", "hybrid_nll"):
        s = rows["S_l (none)"].of(target)
        assert s.vs_depth == verdict, (target, s)
        assert rows[DEPTH].of(target).vs_depth == ""
    s = rows["S_l (none)"].of()
    if verdict == "above":
        assert s.diff > 0 and s.diff_low > 0 and s.p_holm < 0.05 and s.partial > 0.9
    elif verdict == "below":
        assert s.diff < 0 and s.diff_high < 0 and s.p_holm < 0.05
    else:  # a monotone function of depth: the same ranks, nothing left once depth is known
        assert s.diff == 0.0 and s.p_holm >= 0.05 and s.partial is None


def test_bridgeability_table_names_the_oracle_by_hybrid_nll_and_by_validation_loss():
    """The validation loss ranks the layers opposite to the hybrid NLL: the oracle (and full
    training) follow the NLL, and both are named with their disagreement."""
    rows = [{"layer": ll, "val_loss": 1.0 / ll, "recon_error": 0.5, "hybrid_nll": 0.1 * ll}
            for ll in range(1, 6)]
    score = _score([0.1, 0.5, 0.2, 0.9, 0.3])
    table = bridgeability_table(rows, score, n_boot=50)
    assert (table["oracle"], table["worst"]) == (1, 5)
    assert table["oracle_by"]["by"] == {"val_loss": {"oracle": 5, "worst": 1},
                                        "hybrid_nll": {"oracle": 1, "worst": 5}}
    assert table["oracle_by"]["oracle_disagree"] and table["oracle_by"]["worst_disagree"]
    same = [{**r, "val_loss": r["hybrid_nll"]} for r in rows]
    agree = bridgeability_table(same, score, n_boot=50)["oracle_by"]
    assert not agree["oracle_disagree"] and not agree["worst_disagree"]


def test_bridgeability_table_resamples_training_seeds_on_two_levels():
    """With replicate seeds, the targets are the per-layer seed means, the intervals come from
    the two-level resample (wider where seeds disagree), and the spread and the oracle's
    standing over seeds are reported; one seed everywhere is the one-level table."""
    n = 10
    layers = list(range(1, n + 1))
    rows = [{"layer": ll, "val_loss": 0.1 * ll, "recon_error": 0.1 * ll, "hybrid_nll": 0.1 * ll}
            for ll in layers]
    score = _score([-3, -1, -2, -4, -5, -8, -6, -7, -10, -9])  # depth's order, a few swaps
    rng = np.random.default_rng(8)

    def replicates(noise):
        return {ll: [{k: 0.1 * ll + noise * rng.standard_normal() for k in
                      ("val_loss", "recon_error", "hybrid_nll")} for _ in range(2)]
                for ll in layers}

    one = bridgeability_table(rows, score, n_boot=400)
    assert one["seeds"] == {}
    quiet = bridgeability_table(rows, score, n_boot=400, seed_rows=replicates(0.001), l_star=2)
    noisy = bridgeability_table(rows, score, n_boot=400, seed_rows=replicates(0.3), l_star=2)
    assert quiet["seeds"]["n_seeds"] == 3
    spread = quiet["seeds"]["spread"]["hybrid_nll"]
    assert [r["layer"] for r in spread] == layers and all(r["n_seeds"] == 3 for r in spread)
    assert quiet["oracle"] == 1 and quiet["seeds"]["oracle"]["oracle"] == 1
    assert quiet["seeds"]["oracle"]["l_star_rank"] == 2

    def width(table):
        s = next(r for r in table["rows"] if r.predictor == "S_l (none)").of("hybrid_nll")
        return s.high - s.low, s.diff_high - s.diff_low

    assert width(noisy)[0] > width(quiet)[0] and width(noisy)[1] > width(quiet)[1]
    # a layer whose replicates are missing keeps its one seed (NaN-padded, not dropped)
    partial = replicates(0.001)
    del partial[3]
    got = bridgeability_table(rows, score, n_boot=50, seed_rows=partial)["seeds"]["spread"]
    assert [r["n_seeds"] for r in got["val_loss"]][:4] == [3, 3, 1, 3]


def _better_than_depth(rng, n=10, noise=3.15, pred_noise=0.4):
    """10 layers: the target is depth plus noise (Spearman with depth about 0.7); the
    predictor is the target plus a little noise (about 0.98): truly better than depth."""
    depth = -np.arange(1.0, n + 1)
    target = depth + noise * rng.normal(size=n)
    return target + pred_noise * rng.normal(size=n), depth, target


def _as_good_as_depth(rng, n=10, noise=3.15):
    """The null: predictor and depth are two equally noisy readings of the same latent
    order, and the target a third; neither predicts the target better in expectation."""
    latent = -np.arange(1.0, n + 1)
    return (latent + noise * rng.normal(size=n), latent + noise * rng.normal(size=n),
            latent + noise * rng.normal(size=n))


def test_paired_difference_of_two_identical_predictors_is_zero_and_not_distinguishable():
    from dihal.uncertainty import paired_spearman_difference, paired_verdict

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=10), rng.normal(size=10)
    d = paired_spearman_difference(x, x, y, n_boot=300, seed=1)
    # the same resamples for both sides: every replicate's difference is exactly 0
    assert d["diff"] == d["low"] == d["high"] == 0.0 and d["p"] == 1.0
    assert paired_verdict(d["diff"], d["p"]) == "not distinguishable"
    with pytest.raises(ValueError, match="predictor B"):
        paired_spearman_difference(x, x[:9], y)
    with pytest.raises(ValueError, match="method"):
        paired_spearman_difference(x, x, y, method="studentized")
    with pytest.raises(ValueError, match="non-finite"):
        paired_spearman_difference(np.r_[x[:9], np.nan], x, y)


def test_paired_difference_by_hand_and_seeded():
    from dihal.uncertainty import paired_spearman_difference

    rng = np.random.default_rng(1)
    a, b, y = _better_than_depth(rng)
    d = paired_spearman_difference(a, b, y, n_boot=500, seed=2)
    assert d["rho_a"] == pytest.approx(stats.spearmanr(a, y).statistic, abs=1e-12)
    assert d["rho_b"] == pytest.approx(stats.spearmanr(b, y).statistic, abs=1e-12)
    assert d["diff"] == pytest.approx(d["rho_a"] - d["rho_b"])
    assert d["low"] <= d["diff"] <= d["high"]
    assert paired_spearman_difference(a, b, y, n_boot=500, seed=2) == d
    # swapping the sides mirrors the interval and keeps the p-value
    m = paired_spearman_difference(b, a, y, n_boot=500, seed=2)
    assert (m["diff"], m["low"], m["high"]) == pytest.approx((-d["diff"], -d["high"], -d["low"]))
    assert m["p"] == pytest.approx(d["p"])


def test_paired_difference_bca_interval_and_p_agree():
    from dihal.uncertainty import paired_spearman_difference

    rng = np.random.default_rng(5)
    for _ in range(20):
        a, b, y = _better_than_depth(rng)
        d = paired_spearman_difference(a, b, y, n_boot=400, seed=3, method="bca")
        assert d["low"] <= d["high"]
        # the inverted interval: p < 0.05 exactly when 0 lies outside the 95 % interval
        # (up to one replicate's resolution)
        if d["low"] > 0.01 or d["high"] < -0.01:
            assert d["p"] < 0.05
        elif d["low"] < -0.01 and d["high"] > 0.01:
            assert d["p"] > 0.05


def test_partial_spearman_matches_the_rank_residual_correlation_and_is_nan_for_depth():
    from dihal.uncertainty import partial_spearman

    rng = np.random.default_rng(7)
    z = np.arange(12.0)
    y = z + 3 * rng.normal(size=12)
    x = y + rng.normal(size=12)
    pc = partial_spearman(x, y, z, n_boot=400, seed=1)
    # by hand: Pearson correlation of the ranks' residuals after regressing out z's ranks
    rx, ry, rz = (stats.rankdata(v) for v in (x, y, z))

    def resid(v):
        beta = np.polyfit(rz, v, 1)
        return v - np.polyval(beta, rz)

    assert pc["partial"] == pytest.approx(np.corrcoef(resid(rx), resid(ry))[0, 1], abs=1e-10)
    assert pc["low"] <= pc["partial"] <= pc["high"]
    # depth itself (or any monotone function of it) has nothing left to say
    assert math.isnan(partial_spearman(-z, y, z, n_boot=50)["partial"])
    # predictor and target that share only depth (independent given z): their Spearman is
    # high, their partial Spearman given depth is about 0 on average and its interval covers 0
    raw, part, covers = [], [], 0
    for i in range(100):
        zz = np.arange(30.0)
        xx, yy = zz + 8 * rng.normal(size=30), zz + 8 * rng.normal(size=30)
        pc = partial_spearman(xx, yy, zz, n_boot=200, seed=i)
        raw.append(stats.spearmanr(xx, yy).statistic)
        part.append(pc["partial"])
        covers += pc["low"] < 0 < pc["high"]
    assert np.mean(raw) > 0.4 and abs(np.mean(part)) < 0.05 and covers >= 85


def test_holm_by_hand():
    from dihal.uncertainty import holm

    # sorted 0.01, 0.02, 0.03, 0.5 of m = 4: 0.04, 0.06, 0.06 (monotone), 0.5
    assert holm([0.03, 0.5, 0.01, 0.02]) == pytest.approx([0.06, 0.5, 0.04, 0.06])
    assert holm([0.4, 0.9]) == pytest.approx([0.8, 0.9])
    assert holm([0.6, 0.7]) == [1.0, 1.0]  # capped
    out = holm([0.01, math.nan, 0.04])
    assert out[0] == pytest.approx(0.02) and math.isnan(out[1]) and out[2] == pytest.approx(0.04)
    assert holm([]) == []


def test_paired_verdict_every_way():
    from dihal.uncertainty import VERDICTS, paired_verdict

    assert paired_verdict(0.3, 0.01) == "above"
    assert paired_verdict(-0.3, 0.01) == "below"
    assert paired_verdict(0.3, 0.2) == "not distinguishable"
    assert paired_verdict(0.3, 0.05) == "not distinguishable"  # the level is strict
    assert paired_verdict(math.nan, 0.01) == "not distinguishable"
    assert paired_verdict(0.3, math.nan) == "not distinguishable"
    assert paired_verdict(0.3, 0.08, level=0.9) == "above"
    assert set(VERDICTS) == {"above", "below", "not distinguishable"}


def test_paired_standing_gives_every_verdict_on_hand_made_layers():
    """Hand-made layers on which the corrected verdicts come out each way."""
    from dihal.uncertainty import paired_standing

    depth = -np.arange(1.0, 13.0)
    # the target disagrees with depth in blocks: depth's Spearman with it is about 0.5
    target = np.array([3, 1, 2, 6, 4, 5, 9, 7, 8, 12, 10, 11], dtype=float)[::-1] * -1
    predictors = {"perfect": target.copy(),          # rank-identical to the target
                  "anti": -target,                    # the reverse order
                  "depth-ish": depth + 0.01 * np.arange(12) ** 2}  # depth's order exactly
    rows = paired_standing(predictors, depth, {"-nll": target}, n_boot=1000, seed=0)
    verdict = {r["predictor"]: r["verdict"] for r in rows}
    assert verdict == {"perfect": "above", "anti": "below", "depth-ish": "not distinguishable"}
    for r in rows:
        assert r["p_holm"] >= r["p"] and r["rho_reference"] == pytest.approx(
            stats.spearmanr(depth, target).statistic)


def test_paired_standing_corrects_over_the_family():
    from dihal.uncertainty import paired_standing

    rng = np.random.default_rng(11)
    a, depth, y = _better_than_depth(rng)
    predictors = {f"p{i}": a + 0.01 * rng.normal(size=10) for i in range(4)}
    targets = {"t1": y, "t2": y + 0.01 * rng.normal(size=10)}
    rows = paired_standing(predictors, depth, targets, n_boot=300, seed=1)
    assert len(rows) == 8 and {r["target"] for r in rows} == {"t1", "t2"}
    ps = [r["p"] for r in rows]
    # Holm's smallest adjusted p-value is m times the smallest raw one
    assert min(r["p_holm"] for r in rows) == pytest.approx(min(1.0, 8 * min(ps)))
    assert all(r["p_holm"] >= r["p"] for r in rows)


def _overlap_verdict(a, b, y, n_boot, seed):
    """The old rule: two separate percentile intervals, "above" when they do not overlap."""
    ia = spearman_interval(a, y, n_boot=n_boot, seed=seed)
    ib = spearman_interval(b, y, n_boot=n_boot, seed=seed)
    return compare_intervals((ia["low"], ia["high"]), (ib["low"], ib["high"]))


def test_paired_test_power_and_level_by_simulation():
    """200 simulated sweeps of 10 layers. With a predictor truly better than depth (Spearman
    about 0.98 against 0.68), the paired test says "above" far more often than the overlap of
    two intervals; under the null (equally good) its false "above" rate stays near or below
    the one-sided level (2.5 %)."""
    from dihal.uncertainty import paired_spearman_difference, paired_verdict

    rng = np.random.default_rng(2026)
    n_sim, n_boot = 200, 500
    paired = overlap = 0
    rho = []
    for i in range(n_sim):
        a, depth, y = _better_than_depth(rng)
        d = paired_spearman_difference(a, depth, y, n_boot=n_boot, seed=i)
        rho.append((d["rho_a"], d["rho_b"]))
        paired += paired_verdict(d["diff"], d["p"]) == "above"
        overlap += _overlap_verdict(a, depth, y, n_boot, i) == "above"
    mean_a, mean_b = np.mean(rho, axis=0)
    assert 0.95 < mean_a < 1.0 and 0.6 < mean_b < 0.76  # the simulated setting
    false_above = 0
    for i in range(n_sim):
        a, depth, y = _as_good_as_depth(rng)
        d = paired_spearman_difference(a, depth, y, n_boot=n_boot, seed=i)
        false_above += paired_verdict(d["diff"], d["p"]) == "above"
    print(f"\nabove rate: paired {paired / n_sim:.3f}, overlap {overlap / n_sim:.3f}; "
          f"null false-above rate {false_above / n_sim:.3f} (rho {mean_a:.2f} vs {mean_b:.2f})")
    assert paired / n_sim > overlap / n_sim + 0.1
    assert false_above / n_sim <= 0.05


# ---------------------------------------------------------------- training-seed variance

def test_seed_resample_means_draws_within_each_layer():
    from dihal.uncertainty import seed_resample_means

    # layer 0 has seeds {0, 10}, layer 1 the one value 5, layer 2 seeds {1, 2, 3}
    v = np.array([[10.0, 0.0, np.nan], [5.0, np.nan, np.nan], [3.0, 1.0, 2.0]])
    idx, means = seed_resample_means(v, n_boot=4000, seed=0)
    assert idx.shape == means.shape == (4000, 3)
    for layer, allowed in ((0, {0.0, 5.0, 10.0}), (1, {5.0}), (2, None)):
        m = means[idx == layer]
        if allowed is not None:
            assert set(np.round(m, 12)) <= allowed
        assert m.mean() == pytest.approx(np.nanmean(v[layer]), abs=0.1)
    # layer 0: the mean of two draws from {0, 10} is 5 half the time
    assert np.mean(means[idx == 0] == 5.0) == pytest.approx(0.5, abs=0.05)
    fixed, fm = seed_resample_means(v, n_boot=10, seed=0, resample_layers=False)
    assert (fixed == np.arange(3)).all() and (fm[:, 1] == 5.0).all()
    with pytest.raises(ValueError, match="no seed value"):
        seed_resample_means(np.array([[1.0], [np.nan]]))
    with pytest.raises(ValueError, match="layers, seeds"):
        seed_resample_means(np.arange(3.0))


def test_seed_spread_by_hand():
    from dihal.uncertainty import seed_spread

    rows = seed_spread([[1.0, 3.0], [2.0, np.nan]], layers=[4, 7])
    assert rows[0] == {"layer": 4, "n_seeds": 2, "mean": 2.0, "sd": pytest.approx(math.sqrt(2)),
                       "min": 1.0, "max": 3.0}
    assert rows[1]["n_seeds"] == 1 and math.isnan(rows[1]["sd"]) and rows[1]["mean"] == 2.0
    with pytest.raises(ValueError, match="layer names"):
        seed_spread([[1.0]], layers=[1, 2])


def test_two_level_spearman_widens_with_seed_noise():
    from dihal.uncertainty import two_level_spearman

    rng = np.random.default_rng(3)
    layers = np.arange(10.0)
    quiet = layers[:, None] + 0.01 * rng.normal(size=(10, 3))
    noisy = layers[:, None] + 4.0 * rng.normal(size=(10, 3))
    q = two_level_spearman(layers, quiet, n_boot=800, seed=1)
    n = two_level_spearman(layers, noisy, n_boot=800, seed=1)
    # seeds that agree leave only the layers (a layer drawn twice is tied on the predictor
    # but not quite on its seed means, so replicates fall just short of 1)
    assert q["rho"] == 1.0 and q["low"] > 0.9
    assert q["rho"] == pytest.approx(stats.spearmanr(layers, quiet.mean(axis=1)).statistic)
    assert n["high"] - n["low"] > q["high"] - q["low"] + 0.2
    assert n["low"] <= n["rho"] <= n["high"]


def test_two_level_paired_difference_widens_with_seed_noise():
    from dihal.uncertainty import paired_spearman_difference, two_level_paired_difference

    rng = np.random.default_rng(4)
    a, depth, y = _better_than_depth(rng)
    one = paired_spearman_difference(a, depth, y, n_boot=1000, seed=2)
    # seeds that all agree: the two-level resample is the one-level one (same layer draws)
    same = two_level_paired_difference(a, depth, np.repeat(y[:, None], 3, axis=1),
                                       n_boot=1000, seed=2)
    assert {k: same[k] for k in ("diff", "low", "high")} == pytest.approx(
        {k: one[k] for k in ("diff", "low", "high")})
    assert same["p"] == pytest.approx(one["p"])
    # seeds that disagree (the same seed means as y): the same point, less certainty
    seeds = y[:, None] + 3.0 * rng.normal(size=(10, 3))
    seeds -= seeds.mean(axis=1, keepdims=True) - y[:, None]
    two = two_level_paired_difference(a, depth, seeds, n_boot=1000, seed=2)
    assert two["diff"] == pytest.approx(one["diff"])
    assert two["p"] > one["p"] and two["low"] < one["low"]


def test_seed_oracle_moves_with_seed_noise_and_gives_l_star_standing():
    from dihal.uncertainty import seed_oracle

    # layer 4 (1.0) is best in the mean; layer 3's two seeds (0.5, 3.5) disagree: resampled,
    # its mean is 0.5 a quarter of the time (then it is the oracle), 2.0 half, 3.5 a quarter
    v = np.array([[5.0, 5.0], [2.0, 2.0], [0.5, 3.5], [1.0, 1.0]])
    out = seed_oracle(v, [1, 2, 3, 4], l_star=2, n_boot=4000, seed=0)
    assert out["oracle"] == 4 and out["l_star_rank"] == 2 and out["gap"] == pytest.approx(1.0)
    assert out["picks"][3] == pytest.approx(0.25, abs=0.03)
    assert out["l_star_is_oracle"] == 0.0
    assert out["oracle_share"] == pytest.approx(0.75, abs=0.03)
    # l* (2.0) is second, or third when layer 3 draws 0.5 (a tie at 2.0 does not outrank it)
    assert out["l_star_rank_low"] == 2 and out["l_star_rank_high"] == 3
    assert out["gap_low"] == pytest.approx(1.0) and out["gap_high"] == pytest.approx(1.5)
    assert out["gap_low"] <= out["gap"] <= out["gap_high"]
    quiet = seed_oracle(np.array([[3.0, 3.0], [1.0, 1.0]]), [5, 6], n_boot=100)
    assert quiet == {"oracle": 6, "oracle_share": 1.0, "picks": {6: 1.0}}
    with pytest.raises(ValueError, match="not one of the layers"):
        seed_oracle(v, [1, 2, 3, 4], l_star=9, n_boot=10)


def test_oracle_by_measures_agree_and_disagree():
    from dihal.uncertainty import oracle_by_measures

    rows = [{"layer": 1, "val_loss": 0.1, "hybrid_nll": 3.0},
            {"layer": 2, "val_loss": 0.2, "hybrid_nll": 2.0},
            {"layer": 3, "val_loss": 0.3, "hybrid_nll": 4.0}]
    out = oracle_by_measures(rows)
    assert out["by"] == {"val_loss": {"oracle": 1, "worst": 3},
                         "hybrid_nll": {"oracle": 2, "worst": 3}}
    assert out["oracle_disagree"] and not out["worst_disagree"]
    same = oracle_by_measures([{**r, "hybrid_nll": r["val_loss"]} for r in rows])
    assert not same["oracle_disagree"] and not same["worst_disagree"]
    # ties go to the shallower layer; NaN rows are left out of that measure
    tied = oracle_by_measures([{"layer": 2, "val_loss": 1.0, "hybrid_nll": math.nan},
                               {"layer": 1, "val_loss": 1.0, "hybrid_nll": 5.0}])
    assert tied["by"]["val_loss"] == {"oracle": 1, "worst": 1}
    assert tied["by"]["hybrid_nll"] == {"oracle": 1, "worst": 1}
    with pytest.raises(ValueError, match="hybrid_nll"):
        oracle_by_measures([{"layer": 1, "val_loss": 1.0}])


# ---------------------------------------------------------------- power

def _exact(mean, sd, n=200, seed=0):
    z = np.random.default_rng(seed).normal(size=n)
    return mean + sd * (z - z.mean()) / z.std(ddof=1)


def test_samples_for_power_known_normal_case():
    from dihal.uncertainty import samples_for_power

    # effect 0.5, two-sided 5 %, 80 % power: normal formula (1.96 + 0.8416)^2 / 0.25 = 31.4;
    # the paired t-test needs 34 (the textbook / G*Power value)
    out = samples_for_power(_exact(0.5, 1.0))
    assert out["n_normal"] == pytest.approx(31.395, abs=0.01)
    assert out["n"] == 34 and out["effect"] == pytest.approx(0.5)
    # the sign does not matter; a larger spread needs quadratically more samples
    assert samples_for_power(_exact(-0.5, 1.0))["n"] == 34
    assert samples_for_power(_exact(0.25, 1.0))["n_normal"] == pytest.approx(4 * 31.395, abs=0.05)
    # 90 % power at 1 %: (2.5758 + 1.2816)^2 / 0.25 = 59.5
    assert samples_for_power(_exact(0.5, 1.0), level=0.99, power=0.9)["n_normal"] == (
        pytest.approx(59.52, abs=0.02))
    assert samples_for_power(_exact(0.0, 1.0))["n"] is None
    assert samples_for_power([0.3, 0.3, 0.3])["n"] == 2
    # already 200 samples at effect 0.5: the observed power is essentially 1
    assert out["power_at_observed"] > 0.99
    with pytest.raises(ValueError, match="paired differences"):
        samples_for_power([1.0])


def test_samples_for_power_reaches_its_power_by_simulation():
    """At the computed n, a simulated paired t-test rejects in about 80 % of runs."""
    from dihal.uncertainty import samples_for_power

    n = samples_for_power(_exact(0.4, 1.0))["n"]
    rng = np.random.default_rng(8)
    hits = [stats.ttest_1samp(rng.normal(0.4, 1.0, size=n), 0.0).pvalue < 0.05
            for _ in range(2000)]
    assert np.mean(hits) == pytest.approx(0.8, abs=0.03)


def test_samples_for_power_from_per_text():
    from dihal.uncertainty import paired_log_ppl_differences

    d = paired_log_ppl_differences([(10.0, 5), (6.0, 3)], [(4.0, 4), (3.0, 3)])
    assert d.tolist() == pytest.approx([1.0, 1.0])
    with pytest.raises(ValueError, match="pairing"):
        paired_log_ppl_differences([(1.0, 1)], [])
    with pytest.raises(ValueError, match="no judge token"):
        paired_log_ppl_differences([(0.0, 0)], [(1.0, 1)])


def test_log_ppl_difference_every_verdict():
    from dihal.uncertainty import log_ppl_difference

    rng = np.random.default_rng(9)

    def side(mean_nll, n=64):  # per-sample (NLL, tokens): tokens 20..40, NLL per token ~ mean
        tok = rng.integers(20, 41, size=n)
        return [(float(t * (mean_nll + 0.3 * rng.normal())), int(t)) for t in tok]

    low, high, same = side(3.0), side(3.5), side(3.0)
    up = log_ppl_difference(high, low, n_boot=800)
    assert up["verdict"] == "above" and up["ratio"] == pytest.approx(math.exp(up["diff"]))
    nll = sum(x for x, _ in high) / sum(t for _, t in high) - sum(
        x for x, _ in low) / sum(t for _, t in low)
    assert up["diff"] == pytest.approx(nll) and up["low"] <= up["diff"] <= up["high"]
    assert log_ppl_difference(low, high, n_boot=800)["verdict"] == "below"
    assert log_ppl_difference(low, same, n_boot=800)["verdict"] == "not distinguishable"
    # paired on identical samples: every replicate's difference is 0
    z = log_ppl_difference(low, low, paired=True, n_boot=100)
    assert (z["diff"], z["low"], z["high"], z["verdict"]) == (0.0, 0.0, 0.0, "not distinguishable")
    with pytest.raises(ValueError, match="equal counts"):
        log_ppl_difference(low, low[:-1], paired=True)
    with pytest.raises(ValueError, match="judge token"):
        log_ppl_difference(low, [(1.0, 0), (1.0, 1)])


def test_two_level_partial_spearman_matches_one_level():
    from dihal.uncertainty import partial_spearman, two_level_partial_spearman

    rng = np.random.default_rng(12)
    z = np.arange(10.0)
    y = z + 3 * rng.normal(size=10)
    x = y + rng.normal(size=10)
    one = partial_spearman(x, y, z, n_boot=500, seed=4)
    # seeds that agree: the same resamples, the same numbers
    same = two_level_partial_spearman(x, np.repeat(y[:, None], 2, axis=1), z, n_boot=500, seed=4)
    assert same == pytest.approx(one)
    noisy = y[:, None] + 3.0 * rng.normal(size=(10, 3))
    noisy -= noisy.mean(axis=1, keepdims=True) - y[:, None]
    two = two_level_partial_spearman(x, noisy, z, n_boot=500, seed=4)
    assert two["partial"] == pytest.approx(one["partial"]) and two["low"] < one["low"]


def test_paired_standing_with_seed_targets_uses_the_two_level_resample():
    from dihal.uncertainty import paired_standing, two_level_paired_difference

    rng = np.random.default_rng(13)
    a, depth, y = _better_than_depth(rng)
    seeds = y[:, None] + rng.normal(size=(10, 3))
    rows = paired_standing({"a": a}, depth, {"-nll": seeds}, n_boot=400, seed=2)
    d = two_level_paired_difference(a, depth, seeds, n_boot=400, seed=2)
    assert (rows[0]["diff"], rows[0]["low"], rows[0]["high"], rows[0]["p"]) == pytest.approx(
        (d["diff"], d["low"], d["high"], d["p"]))
    assert rows[0]["verdict"] in ("above", "not distinguishable")
    with pytest.raises(ValueError, match="percentile"):
        paired_standing({"a": a}, depth, {"-nll": seeds}, n_boot=10, method="bca")
