"""Rival predictors on synthetic data with known answers, and TwoNN against scikit-dimension."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dihal.locate.predictors import (
    ORIENTATION,
    PREDICTORS,
    RidgeFolds,
    cosine_distance,
    layer_predictors,
    linear_cka,
    massive_share,
    ridge_cv_r2,
    ridge_fit,
    two_nearest,
    twonn_dimension,
)


def randn(n: int, d: int, seed: int) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_cosine_distance_known_values():
    a = randn(300, 5, 0)
    assert cosine_distance(a, a) == pytest.approx(0.0, abs=1e-12)
    assert cosine_distance(a, -a) == pytest.approx(2.0)
    assert cosine_distance(a, 3.0 * a) == pytest.approx(0.0, abs=1e-12)
    b = torch.zeros(2, 2, dtype=torch.float64)
    b[0, 0] = b[1, 1] = 1.0
    c = torch.tensor([[0.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
    assert cosine_distance(b, c) == pytest.approx(0.5)  # cos 0 and 1
    with pytest.raises(ValueError, match="same tokens"):
        cosine_distance(a, a[:10])


def test_linear_cka_invariances_and_independence():
    x = randn(2000, 6, 1)
    q, _ = torch.linalg.qr(randn(6, 6, 2))
    assert linear_cka(x, x @ q * 7.0 + 3.0) == pytest.approx(1.0, rel=1e-10)
    assert linear_cka(x, randn(2000, 4, 3)) < 0.02  # independent samples
    # a known partial value: y keeps 2 of 4 equal-variance directions of x -> CKA = 2/sqrt(4*2)
    x = torch.cat([torch.eye(4, dtype=torch.float64)] * 2) * math.sqrt(2.0)
    x = torch.cat([x, -x])  # exactly isotropic, centred
    assert linear_cka(x, x[:, :2]) == pytest.approx(2.0 / math.sqrt(8.0), rel=1e-12)
    with pytest.raises(ValueError, match="no variance"):
        linear_cka(torch.ones(10, 3), x[:10])


def test_ridge_r2_separates_linear_from_unrelated_targets():
    c = randn(600, 10, 4)
    w = randn(10, 5, 5)
    noise = 0.1 * randn(600, 5, 6)
    assert ridge_cv_r2(c, c @ w + noise) > 0.97
    assert ridge_cv_r2(c, randn(600, 5, 7)) < 0.05
    # seeded folds: the same call gives the same number
    assert ridge_cv_r2(c, c @ w + noise, seed=3) == ridge_cv_r2(c, c @ w + noise, seed=3)
    with pytest.raises(ValueError, match="paired rows"):
        ridge_cv_r2(c[:5], c[:5])


def test_one_conditions_folds_serve_every_target_with_the_same_numbers():
    """RidgeFolds (made once per geometry, for the condition) gives what a fresh ridge_cv_r2
    gives for each layer, bit for bit, and refuses a target of other tokens."""
    c = randn(600, 10, 4)
    folds = RidgeFolds(c, seed=2)
    for target in (c @ randn(10, 5, 5) + 0.1 * randn(600, 5, 6), randn(600, 7, 7)):
        assert folds.r2(target) == ridge_cv_r2(c, target, seed=2)
    with pytest.raises(ValueError, match="600 target rows"):
        folds.r2(randn(599, 5, 8))


@pytest.mark.parametrize("n,folds", [(10, 5), (11, 5), (600, 5), (203, 4), (7, 2), (64, 8)])
@pytest.mark.parametrize("seed", [0, 1, 2, 12345])
def test_kfold_splits_are_scikit_learns_seeded_kfold(n, folds, seed):
    """The ridge R^2's folds: scikit-learn's KFold(shuffle=True, random_state=seed), index for
    index and dtype for dtype (so Locate's numbers are those it gave with KFold)."""
    from sklearn.model_selection import KFold

    from dihal.locate.predictors import kfold_splits

    ours = kfold_splits(n, folds, seed)
    theirs = list(KFold(folds, shuffle=True, random_state=seed).split(np.zeros((n, 1))))
    assert len(ours) == len(theirs) == folds
    for (train, test), (want_train, want_test) in zip(ours, theirs, strict=True):
        assert train.dtype == want_train.dtype and test.dtype == want_test.dtype
        assert np.array_equal(train, want_train) and np.array_equal(test, want_test)


def test_ridge_fit_matches_scikit_learn_and_gcv_picks_a_sensible_alpha():
    from sklearn.linear_model import Ridge

    x = randn(300, 8, 20)
    x = (x - x.mean(0)) / x.std(0)
    y = x @ randn(8, 3, 21) + 0.5 * randn(300, 3, 22) + 4.0
    alpha, coef, icpt = ridge_fit(x, y, alphas=(0.1, 1.0, 10.0))
    ref = Ridge(alpha=alpha).fit(x.numpy(), y.numpy())
    torch.testing.assert_close(coef, torch.from_numpy(ref.coef_.T))
    torch.testing.assert_close(icpt, torch.from_numpy(ref.intercept_))
    # pure noise targets: GCV prefers the strongest shrinkage offered
    assert ridge_fit(x, randn(300, 3, 23), alphas=(0.1, 1.0, 1e4))[0] == 1e4


def test_two_nearest_matches_brute_force():
    x = randn(257, 7, 8)
    d = torch.cdist(x, x)
    d.fill_diagonal_(math.inf)
    want = d.sort(dim=1).values[:, :2]
    r1, r2 = two_nearest(x)
    torch.testing.assert_close(r1, want[:, 0])
    torch.testing.assert_close(r2, want[:, 1])


@pytest.mark.parametrize("dim", [2, 5, 10])
def test_twonn_recovers_the_dimension_of_an_embedded_gaussian(dim):
    z = randn(4000, dim, 9 + dim)
    embed, _ = torch.linalg.qr(randn(40, dim, 10))
    x = z @ embed.T  # a dim-dimensional linear subspace of R^40
    assert twonn_dimension(x) == pytest.approx(dim, rel=0.12)


def test_twonn_agrees_with_scikit_dimension():
    skdim = pytest.importorskip("skdim", reason="scikit-dimension is in the dev extras")
    for seed, dim in ((11, 3), (12, 8)):
        x = randn(1500, dim, seed) @ randn(dim, 30, seed + 1)
        ours = twonn_dimension(x)
        theirs = skdim.id.TwoNN(discard_fraction=0.1).fit(x.numpy()).dimension_
        assert ours == pytest.approx(float(theirs), rel=1e-9)


def test_twonn_drops_duplicates_and_rejects_too_few_points():
    x = randn(500, 3, 13)
    with_dups = torch.cat([x, x[:20]])
    assert math.isfinite(twonn_dimension(with_dups))
    with pytest.raises(ValueError, match="n >= 3"):
        twonn_dimension(x[:2])


def test_massive_share():
    x = randn(10000, 8, 14)
    even = massive_share(x)
    assert 0.001 < even < 0.01  # the 10 largest of 10,000 Gaussian tokens
    x[:3] *= 1000.0
    assert massive_share(x) > 0.99
    with pytest.raises(ValueError, match="identical"):
        massive_share(torch.ones(10, 2))


def test_layer_predictors_has_every_predictor_with_an_orientation():
    x0 = randn(400, 6, 15)
    prev = x0 @ randn(6, 6, 16)
    x = prev + 0.1 * randn(400, 6, 17)
    row = layer_predictors(x0, prev, x)
    assert tuple(row) == PREDICTORS and set(ORIENTATION.values()) == {-1, 1}
    assert all(np.isfinite(v) for v in row.values())
    assert row["ridge_r2"] > 0.9 and row["block_influence"] < row["cond_distance"]
