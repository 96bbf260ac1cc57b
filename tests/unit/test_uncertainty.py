"""Bootstrap intervals, and the bridgeability table built from them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dihal.locate.predictors import ORIENTATION
from dihal.replace.bridgeability import DEPTH, bridgeability_table
from dihal.rows import SpearmanRow
from dihal.uncertainty import (
    bootstrap_interval,
    compare_intervals,
    jackknife_interval,
    resample_indices,
    spearman_interval,
)
from tests.tiny import predictor_row, score_row


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
    score = [score_row(ll, float(s))
             for ll, s in zip(layers, rng.normal(size=10), strict=True)]
    # rivals: cond_distance grows with depth (oriented: -cond_distance, perfect), the others noise
    rivals = [predictor_row(ll, **{**{name: float(rng.normal()) for name in ORIENTATION},
                                   "cond_distance": 0.05 * ll}) for ll in layers]
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
                                                     "partial_high_given_depth_-{}",
                                                     "partial_undefined_given_depth_-{}")]
    assert SpearmanRow.from_dict(first) == table["rows"][0]
    assert [SpearmanRow.from_dict(r.to_dict()) for r in table["rows"]] == table["rows"]
    assert table["oracle"] == 1 and table["worst"] == 10
    # a rival table that lacks a swept layer is refused
    with pytest.raises(ValueError, match="lack swept layers"):
        bridgeability_table(_layers(losses), score, rivals[1:], n_boot=10)


def _score(values, norm="none"):
    return [score_row(ll, float(v), norm)
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
    # x ranks the layers nearly as depth does (Spearman 0.97): in a quarter of the resamples
    # the drawn layers are ranked alike and the partial is undefined, so no interval is given
    assert pc["undefined_share"] > 0.2 and pc["suppressed"] and math.isnan(pc["low"])
    wide = partial_spearman(x + 4 * rng.normal(size=12), y, z, n_boot=400, seed=1)
    assert wide["undefined_share"] <= 0.05 and wide["low"] <= wide["partial"] <= wide["high"]
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

def _per_text(rng, mean_nll, n, sd=0.3):
    """n samples of 20..40 judge tokens whose per-token NLL scatters around `mean_nll`."""
    tokens = rng.integers(20, 41, size=n)
    return [(float(t * (mean_nll + sd * e)), int(t))
            for t, e in zip(tokens, rng.standard_normal(n), strict=True)]


@pytest.mark.parametrize("family", [1, 4])
def test_samples_for_effect_reaches_its_power_under_the_test_it_plans_for(family):
    """Sized from a pilot of 400 samples a side for Gen.PPL 1.25x apart, at alpha / family:
    the token-weighted bootstrap test (log_ppl_difference) at that n rejects at that alpha in
    about 80 % of simulated runs in which the Gen.PPL truly differ by 1.25x."""
    from dihal.evaluate.ppl_difference import log_ppl_difference, samples_for_effect

    rng = np.random.default_rng(11)
    shift = math.log(1.25)
    plan = samples_for_effect(_per_text(rng, 4.0, 400, 0.5),
                              _per_text(rng, 4.0 + shift, 400, 0.5), family=family)
    assert plan["alpha"] == pytest.approx(0.05 / family) and plan["observed_n"] == 400
    n = plan["n"]
    assert 20 < n < 300
    hits = [log_ppl_difference(_per_text(rng, 4.0, n, 0.5), _per_text(rng, 4.0 + shift, n, 0.5),
                               n_boot=400, seed=i)["p"] < plan["alpha"] for i in range(200)]
    assert np.mean(hits) == pytest.approx(0.8, abs=0.1)


def test_samples_for_effect_pairs_by_sample_index_and_refuses_bad_input():
    """Paired input is keyed by sample index: a sample missing on one side (empty) leaves the
    others paired with their own index; by list position they would slip."""
    from dihal.evaluate.ppl_difference import samples_for_effect

    rng = np.random.default_rng(12)
    a = _per_text(rng, 4.0, 40, sd=0.5)
    b = [(nll + 0.2 * t, t) for nll, t in a]  # sample i of B: sample i of A, 0.2 nats worse
    keyed_a = {i: v for i, v in enumerate(a) if i != 7}  # A's sample 7 was empty
    keyed_b = dict(enumerate(b))
    paired = samples_for_effect(keyed_a, keyed_b)
    unpaired = samples_for_effect(list(keyed_a.values()), b)
    assert paired["paired"] and paired["observed_n"] == 39
    assert paired["sd"] < 0.1 * unpaired["sd"] and paired["n"] < unpaired["n"]
    slipped = samples_for_effect(dict(enumerate(keyed_a.values())), keyed_b)  # by position
    assert slipped["sd"] > 5 * paired["sd"]
    with pytest.raises(ValueError, match="ratio > 0 and != 1"):
        samples_for_effect(a, b, ratio=1.0)
    with pytest.raises(ValueError, match="side B: need >= 2 scored samples"):
        samples_for_effect(a, [(1.0, 0), (2.0, 3)])


def test_log_ppl_difference_every_verdict():
    from dihal.evaluate.ppl_difference import log_ppl_difference

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


# --------------------------------------------------------------- the pre-registered primary test

SWEPT10 = [1, 2, 3, 4, 8, 12, 16, 21, 25, 29]


def _issue_score(layers):
    """S_l that ranks the layers as depth does but for layer 2, which it puts after 3 and 4:
    two discordant pairs with depth, as SmolLM2's S_l (none) over the default sweep."""
    order = sorted(layers, key=lambda ll: (4.5 if ll == 2 else ll))
    return [-float(order.index(ll)) for ll in layers]


def test_design_min_p_is_the_floor_of_the_primary_test_and_reproduces_the_ten_layer_case():
    from dihal.uncertainty import design_min_p, primary_test

    x, z = _issue_score(SWEPT10), [-float(ll) for ll in SWEPT10]
    assert stats.spearmanr(x, z)[0] == pytest.approx(0.9636, abs=1e-4)
    floor = design_min_p(x, z, seed=0)
    # S_l and depth rank the drawn layers alike in ~43 % of resamples: no target can go lower
    assert floor["ties"] == pytest.approx(0.43, abs=0.015) and floor["layers"] == 10
    assert floor["p_min"] >= floor["ties"]
    # a target ranked exactly as S_l reaches the floor; any other target stays above it
    assert primary_test(x, z, x, seed=0)["p"] == floor["p_min"]
    rng = np.random.default_rng(0)
    for _ in range(5):
        assert primary_test(x, z, rng.normal(size=10), n_boot=2000, seed=1)["p"] >= \
            design_min_p(x, z, n_boot=2000, seed=1)["p_min"]
    # over all 29 candidate layers with many discordant pairs the floor falls far below 0.05
    every = list(range(1, 30))
    shuffled = [-float(v) + 3 * math.sin(v) for v in every]
    assert design_min_p(shuffled, [-float(v) for v in every])["p_min"] < 0.005


@pytest.mark.parametrize("verdict", ["better", "not distinguishable", "design cannot decide"])
def test_primary_test_every_verdict_on_hand_made_layers(verdict):
    """A score that ranks the target exactly where depth does not is "better"; the same score
    against a target depth ranks exactly is "not distinguishable" (the design could have
    separated them); at the ten layers where S_l differs from depth in one place, even a
    target ranked exactly as S_l is "design cannot decide"."""
    from dihal.uncertainty import primary_test

    if verdict == "design cannot decide":
        layers = SWEPT10
        x = _issue_score(layers)
        y = x  # the most favourable outcome the bridges could give
    else:
        layers = list(range(1, 21))
        x = [-abs(ll - 10.5) for ll in layers]  # the middle layers are easiest
        y = x if verdict == "better" else [-float(ll) for ll in layers]
    t = primary_test(x, [-float(ll) for ll in layers], y, seed=3)
    assert t["verdict"] == verdict and t["n_boot"] == 10_000 and t["layers"] == len(layers)
    if verdict == "better":
        assert t["p"] < 0.05 and t["diff"] > 0 and t["low"] > 0
    elif verdict == "not distinguishable":
        assert t["p"] > 0.5 and t["p_min"] < 0.05 and t["diff"] < 0
    else:
        assert t["p"] == t["p_min"] >= 0.05 and t["diff"] > 0
    assert primary_test(x, [-float(ll) for ll in layers], y, seed=3) == t  # seeded


def test_primary_test_is_one_sided_refuses_few_resamples_and_takes_seed_targets():
    from dihal.uncertainty import primary_test

    layers = list(range(1, 13))
    x, z = [-abs(ll - 6.3) for ll in layers], [-float(ll) for ll in layers]
    # the reverse claim (depth better than S_l on a target S_l ranks exactly) is never "better"
    assert primary_test(z, x, x)["p"] > 0.9
    with pytest.raises(ValueError, match=">= 1000 resamples"):
        primary_test(x, z, x, n_boot=999)
    # a (layers, seeds) target: the per-layer seed means, resampled on two levels
    rng = np.random.default_rng(2)
    seeds = np.array(x)[:, None] + rng.normal(scale=0.01, size=(12, 3))
    seeds[0, 2] = np.nan  # a layer with fewer seeds
    t = primary_test(x, z, seeds, seed=1)
    assert t["verdict"] == "better" and t["rho"] == pytest.approx(1.0)


def test_primary_standing_through_the_bridgeability_table():
    """bridgeability_table with the primary normalisation runs the primary test on -hybrid
    NLL and gives the floor at every candidate layer and the layers a decisive sweep needs."""
    from dihal.rows import PrimaryTest

    every = list(range(1, 30))
    s_all = {ll: v for ll, v in zip(every, _issue_score(every), strict=True)}
    s_all.update({ll: -float(ll) + 4 * math.sin(ll) for ll in every if ll > 4})
    score = [score_row(ll, s_all[ll]) for ll in every]
    score += [score_row(ll, float(ll), "rms") for ll in every]
    rows = [{"layer": ll, "val_loss": 1.0, "recon_error": 0.5 + 0.01 * ll,
             "hybrid_nll": -s_all[ll]} for ll in SWEPT10]
    rows[0]["val_loss"] = 0.5
    table = bridgeability_table(rows, score, n_boot=200, primary_norm="none")
    t = table["primary"]
    assert isinstance(t, PrimaryTest) and t.predictor == "S_l (none)"
    assert t.target == "hybrid_nll" and t.n_boot == 10_000 and t.layers == 10
    assert t.layers_all == 29 and t.p_min_all < 0.05
    assert 10 < t.layers_needed <= 29
    assert PrimaryTest.from_dict(t.to_dict()) == t
    assert bridgeability_table(rows, score, n_boot=200)["primary"] is None
    with pytest.raises(ValueError, match="primary normalisation 'robust' has no S_l"):
        bridgeability_table(rows, score, n_boot=200, primary_norm="robust")


def test_partial_spearman_reports_its_undefined_resamples_and_suppresses_a_biased_interval():
    """At the ten layers where S_l differs from depth only in where layer 2 falls, the partial
    Spearman is undefined in every resample that ranks the drawn layers alike (~43 %): the
    share is reported and the interval, which would rest on the resamples holding layer 2 and
    a neighbour, is not given. Over 20 layers with a score far from depth it is given."""
    from dihal.uncertainty import MAX_UNDEFINED, partial_spearman, two_level_partial_spearman

    z = [-float(ll) for ll in SWEPT10]
    x = _issue_score(SWEPT10)
    y = [xi + 0.3 * math.cos(i) for i, xi in enumerate(x)]
    pc = partial_spearman(x, y, z, seed=0)
    assert pc["undefined_share"] == pytest.approx(pc["undefined"] / 2000)
    assert pc["undefined_share"] == pytest.approx(0.43, abs=0.03) and MAX_UNDEFINED < 0.4
    assert pc["suppressed"] and math.isnan(pc["low"]) and math.isnan(pc["high"])
    assert math.isfinite(pc["partial"])
    seeds = np.array(y)[:, None] + np.zeros((10, 2))
    assert two_level_partial_spearman(x, seeds, z, seed=0)["suppressed"]
    layers = list(range(1, 21))
    far = partial_spearman([-abs(ll - 10.3) for ll in layers],
                           [-abs(ll - 10.3) + 0.1 * math.sin(ll) for ll in layers],
                           [-float(ll) for ll in layers], seed=0)
    assert far["undefined_share"] <= MAX_UNDEFINED and not far["suppressed"]
    assert far["low"] <= far["partial"] <= far["high"]
    # through the bridgeability table: the share is in the row, the interval is not
    score = [score_row(ll, v)
             for ll, v in zip(SWEPT10, x, strict=True)]
    rows = [{"layer": ll, "val_loss": -v, "recon_error": -v, "hybrid_nll": -v}
            for ll, v in zip(SWEPT10, y, strict=True)]
    got = {r.predictor: r for r in bridgeability_table(rows, score, n_boot=2000)["rows"]}
    s = got["S_l (none)"].of("hybrid_nll")
    assert s.partial_undefined == pytest.approx(0.43, abs=0.03)
    assert s.partial is not None and s.partial_low is None and s.partial_high is None


def test_the_oracle_is_chosen_on_the_first_half_of_the_held_out_sequences():
    """With the hybrid NLL measured on each half of the held-out sequences, the oracle and the
    worst layer are chosen on the first half (the second judges them); a sweep measured
    before the halves falls back to the NLL on all of them and says so (chosen_by)."""
    import torch

    from dihal.replace.hybrid import next_token_nll
    from dihal.replace.stage import sequence_nll, split_halves

    rows = [{"layer": ll, "val_loss": 0.1 * ll, "recon_error": 0.5, "hybrid_nll": 0.1 * ll,
             "hybrid_nll_select": 1.0 - 0.1 * ll, "hybrid_nll_judge": 0.1 * ll}
            for ll in range(1, 6)]
    score = _score([0.1, 0.5, 0.2, 0.9, 0.3])
    table = bridgeability_table(rows, score, n_boot=50)
    assert (table["oracle"], table["worst"]) == (5, 1)
    assert table["oracle_by"]["chosen_by"] == "hybrid_nll_select"
    assert table["oracle_by"]["by"]["hybrid_nll"] == {"oracle": 1, "worst": 5}
    old = [{k: v for k, v in r.items() if not k.startswith("hybrid_nll_")} for r in rows]
    table = bridgeability_table(old, score, n_boot=50)
    assert (table["oracle"], table["worst"]) == (1, 5)
    assert table["oracle_by"]["chosen_by"] == "hybrid_nll"
    # the halves: the mean NLL of each sequence, the first half's and the second's
    assert split_halves([1.0, 2.0, 3.0, 4.0, 5.0]) == {"hybrid_nll_select": 1.5,
                                                       "hybrid_nll_judge": 4.0}
    assert split_halves([1.0]) == {"hybrid_nll_select": None, "hybrid_nll_judge": None}
    gen = torch.Generator().manual_seed(0)
    logits, ids = torch.randn(4, 6, 11, generator=gen), torch.randint(0, 11, (4, 6), generator=gen)
    each = sequence_nll(logits, ids)
    assert len(each) == 4
    assert np.mean(each) == pytest.approx(next_token_nll(lambda _: logits, ids), abs=1e-6)
    assert each[1] == pytest.approx(next_token_nll(lambda _: logits[1:2], ids[1:2]), abs=1e-6)


def test_rank_rows_counts_average_ranks_as_scipy():
    """The vectorised ranks of resampled layers (many ties: a layer drawn twice) are scipy's
    average ranks; longer rows go to scipy itself."""
    from dihal.uncertainty import _rank_rows

    rng = np.random.default_rng(0)
    for width in (3, 10, 29, 80):
        x = rng.integers(0, 6, size=(300, width)).astype(float)
        assert np.array_equal(_rank_rows(x), stats.rankdata(x, axis=1)), width
