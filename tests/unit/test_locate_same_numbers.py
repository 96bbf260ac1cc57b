"""Locate's faster rival predictors give exactly the numbers of the code they replaced (no stage
version moves): linear CKA with the condition's normaliser made once instead of every layer,
and TwoNN's squared distances formed in place, compared bit for bit with the replaced
implementations, alone and through the geometry stage, on random inputs with the awkward
features of real hidden states (a few massive dimensions and tokens, duplicated tokens,
float16 and float32 inputs).

The references below are the replaced implementations as they were, kept deliberately plain;
the helpers that did not change are imported."""

from __future__ import annotations

import math

import pytest
import torch

import dihal.locate.predictors as predictors
import dihal.locate.stage as stage
from dihal.config import GeometryConfig
from tests.tiny import ArrayReader

# --- the replaced implementations ---------------------------------------------------------------


def ref_linear_cka(a: torch.Tensor, b: torch.Tensor) -> float:
    x = a.to(torch.float64) - a.to(torch.float64).mean(0)
    y = b.to(torch.float64) - b.to(torch.float64).mean(0)
    cross = torch.linalg.matrix_norm(y.T @ x) ** 2
    den = torch.linalg.matrix_norm(x.T @ x) * torch.linalg.matrix_norm(y.T @ y)
    return float(cross / den)


def ref_two_nearest(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.to(torch.float64)
    n = x.shape[0]
    sq = x.square().sum(1)
    block = max(1, predictors._BLOCK_ELEMENTS // n)
    r = []
    for lo in range(0, n, block):
        d2 = (sq[lo:lo + block, None] + sq[None, :] - 2.0 * x[lo:lo + block] @ x.T).clamp_min(0.0)
        rows = torch.arange(lo, min(lo + block, n))
        d2[rows - lo, rows] = math.inf
        r.append(torch.topk(d2, 2, dim=1, largest=False).values.sqrt())
    r = torch.cat(r)
    return r[:, 0], r[:, 1]


def ref_twonn_dimension(x: torch.Tensor) -> float:
    r1, r2 = ref_two_nearest(x)
    keep = r1 > 0
    mu = (r2[keep] / r1[keep]).sort().values
    n_keep = int(mu.numel() * (1.0 - predictors.TWONN_DISCARD))
    f = torch.arange(1, n_keep + 1, dtype=torch.float64) / mu.numel()
    lx, ly = torch.log(mu[:n_keep]), -torch.log1p(-f)
    return float((lx * ly).sum() / (lx * lx).sum())


def ref_layer_predictors(x0, prev, x, *, seed=0, ridge=None) -> dict[str, float]:
    return {
        "cond_distance": predictors.cosine_distance(x0, x),
        "cond_cka": ref_linear_cka(x0, x),
        "block_influence": predictors.cosine_distance(prev, x),
        "ridge_r2": (ridge or predictors.RidgeFolds(x0, seed=seed)).r2(x),
        "twonn_id": ref_twonn_dimension(x),
        "massive_share": predictors.massive_share(x),
    }


# --- inputs ---------------------------------------------------------------------------------------


def states(n: int, d: int, seed: int, *, duplicates: int = 0) -> torch.Tensor:
    """A low-rank signal plus noise, two massive dimensions on 3 % of the tokens, one token
    ~50x the rest, and `duplicates` tokens repeated exactly (as a sequence drawn twice gives)."""
    g = torch.Generator().manual_seed(seed)
    rank = max(2, d // 8)
    x = torch.randn(n, rank, generator=g, dtype=torch.float64) @ torch.randn(
        rank, d, generator=g, dtype=torch.float64)
    x += 0.3 * torch.randn(n, d, generator=g, dtype=torch.float64)
    massive = torch.randperm(n, generator=g)[: max(1, 3 * n // 100)]
    x[massive[:, None], torch.tensor([1, d - 2])] *= 40.0
    x[massive[0]] *= 50.0
    if duplicates:
        src = torch.randperm(n, generator=g)[:duplicates]
        dst = torch.randperm(n, generator=g)[:duplicates]
        x[dst] = x[src]
    return x


@pytest.mark.parametrize(("n", "d", "dtype"), [(600, 40, torch.float64), (333, 72, torch.float32),
                                               (512, 24, torch.float16)])
@pytest.mark.parametrize("seed", [0, 1])
def test_rival_predictors_are_bitwise_the_replaced_code(n, d, dtype, seed):
    x0 = states(n, d, seed).to(dtype)
    prev, x = states(n, d, seed + 10).to(dtype), states(n, d, seed + 20, duplicates=15).to(dtype)
    ridge = predictors.RidgeFolds(x0, seed=seed)
    want = ref_layer_predictors(x0, prev, x, seed=seed, ridge=ridge)
    assert predictors.layer_predictors(x0, prev, x, seed=seed, ridge=ridge) == want
    # the condition's normaliser is taken from `ridge` only when it was made from x0 itself;
    # otherwise (another tensor, or no ridge) it is computed, with the same result
    assert predictors.layer_predictors(x0.clone(), prev, x, seed=seed, ridge=ridge) == want
    assert predictors.layer_predictors(x0, prev, x, seed=seed) == want
    for got, ref in zip(predictors.two_nearest(x), ref_two_nearest(x), strict=True):
        assert torch.equal(got, ref)
    assert predictors.twonn_dimension(x) == ref_twonn_dimension(x)
    assert predictors.linear_cka(x0, x) == ref_linear_cka(x0, x)


def test_two_nearest_is_bitwise_the_replaced_code_across_blocks(monkeypatch):
    """Several row blocks (a small block size stands for the default's 1,024-row blocks of
    4,096 tokens), a duplicated point (r1 = 0) and a point far from the rest."""
    monkeypatch.setattr(predictors, "_BLOCK_ELEMENTS", 300 * 64)
    x = states(300, 20, 4, duplicates=6)
    x[7] *= 1e3
    for got, ref in zip(predictors.two_nearest(x), ref_two_nearest(x), strict=True):
        assert torch.equal(got, ref)
    assert bool((ref_two_nearest(x)[0] == 0).any())  # the duplicates are there


def test_the_condition_normaliser_is_made_once():
    x0 = states(200, 16, 0)
    ridge = predictors.RidgeFolds(x0, seed=0)
    first = ridge.cka_norm()
    assert ridge.cka_norm() is first  # kept, not recomputed
    centred = x0 - x0.mean(0)
    assert torch.equal(first, torch.linalg.matrix_norm(centred.T @ centred))


def test_geometry_stage_is_bitwise_the_replaced_code(monkeypatch):
    """compute_geometry (proxies, token bootstrap, rival predictors of every candidate layer)
    against the same stage run on the replaced predictors."""
    layers = [states(10 * 33, 32, 7 + layer).reshape(10, 33, 32) * (1 + 0.3 * layer)
              for layer in range(5)]
    reader = ArrayReader(torch.stack(layers).to(torch.float16).numpy())  # as a dump stores them
    cfg = GeometryConfig(n_tokens=200, n_anchors=60, k_neighbors=6, n_pairs=250, n_resamples=9)
    got = stage.compute_geometry(reader, cfg, backbone="b")
    monkeypatch.setattr(stage, "layer_predictors", ref_layer_predictors)
    want = stage.compute_geometry(reader, cfg, backbone="b")
    assert len(got.predictors) == 4 and got.predictors == want.predictors
    assert got.rows == want.rows and got.resamples == want.resamples
