"""Layer score, selection and correlations on hand-computed tables."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dihal.inputs import GeometryRow, TokenResamples
from dihal.locate.score import depth_control, layer_scores, select_layer, spearman, zscore

Z1 = math.sqrt(1.5)  # z-score of the ends of (1, 2, 3): (3 - 2) / sqrt(2/3)


def row(layer, m_curv, m_mono, k_eff, norm="none", tr_sigma=2.0):
    return GeometryRow(layer, norm, m_curv, m_mono, m_mono_median=m_mono, m_mono_q05=0.5,
                       m_mono_min_eig=0.25, k_eff=k_eff, tr_sigma=tr_sigma, lambda_max=1.0)


def toy_table():
    """4 layers; layer 0 has extreme values that must not leak into the candidates' z-scores."""
    return [
        row(0, 100.0, 50.0, 500.0, tr_sigma=1.0),
        row(1, 1.0, 3.0, 3.0),
        row(2, 2.0, 3.0, 2.0),
        row(3, 3.0, 3.0, 1.0),
    ]


def test_zscore_known_values():
    np.testing.assert_allclose(zscore([1, 2, 3]), [-Z1, 0.0, Z1])
    np.testing.assert_allclose(zscore([2.0, 4.0]), [-1.0, 1.0])  # population std = 1


def test_zscore_constant_column_gives_zeros():
    for values in ([0.1, 0.1, 0.1], [5.0]):
        z = zscore(values)
        assert np.array_equal(z, np.zeros(len(values)))


def test_zscore_rejects_bad_input():
    with pytest.raises(ValueError, match="finite"):
        zscore([1.0, math.nan, 2.0])
    with pytest.raises(ValueError, match="finite"):
        zscore([1.0, math.inf])
    with pytest.raises(ValueError, match="non-empty"):
        zscore([])


def test_layer_scores_hand_computed():
    out = layer_scores(toy_table(), candidate_layers=[1, 2, 3])
    by_layer = {r.layer: r for r in out}
    # z_curv = (-Z1, 0, Z1); m_mono constant -> 0; z_keff = (Z1, 0, -Z1); S = 2 * (-Z1, 0, Z1)
    for layer, sign in ((1, -1), (2, 0), (3, 1)):
        r = by_layer[layer]
        assert r.z_curv == pytest.approx(sign * Z1)
        assert r.z_mono == 0.0
        assert r.z_keff == pytest.approx(-sign * Z1)
        assert r.S == pytest.approx(2 * sign * Z1)
        assert r.candidate is True
    assert [by_layer[layer].rank for layer in (1, 2, 3)] == [3, 2, 1]
    ref = by_layer[0]
    assert ref.candidate is False and ref.rank is None
    assert all(math.isnan(getattr(ref, key)) for key in ("z_curv", "z_mono", "z_keff", "S"))
    assert ref.tr_sigma == 1.0 and ref.m_mono_q05 == 0.5  # the geometry columns pass through
    assert select_layer(out, "none") == 3


def test_layer_scores_are_per_normalization():
    rms = [
        row(0, 0.0, 0.0, 0.0, norm="rms"),
        row(1, 3.0, 1.0, 1.0, norm="rms"),
        row(2, 2.0, 1.0, 1.0, norm="rms"),
        row(3, 1.0, 1.0, 1.0, norm="rms"),
    ]
    out = layer_scores(toy_table() + rms, candidate_layers=(3, 1, 2))
    assert [(r.norm, r.layer) for r in out] == [
        ("none", 0), ("none", 1), ("none", 2), ("none", 3),
        ("rms", 0), ("rms", 1), ("rms", 2), ("rms", 3),
    ]  # fmt: skip
    assert select_layer(out, "none") == 3
    assert select_layer(out, "rms") == 1
    rms_rows = {r.layer: r for r in out if r.norm == "rms"}
    assert rms_rows[1].S == pytest.approx(Z1)


def test_ties_go_to_the_shallower_layer():
    rows = [row(1, 1.0, 0.0, 0.0), row(2, 1.0, 0.0, 0.0), row(3, 0.0, 0.0, 0.0)]
    out = layer_scores(rows, [1, 2, 3])
    assert {r.layer: r.rank for r in out} == {1: 1, 2: 2, 3: 3}
    assert select_layer(out, "none") == 1


def test_all_constant_columns_give_zero_scores():
    rows = [row(layer, 1.0, 2.0, 3.0) for layer in (1, 2, 3)]
    out = layer_scores(rows, [1, 2, 3])
    assert all(r.S == 0.0 for r in out)
    assert select_layer(out, "none") == 1


def test_layer_scores_rejects_bad_tables():
    with pytest.raises(ValueError, match="candidate layers \\[4\\]"):
        layer_scores(toy_table(), [1, 2, 4])
    with pytest.raises(ValueError, match="duplicate"):
        layer_scores(toy_table() + [row(2, 0.0, 0.0, 0.0)], [1, 2, 3])
    with pytest.raises(ValueError, match="empty"):
        layer_scores(toy_table(), [])
    with pytest.raises(ValueError, match="duplicates"):
        layer_scores(toy_table(), [1, 1, 2])
    with pytest.raises(ValueError, match="finite"):
        layer_scores(toy_table() + [row(4, math.inf, 0.0, 0.0)], [1, 4])


def test_select_layer_unknown_norm():
    out = layer_scores(toy_table(), [1, 2, 3])
    with pytest.raises(ValueError, match="standardize"):
        select_layer(out, "standardize")


def test_spearman_known_values():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # rho = 1 - 6 * sum(d^2) / (n (n^2 - 1)) = 1 - 6 * 4 / 120 = 0.8
    assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)


def test_spearman_drops_nan_pairs():
    got = spearman([1, 2, math.nan, 3, 4, 5], [2, 1, 7.0, 4, 3, 5])
    assert got == pytest.approx(0.8)
    assert spearman([1, 2, 3, 4], [1, math.nan, 3, 4]) == pytest.approx(1.0)


def test_spearman_bad_inputs():
    with pytest.raises(ValueError, match="at least 3"):
        spearman([1, 2, math.nan, 4], [1, 2, 3, math.nan])
    with pytest.raises(ValueError, match="equal length"):
        spearman([1, 2, 3], [1, 2])
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))  # undefined for a constant side


def test_depth_control():
    layers = [1, 2, 3, 4]
    np.testing.assert_array_equal(depth_control(layers), [-1.0, -2.0, -3.0, -4.0])
    # bridgeability measured as a loss (lower = better) that grows with depth:
    # "shallower is better" ranks the layers perfectly against -loss
    assert spearman(depth_control(layers), [-0.1, -0.2, -0.4, -0.8]) == pytest.approx(1.0)


def test_l_star_stability_counts_the_replicates_picks():
    from dihal.locate.stage import l_star_stability

    # 3 candidate layers; curvature alone ranks them (mono, k_eff constant): replicates 0-6
    # make layer 2 the best, 7-8 layer 3 and 9 layer 1
    best = [2] * 7 + [3] * 2 + [1]
    cols = {k: [] for k in ("resample", "layer", "norm", "m_curv", "m_mono", "k_eff")}
    for b, top in enumerate(best):
        for layer in (1, 2, 3):
            for k, v in (("resample", b), ("layer", layer), ("norm", "none"),
                         ("m_curv", 2.0 if layer == top else 1.0), ("m_mono", 0.5), ("k_eff", 3.0)):
                cols[k].append(v)
    got = l_star_stability(TokenResamples(**cols), [1, 2, 3], {"none": 2})["none"]
    assert got["same"] == pytest.approx(0.7) and got["replicates"] == 10 and got["dropped"] == 0
    assert got["picks"] == {2: 0.7, 3: 0.2, 1: 0.1}
    assert (got["low"], got["high"]) == (1, 3)
    assert l_star_stability(TokenResamples(), [1, 2, 3], {"none": 2}) == {}
    # the stored table reads back as the same record; a table of other columns is refused
    assert TokenResamples.from_columns(TokenResamples(**cols).columns()) == TokenResamples(**cols)
    with pytest.raises(ValueError, match=r"missing \['k_eff'\], unknown \['k'\]"):
        TokenResamples.from_columns({**{k: v for k, v in cols.items() if k != "k_eff"}, "k": []})
    with pytest.raises(ValueError, match="differ in length"):
        TokenResamples(**{**cols, "norm": cols["norm"][:-1]})
