"""Geometry proxies on synthetic data with known answers (docs/method.md §1)."""

from __future__ import annotations

import math

import pytest
import torch

from dihal.inputs import GeometryRow
from dihal.locate.geometry import (
    NORMALIZATIONS,
    ROBUST_CLIP,
    GeometryConfig,
    GeometryPlan,
    effective_rank,
    global_monotonicity,
    layer_proxies,
    local_curvature,
    make_plan,
    monotonicity_quotients,
    normalize,
)


def gaussian(n: int, d: int, seed: int, scales=None) -> torch.Tensor:
    """n samples of N(0, diag(scales^2)) in float64."""
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return x if scales is None else x * torch.as_tensor(scales, dtype=torch.float64)


def small_cfg(**kw) -> GeometryConfig:
    base = dict(n_tokens=400, n_anchors=64, k_neighbors=8, n_pairs=300)
    return GeometryConfig(**{**base, **kw})


def plan_for(n: int, cfg: GeometryConfig, seed: int = 0) -> GeometryPlan:
    return make_plan(n, cfg, torch.Generator().manual_seed(seed))


# --- reference implementations: slow, obvious, float64 ------------------------------------------


def reference_curvature(x: torch.Tensor, anchors: torch.Tensor, k: int) -> float:
    """1 / lambda_max of torch.cov over the k nearest neighbours by torch.cdist, anchor excluded."""
    inv = []
    for a in anchors.tolist():
        dist = torch.cdist(x[a : a + 1], x)[0]
        dist[a] = math.inf
        nbrs = dist.argsort()[:k]
        cov = torch.atleast_2d(torch.cov(x[nbrs].T))
        inv.append(1.0 / float(torch.linalg.eigvalsh(cov)[-1]))
    return float(torch.tensor(inv, dtype=torch.float64).quantile(0.5))  # mean of the middle two


def reference_quotients(x: torch.Tensor, pairs: torch.Tensor, gamma_rel: float) -> torch.Tensor:
    """r_ij with P = (Sigma + gamma I)^-1 by an explicit solve."""
    sigma = torch.cov(x.T)
    d = x.shape[1]
    gamma = gamma_rel * float(torch.trace(sigma)) / d
    delta = x[pairs[:, 0]] - x[pairs[:, 1]]
    p_delta = torch.linalg.solve(sigma + gamma * torch.eye(d, dtype=x.dtype), delta.T).T
    return (delta * p_delta).sum(1) / delta.square().sum(1)


# --- config and plan ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n_tokens", 1),
        ("n_anchors", 0),
        ("k_neighbors", 1),
        ("n_pairs", 0),
        ("gamma_rel", 0.0),
        ("gamma_rel", float("nan")),
        ("mono_stat", "mean"),
        ("normalizations", ("none", "zca")),
        ("normalizations", ()),
        ("normalizations", ("rms", "rms")),
        ("normalizations", "rms"),
        ("seed", -1),
        ("n_anchors", 500),  # > n_tokens
        ("k_neighbors", 400),  # >= n_tokens
        ("n_tokens", 2.5),
    ],
)
def test_config_rejects_bad_values_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        small_cfg(**{field: value})


def test_config_defaults_and_list_normalizations():
    assert GeometryConfig().normalizations == NORMALIZATIONS
    assert small_cfg(normalizations=["rms"]).normalizations == ("rms",)


def test_plan_is_deterministic_and_well_formed():
    cfg = small_cfg()
    a, b, c = plan_for(400, cfg, 7), plan_for(400, cfg, 7), plan_for(400, cfg, 8)
    assert torch.equal(a.anchors, b.anchors) and torch.equal(a.pairs, b.pairs)
    assert not torch.equal(a.anchors, c.anchors)
    assert a.anchors.shape == (64,) and a.pairs.shape == (300, 2)
    assert a.anchors.dtype == a.pairs.dtype == torch.int64
    assert a.anchors.unique().numel() == 64
    assert (a.pairs[:, 0] != a.pairs[:, 1]).all()
    assert int(a.anchors.min()) >= 0 and int(a.anchors.max()) < 400
    assert int(a.pairs.min()) >= 0 and int(a.pairs.max()) < 400


def test_plan_pairs_never_equal_even_for_two_states():
    cfg = GeometryConfig(n_tokens=3, n_anchors=1, k_neighbors=2, n_pairs=200)
    plan = plan_for(3, cfg)
    assert (plan.pairs[:, 0] != plan.pairs[:, 1]).all()
    assert set(plan.pairs.flatten().tolist()) == {0, 1, 2}


def test_plan_rejects_too_few_states():
    cfg = small_cfg()
    with pytest.raises(ValueError, match="n_anchors"):
        plan_for(63, cfg)
    with pytest.raises(ValueError, match="k_neighbors"):
        plan_for(8, small_cfg(n_anchors=4))


# --- normalisation --------------------------------------------------------------------------------


def test_normalize_variants():
    x = gaussian(500, 6, 0, scales=[1, 2, 3, 4, 5, 100]) + 10.0
    none, rms, std, robust = (normalize(x, kind) for kind in NORMALIZATIONS)
    assert none.dtype == torch.float64
    for y in (none, rms, std, robust):
        assert y.mean(0).abs().max() < 1e-12
    torch.testing.assert_close(none, x - x.mean(0))
    assert math.isclose(float(torch.cov(rms.T).trace()), 6.0, rel_tol=1e-12)
    torch.testing.assert_close(torch.cov(std.T).diagonal(), torch.ones(6, dtype=torch.float64))


def test_robust_normalisation_is_not_dominated_by_massive_tokens():
    x = gaussian(2000, 8, 3)
    massive = x.clone()
    massive[:4, 2] = 5000.0  # four massive-activation tokens in one dimension
    # standardize lets them carry a whole dimension's variance; robust caps them at ROBUST_CLIP
    std = normalize(massive, "standardize")
    robust = normalize(massive, "robust")
    assert std[:4].square().sum() / std.square().sum() > 0.1  # all of dimension 2's variance
    assert robust[:4].square().sum() / robust.square().sum() < 0.01
    assert robust.abs().max() <= 2 * ROBUST_CLIP
    # on Gaussian data without outliers, the robust scale is close to the std
    torch.testing.assert_close(normalize(x, "robust"), normalize(x, "standardize"), atol=0.25,
                               rtol=0.1)
    # a constant dimension stays 0, a dimension with MAD 0 but spread falls back to its std
    x[:, 1] = 4.0
    x[:, 5] = 0.0
    x[:10, 5] = 1.0
    y = normalize(x, "robust")
    assert torch.isfinite(y).all() and (y[:, 1] == 0).all() and y[:, 5].abs().max() > 0


def test_standardize_keeps_a_constant_dimension_at_zero():
    x = gaussian(50, 3, 1)
    x[:, 1] = 4.0
    y = normalize(x, "standardize")
    assert torch.isfinite(y).all() and (y[:, 1] == 0).all()


def test_normalize_rejects_unknown_kind_and_identical_states():
    with pytest.raises(ValueError, match="normalization"):
        normalize(gaussian(10, 2, 0), "zca")
    with pytest.raises(ValueError, match="identical"):
        normalize(torch.ones(10, 3), "rms")


# --- effective rank -------------------------------------------------------------------------------


def test_effective_rank_isotropic_gaussian_is_close_to_d():
    # With n samples, lambda_max of the sample covariance sits near the Marchenko-Pastur edge
    # (1 + sqrt(d/n))^2 (slightly below it for small d) and tr(Sigma) near d, so
    # k_eff ~ d / (1 + sqrt(d/n))^2 = 9.57 for d = 10, n = 20000. Over 20 seeds the relative
    # deviation ranged over +0.1 % .. +1.8 % (tr/d alone has relative std sqrt(2/(n d)) = 0.3 %).
    n, d = 20_000, 10
    expected = d / (1 + math.sqrt(d / n)) ** 2
    k_eff = effective_rank(gaussian(n, d, 0))
    assert k_eff <= d
    assert abs(k_eff - expected) / expected < 0.03


def test_effective_rank_of_rank_r_subspace_is_at_most_r():
    n, d, r = 2000, 40, 4
    gen = torch.Generator().manual_seed(3)
    basis, _ = torch.linalg.qr(torch.randn(d, r, generator=gen, dtype=torch.float64))
    coeffs = torch.randn(n, r, generator=gen, dtype=torch.float64) * torch.tensor(
        [3.0, 2.0, 1.0, 0.5], dtype=torch.float64
    )
    x = coeffs @ basis.T + 1e-6 * torch.randn(n, d, generator=gen, dtype=torch.float64)
    k_eff = effective_rank(x)
    assert k_eff > 1.0
    assert k_eff <= r
    # scales 3, 2, 1, 0.5: k_eff ~ (9 + 4 + 1 + 0.25) / 9 = 1.58
    assert abs(k_eff - 14.25 / 9) < 0.15


def test_effective_rank_of_equal_variances_in_rank_r_is_close_to_r():
    n, d, r = 20_000, 30, 3
    x = torch.zeros(n, d, dtype=torch.float64)
    x[:, :r] = gaussian(n, r, 4)
    k_eff = effective_rank(x)
    assert r / (1 + math.sqrt(r / n)) ** 2 * 0.98 < k_eff <= r


# --- monotonicity ---------------------------------------------------------------------------------


def test_quotients_match_explicit_inverse_and_lie_in_the_rayleigh_range():
    scales = [0.1, 0.5, 1.0, 3.0, 10.0]
    x = gaussian(600, 5, 5, scales=scales)
    pairs = plan_for(600, small_cfg(n_tokens=600)).pairs
    gamma_rel = 1e-3
    r = monotonicity_quotients(x, pairs, gamma_rel)
    torch.testing.assert_close(r, reference_quotients(x, pairs, gamma_rel), rtol=1e-9, atol=0)
    evals = torch.linalg.eigvalsh(torch.cov(x.T))
    gamma = gamma_rel * float(evals.sum()) / 5
    lo, hi = 1 / (float(evals[-1]) + gamma), 1 / (float(evals[0]) + gamma)
    assert (r >= lo * (1 - 1e-12)).all() and (r <= hi * (1 + 1e-12)).all()
    # random differences are dominated by the wide directions, so r crowds the lower end
    assert float(r.min()) < 1.2 * lo and float(r.max()) > 10 * lo
    assert math.isclose(global_monotonicity(x, pairs, gamma_rel, "min_eig"), lo, rel_tol=1e-12)


def test_quotient_along_an_eigen_direction_is_its_inverse_eigenvalue():
    # Two clusters of points differing only along axis 0 and axis 1: Sigma is diagonal.
    x = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0], [0.0, -2.0]], dtype=torch.float64)
    sigma = torch.cov(x.T)  # diag(2/3, 8/3)
    gamma = 1e-3 * float(sigma.trace()) / 2
    r = monotonicity_quotients(x, torch.tensor([[0, 1], [2, 3]]), 1e-3)
    torch.testing.assert_close(
        r, torch.tensor([1 / (2 / 3 + gamma), 1 / (8 / 3 + gamma)], dtype=torch.float64)
    )


def test_global_monotonicity_statistics():
    x = gaussian(500, 4, 6, scales=[1, 2, 3, 4])
    pairs = plan_for(500, small_cfg(n_tokens=500)).pairs
    r = monotonicity_quotients(x, pairs, 1e-3)
    assert math.isclose(global_monotonicity(x, pairs, 1e-3, "median"), float(r.quantile(0.5)))
    assert math.isclose(global_monotonicity(x, pairs, 1e-3, "q05"), float(r.quantile(0.05)))
    with pytest.raises(ValueError, match="stat"):
        global_monotonicity(x, pairs, 1e-3, "mean")


def test_identical_pair_is_ignored_not_nan():
    x = gaussian(20, 3, 7)
    x[1] = x[0]
    pairs = torch.tensor([[0, 1], [2, 3], [4, 5], [6, 7]])
    r = monotonicity_quotients(x, pairs, 1e-3)
    assert math.isnan(float(r[0])) and torch.isfinite(r[1:]).all()
    assert math.isclose(global_monotonicity(x, pairs, 1e-3), float(r[1:].median()))


# --- local curvature ------------------------------------------------------------------------------


def test_local_curvature_hand_computed_and_excludes_the_anchor():
    # Points on a line; anchor 0 at 0, k = 2 -> neighbours at 1 and 3, sample variance 2 -> 1/2.
    # Had the anchor been counted, neighbours {0, 1} would give variance 1/2 -> 2.
    x = torch.tensor([[0.0], [1.0], [3.0], [7.0], [100.0]], dtype=torch.float64)
    assert local_curvature(x, torch.tensor([0]), 2) == pytest.approx(0.5, rel=1e-12)
    # anchor 2 at 3: neighbours 1 and 0 (distances 2, 3), variance 1/2 -> 2; median of {1/2, 2}
    assert local_curvature(x, torch.tensor([0, 2]), 2) == pytest.approx(1.25, rel=1e-12)


def test_local_curvature_matches_a_brute_force_reference():
    x = gaussian(300, 7, 8, scales=[1, 1, 2, 3, 5, 8, 13])
    x[0] *= 100.0  # a massive token
    x[:, 2] += 1e4  # far from the origin: centring must not cancel catastrophically
    anchors = plan_for(300, small_cfg(n_tokens=300)).anchors[:41]
    got = local_curvature(x, anchors, 8)
    assert got == pytest.approx(reference_curvature(x, anchors, 8), rel=1e-10)


def test_local_curvature_of_half_scale_gaussian_is_four_times_larger():
    d, n, k = 8, 2000, 16
    anchors = torch.arange(0, n, 10)
    c1 = local_curvature(gaussian(n, d, 9), anchors, k)
    c_half = local_curvature(gaussian(n, d, 10, scales=[0.5] * d), anchors, k)
    # independent samples: the ratio is 4 up to the sampling error of a median over 200 anchors
    assert 3.4 < c_half / c1 < 4.6


def test_local_curvature_rejects_too_few_states():
    with pytest.raises(ValueError, match="n > k"):
        local_curvature(gaussian(8, 2, 0), torch.tensor([0]), 8)
    with pytest.raises(ValueError, match="k must be >= 2"):
        local_curvature(gaussian(8, 2, 0), torch.tensor([0]), 1)


# --- one layer ------------------------------------------------------------------------------------


def test_layer_proxies_agree_with_the_separate_functions():
    cfg = small_cfg()
    x = gaussian(400, 12, 11, scales=torch.linspace(0.2, 5.0, 12)).to(torch.float32)
    x[3] *= 50.0
    plan = plan_for(400, cfg)
    rows = layer_proxies(x, plan, cfg)
    assert [r["norm"] for r in rows] == list(NORMALIZATIONS)
    for row in rows:
        xn = normalize(x, row["norm"])
        assert row["m_curv"] == pytest.approx(local_curvature(xn, plan.anchors, 8), rel=1e-9)
        assert row["m_mono"] == row["m_mono_median"]
        for stat in ("median", "q05", "min_eig"):
            want = global_monotonicity(xn, plan.pairs, cfg.gamma_rel, stat)
            assert row[f"m_mono_{stat}"] == pytest.approx(want, rel=1e-9)
        assert row["k_eff"] == pytest.approx(effective_rank(xn), rel=1e-9)
        assert row["tr_sigma"] / row["lambda_max"] == pytest.approx(row["k_eff"], rel=1e-12)
    assert rows[1]["tr_sigma"] == pytest.approx(12.0)


def test_layer_proxies_mono_stat_and_subset_of_normalizations():
    cfg = small_cfg(mono_stat="q05", normalizations=("standardize", "rms"))
    x = gaussian(400, 5, 12, scales=[1, 2, 3, 4, 5])
    rows = layer_proxies(x, plan_for(400, cfg), cfg)
    assert [r["norm"] for r in rows] == ["standardize", "rms"]
    assert all(r["m_mono"] == r["m_mono_q05"] for r in rows)


def test_scaling_the_states():
    # x * a: k_eff unchanged; m_curv and m_mono scale by 1/a^2 under "none", unchanged otherwise.
    cfg = small_cfg()
    a = 7.5
    x = gaussian(400, 10, 13, scales=torch.linspace(0.5, 3.0, 10))
    plan = plan_for(400, cfg)
    base, scaled = layer_proxies(x, plan, cfg), layer_proxies(x * a, plan, cfg)
    for b, s in zip(base, scaled, strict=True):
        factor = 1 / a**2 if b["norm"] == "none" else 1.0
        assert s["k_eff"] == pytest.approx(b["k_eff"], rel=1e-10)
        for key in ("m_curv", "m_mono", "m_mono_q05", "m_mono_min_eig"):
            assert s[key] == pytest.approx(b[key] * factor, rel=1e-9), (b["norm"], key)


def test_layer_proxies_is_deterministic_and_accepts_low_precision():
    cfg = small_cfg()
    x = gaussian(400, 6, 14)
    plan = plan_for(400, cfg)
    assert layer_proxies(x, plan, cfg) == layer_proxies(x, plan, cfg)
    rows = layer_proxies(x.to(torch.bfloat16), plan, cfg)
    assert all(math.isfinite(v) for r in rows for k, v in r.items() if k != "norm")


# --- bad inputs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_states_are_rejected(bad):
    cfg = small_cfg()
    x = gaussian(400, 4, 15)
    x[5, 2] = bad
    plan = plan_for(400, cfg)
    for call in (
        lambda: layer_proxies(x, plan, cfg),
        lambda: effective_rank(x),
        lambda: local_curvature(x, plan.anchors, 8),
        lambda: monotonicity_quotients(x, plan.pairs, 1e-3),
        lambda: normalize(x, "none"),
    ):
        with pytest.raises(ValueError, match="non-finite"):
            call()


def test_malformed_inputs_are_rejected():
    cfg = small_cfg()
    x = gaussian(400, 4, 16)
    plan = plan_for(400, cfg)
    with pytest.raises(ValueError, match="2-D"):
        effective_rank(x[0])
    with pytest.raises(ValueError, match="floating"):
        effective_rank(torch.ones(4, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="identical"):
        effective_rank(torch.ones(5, 3))
    with pytest.raises(ValueError, match=r"\[0, 300\)"):
        layer_proxies(x[:300], plan, cfg)  # the plan was drawn for 400 states
    with pytest.raises(ValueError, match="shape"):
        monotonicity_quotients(x, plan.pairs[:, :1], 1e-3)
    with pytest.raises(ValueError, match="gamma_rel"):
        monotonicity_quotients(x, plan.pairs, 0.0)


# ------------------------------------------------------------------------------ token bootstrap
def test_weighted_quantile_is_the_quantile_of_the_expanded_multiset():
    import numpy as np

    from dihal.locate.geometry import weighted_quantile

    g = torch.Generator().manual_seed(0)
    for m in (5, 6, 7):
        v = torch.randn(m, dtype=torch.float64, generator=g)
        w = torch.randint(0, 4, (30, m), generator=g).double()
        got = weighted_quantile(v, w, 0.5).numpy()
        want = [np.median(np.repeat(v.numpy(), w[b].int().numpy())) if w[b].sum() else np.nan
                for b in range(30)]
        np.testing.assert_allclose(got, want, rtol=0, atol=0)
    nan_in = torch.tensor([1.0, float("nan"), 3.0], dtype=torch.float64)
    assert weighted_quantile(nan_in, torch.ones(1, 3, dtype=torch.float64), 0.5).item() == 2.0


def _spiked(n: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scale = torch.linspace(0.3, 1.0, d, dtype=torch.float64)
    scale[0] = 12.0  # one direction dominates, as massive activations make it in real layers
    return torch.randn(n, d, dtype=torch.float64, generator=g) * scale


def test_unit_weights_reproduce_the_point_proxies():
    from dihal.locate.geometry import layer_proxies_resampled

    cfg = GeometryConfig(n_tokens=300, n_anchors=100, k_neighbors=6, n_pairs=200)
    x = _spiked(300, 80, 1)
    plan = make_plan(300, cfg, torch.Generator().manual_seed(2))
    rows, reps = layer_proxies_resampled(x, plan, cfg, torch.ones(1, 300, dtype=torch.float64))
    for row in rows:
        for key in ("m_curv", "m_mono", "k_eff"):
            assert reps[row["norm"]][key][0].item() == pytest.approx(row[key], rel=1e-9), (row["norm"], key)


def test_replicate_effective_rank_equals_the_resampled_covariance():
    """k_eff of a replicate, computed in a small span plus one Krylov direction, against the
    eigendecomposition of the covariance of the tokens actually drawn."""
    from dihal.locate.geometry import _spectrum, layer_proxies_resampled, resample_weights

    cfg = GeometryConfig(n_tokens=400, n_anchors=100, k_neighbors=6, n_pairs=200)
    g = torch.Generator().manual_seed(3)
    x = _spiked(400, 120, 4)  # d > the span's 32 vectors
    weights = resample_weights(400, 4, g)
    assert torch.equal(weights.sum(1), torch.full((4,), 400.0, dtype=torch.float64))
    rows, reps = layer_proxies_resampled(x, make_plan(400, cfg, g), cfg, weights)
    for b in range(4):
        drawn = x[torch.repeat_interleave(torch.arange(400), weights[b].long())]
        spec = _spectrum(drawn)
        assert reps["none"]["k_eff"][b].item() == pytest.approx(spec.trace / spec.lambda_max, rel=1e-6)
        assert reps["none"]["tr_sigma"][b].item() == pytest.approx(spec.trace, rel=1e-9)
        # rms is none rescaled by each replicate's own tr / d: same k_eff, curvature x tr / d
        c = spec.trace / 120
        assert reps["rms"]["m_curv"][b].item() == pytest.approx(reps["none"]["m_curv"][b].item() * c)
    assert len({round(v, 9) for v in reps["none"]["k_eff"].tolist()}) == 4  # replicates differ


def test_geometry_on_the_cpu_device_is_bitwise_the_plain_cpu_path():
    """compute_geometry with device="cpu" (what a step without a GPU passes) gives exactly the
    proxies and bootstrap replicates of the per-layer CPU functions on the same tokens."""
    import numpy as np

    from dihal.locate.geometry import layer_proxies_resampled, resample_weights, sample_positions
    from dihal.locate.stage import compute_geometry
    from dihal.seeds import derive_seed

    rng = np.random.default_rng(0)
    states = rng.standard_normal((3, 6, 20, 8)).astype(np.float16)  # layers, seqs, T, d

    class Reader:
        def shape(self, split):
            return states.shape

        def layer(self, split, layer):
            return states[layer]

    cfg = GeometryConfig(n_tokens=60, n_anchors=20, k_neighbors=5, n_pairs=80, n_resamples=3)
    got = compute_geometry(Reader(), cfg, backbone="b", device="cpu")
    gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "b", "geometry"))
    pos = sample_positions(6, 20, 60, gen)
    plan = make_plan(60, cfg, gen)
    boot = torch.Generator().manual_seed(derive_seed(cfg.seed, "b", "geometry-bootstrap"))
    weights = resample_weights(60, 3, boot)
    want_rows, want_reps = [], []
    for layer in range(3):
        x = torch.from_numpy(states[layer][pos[:, 0], pos[:, 1]].astype(np.float64))
        rows, reps = layer_proxies_resampled(x, plan, cfg, weights)
        want_rows += [GeometryRow(layer=layer, **r) for r in rows]
        want_reps += [reps[n]["m_curv"].tolist() for n in cfg.normalizations]
    assert got.rows == want_rows  # exact floats, not approximately
    curv = got.resamples.m_curv
    assert [curv[i:i + 3] for i in range(0, len(curv), 3)] == want_reps
