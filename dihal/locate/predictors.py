"""Rival predictors of bridgeability: simpler or better-known layer statistics than the layer
score S_l, computed on the same geometry sample (the same held-out token positions of every
layer), so the bridgeability table can set them side by side with S_l and depth.

For the sampled states x_0 (the condition hs[0]), x_{l-1} and x_l, each (n, d):

- ``cond_distance``   1 - mean_i cos(x_0,i, x_l,i): how far the layer has moved from the condition;
- ``cond_cka``        linear CKA(x_0, x_l) = ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F), X, Y centred;
- ``block_influence`` 1 - mean_i cos(x_{l-1},i, x_l,i) (ShortGPT's BI of block l);
- ``ridge_r2``        cross-validated R^2 of a ridge regression x_0 -> x_l (scikit-learn's folds;
                      inputs standardised, alpha chosen by generalised CV inside each training
                      fold, one SVD per fold; R^2 averaged uniformly over the output dimensions;
                      the fit is checked against scikit-learn's Ridge in the tests);
- ``twonn_id``        intrinsic dimension of x_l by TwoNN (Facco et al. 2017: the line through the
                      origin fitted to (log mu, -log(1 - F(mu))), mu = r2 / r1, the largest 10 %
                      of ratios discarded);
- ``massive_share``   the share of the sample's variance (sum of squared distances to the mean)
                      carried by the top 0.1 % of tokens by norm (massive activations).

Each predictor has an orientation fixed in advance (ORIENTATION): the sign under which "higher
predicts a more bridgeable layer". The bridgeability table correlates the oriented value.
Everything is float64. Pure functions, no Dagster.
"""

from __future__ import annotations

import math

import numpy as np
import torch

# +1: a higher value should predict an easier layer; -1: a lower one. Chosen before any sweep:
# close to the condition, linearly predictable from it, low-dimensional, a block that changes
# the stream little, and few massive tokens should each make a layer easier to reach.
ORIENTATION = {
    "cond_distance": -1,
    "cond_cka": 1,
    "block_influence": -1,
    "ridge_r2": 1,
    "twonn_id": -1,
    "massive_share": -1,
}
PREDICTORS = tuple(ORIENTATION)
MASSIVE_FRACTION = 1e-3  # the top 0.1 % of tokens by norm
TWONN_DISCARD = 0.1
RIDGE_FOLDS = 5
RIDGE_ALPHAS = tuple(10.0 ** k for k in range(-2, 5))
_BLOCK_ELEMENTS = 2**22


def _pair(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"need two (n, d) samples of the same tokens, got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    return a.to(torch.float64), b.to(torch.float64)


def cosine_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """1 - mean over tokens of cos(a_i, b_i); a zero vector has cosine 0 with anything."""
    a, b = _pair(a, b)
    cos = torch.nn.functional.cosine_similarity(a, b, dim=1, eps=1e-300)
    return float(1.0 - cos.mean())


def _centred(a: torch.Tensor) -> torch.Tensor:
    a = a.to(torch.float64)
    return a - a.mean(0)


def _self_norm(x: torch.Tensor) -> torch.Tensor:
    """||X^T X||_F of a centred sample: one side of linear CKA's denominator."""
    return torch.linalg.matrix_norm(x.T @ x)


def linear_cka(a: torch.Tensor, b: torch.Tensor, *, a_norm: torch.Tensor | None = None) -> float:
    """Linear CKA of two samples of the same tokens (features may differ in number): in [0, 1],
    invariant to rotations and isotropic scaling of either side. `a_norm`: ||A^T A||_F of a's
    centred sample where it is already known (the condition's, the same for every layer)."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[0]:
        raise ValueError(f"need (n, d1) and (n, d2) samples, got {tuple(a.shape)}, {tuple(b.shape)}")
    x, y = _centred(a), _centred(b)
    # Via the n x n Gram matrices when n < d would be cheaper; for n >> d the d x d products are.
    cross = torch.linalg.matrix_norm(y.T @ x) ** 2
    den = (_self_norm(x) if a_norm is None else a_norm) * _self_norm(y)
    if den <= 0:
        raise ValueError("linear CKA is undefined: one sample has no variance")
    return float(cross / den)


def ridge_fit(x: torch.Tensor, y: torch.Tensor, alphas=RIDGE_ALPHAS) -> tuple[float, torch.Tensor,
                                                                             torch.Tensor]:
    """Ridge regression y ~ x (both (n, .), float64, x already standardised and centred; y is
    centred here), with alpha chosen from `alphas` by generalised cross-validation (Golub, Heath
    & Wahba 1979), pooled over y's columns. With x = U S V^T (from the eigendecomposition of
    x^T x, so no n x d factor is formed): for each alpha the
    residual sum of squares is ||y||^2 - sum_k (2 f_k - f_k^2) ||(U^T y)_k||^2 with
    f_k = s_k^2 / (s_k^2 + alpha), and GCV = n RSS / (n - sum_k f_k)^2.
    Returns (alpha, coefficients (d_x, d_y), intercept (d_y,))."""
    return _ridge_solve(x, *_gram_eigh(x), y, alphas)


def _gram_eigh(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x^T x = V diag(s^2) V^T: (s^2 clamped at 0, V)."""
    s2, v = torch.linalg.eigh(x.T @ x)
    return s2.clamp_min(0.0), v


def _ridge_solve(x: torch.Tensor, s2: torch.Tensor, v: torch.Tensor, y: torch.Tensor,
                 alphas) -> tuple[float, torch.Tensor, torch.Tensor]:
    """ridge_fit with x's Gram eigendecomposition (s2, v) already made."""
    mean = y.mean(0)
    yc = y - mean
    vxy = v.T @ (x.T @ yc)  # (d_x, d_y) = diag(s) U^T y: no n x k factor is formed
    live = s2 > s2.max() * 1e-12
    energy = torch.where(live, vxy.square().sum(1) / torch.where(live, s2, 1.0), 0.0)
    total = float(yc.square().sum())
    n = x.shape[0]
    best = None
    for alpha in alphas:
        f = s2 / (s2 + alpha)
        rss = total - float(((2 * f - f.square()) * energy).sum())
        gcv = n * max(rss, 0.0) / (n - float(f.sum())) ** 2
        if best is None or gcv < best[0]:
            best = (gcv, float(alpha))
    alpha = best[1]
    coef = v @ (vxy / (s2 + alpha)[:, None])
    return alpha, coef, mean


def kfold_splits(n: int, folds: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) row indices of `folds` shuffled folds of n rows, each sorted: the splits of
    scikit-learn's KFold(folds, shuffle=True, random_state=seed) (its rows shuffled by a
    RandomState(seed), cut into folds of n // folds rows, the first n % folds one row larger),
    without importing scikit-learn (most of a second in every process that runs Locate)."""
    order = np.arange(n)
    np.random.RandomState(seed).shuffle(order)
    sizes = np.full(folds, n // folds, dtype=int)
    sizes[: n % folds] += 1
    splits, at = [], 0
    for size in sizes:
        test = np.zeros(n, dtype=bool)
        test[order[at:at + size]] = True
        splits.append((np.flatnonzero(~test), np.flatnonzero(test)))
        at += size
    return splits


class RidgeFolds:
    """Cross-validated ridge R^2 of one condition c against any number of targets (ridge_cv_r2):
    `folds` shuffled folds (kfold_splits, scikit-learn's seeded KFold); in each, c is standardised on the
    training part and alpha is chosen by GCV on that part only (ridge_fit); R^2 on the held-out
    part, averaged uniformly over the target's dimensions (constant ones excluded), then over
    folds. The folds, c's standardisation and its Gram eigendecomposition are made once here:
    the condition is the same for every layer, only the target changes. So is linear CKA's
    normaliser of the condition (cka_norm), which layer_predictors takes from here."""

    def __init__(self, c: torch.Tensor, *, folds: int = RIDGE_FOLDS, alphas=RIDGE_ALPHAS,
                 seed: int = 0):
        x = c.to(torch.float64)
        if x.ndim != 2 or x.shape[0] < 2 * folds:
            raise ValueError(f"ridge R^2 needs >= {2 * folds} rows of an (n, d) condition, got "
                             f"{tuple(x.shape)}")
        self.n, self.alphas, self._folds = x.shape[0], alphas, []
        self.condition, self._cka_norm = c, None
        for train, test in kfold_splits(x.shape[0], folds, seed):
            train, test = torch.from_numpy(train), torch.from_numpy(test)
            mu, sd = x[train].mean(0), x[train].std(0)
            sd = torch.where(sd > 0, sd, torch.ones_like(sd))
            x_train = (x[train] - mu) / sd
            self._folds.append((train, test, x_train, (x[test] - mu) / sd, *_gram_eigh(x_train)))

    def cka_norm(self) -> torch.Tensor:
        """||C^T C||_F of the condition's centred sample (linear_cka's a_norm), made once."""
        if self._cka_norm is None:
            self._cka_norm = _self_norm(_centred(self.condition))
        return self._cka_norm

    def r2(self, h: torch.Tensor) -> float:
        y = h.to(torch.float64)
        if y.ndim != 2 or y.shape[0] != self.n:
            raise ValueError(f"ridge R^2 needs {self.n} target rows paired with the condition's, "
                             f"got {tuple(y.shape)}")
        scores = []
        for train, test, x_train, x_test, s2, v in self._folds:
            _, coef, icpt = _ridge_solve(x_train, s2, v, y[train], self.alphas)
            pred, truth = x_test @ coef + icpt, y[test]
            sst = (truth - truth.mean(0)).square().sum(0)
            keep = sst > 0
            if not keep.any():
                raise ValueError("ridge R^2 is undefined: the target is constant on a held-out fold")
            sse = (truth - pred).square().sum(0)
            scores.append(float((1.0 - sse[keep] / sst[keep]).mean()))
        return float(sum(scores) / len(scores))


def ridge_cv_r2(c: torch.Tensor, h: torch.Tensor, *, folds: int = RIDGE_FOLDS,
                alphas=RIDGE_ALPHAS, seed: int = 0) -> float:
    """Cross-validated R^2 of ridge regression c -> h (RidgeFolds)."""
    if h.ndim != 2 or c.shape[0] != h.shape[0] or c.shape[0] < 2 * folds:
        raise ValueError(f"ridge R^2 needs >= {2 * folds} paired rows, got {tuple(c.shape)} and "
                         f"{tuple(h.shape)}")
    return RidgeFolds(c, folds=folds, alphas=alphas, seed=seed).r2(h)


def two_nearest(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Euclidean distances r1 <= r2 of each point to its first and second nearest neighbour
    (itself excluded), float64, in blocks of rows."""
    x = x.to(torch.float64)
    n = x.shape[0]
    if n < 3:
        raise ValueError(f"two nearest neighbours need n >= 3 points, got {n}")
    sq = x.square().sum(1)
    block = max(1, _BLOCK_ELEMENTS // n)
    r = []
    for lo in range(0, n, block):
        # (sq_i + sq_j) - 2 x_i.x_j, formed in place: doubling is exact, so every value rounds as
        # in the out-of-place expression
        d2 = sq[lo:lo + block, None] + sq[None, :]
        d2.sub_(x[lo:lo + block] @ x.T, alpha=2.0).clamp_min_(0.0)
        rows = torch.arange(lo, min(lo + block, n))
        d2[rows - lo, rows] = math.inf
        r.append(torch.topk(d2, 2, dim=1, largest=False).values.sqrt())
    r = torch.cat(r)
    return r[:, 0], r[:, 1]


def twonn_dimension(x: torch.Tensor, discard_fraction: float = TWONN_DISCARD) -> float:
    """TwoNN intrinsic dimension (Facco et al. 2017), the least-squares line through the origin
    of -log(1 - F_emp(mu)) on log(mu) over the smallest (1 - discard_fraction) of the ratios
    mu = r2 / r1. Points with a duplicate (r1 = 0) are dropped."""
    if not 0.0 <= discard_fraction < 1.0:
        raise ValueError(f"discard_fraction must lie in [0, 1), got {discard_fraction}")
    r1, r2 = two_nearest(x)
    keep = r1 > 0
    mu = (r2[keep] / r1[keep]).sort().values
    n = mu.numel()
    n_keep = int(n * (1.0 - discard_fraction))
    if n_keep < 2:
        raise ValueError(f"TwoNN needs >= 2 distinct points after discarding, got {n_keep}")
    mu = mu[:n_keep]
    f = torch.arange(1, n_keep + 1, dtype=torch.float64) / n
    lx, ly = torch.log(mu), -torch.log1p(-f)
    return float((lx * ly).sum() / (lx * lx).sum())


def massive_share(x: torch.Tensor, fraction: float = MASSIVE_FRACTION) -> float:
    """The share of sum_i ||x_i - mean||^2 carried by the ceil(fraction * n) tokens of largest
    norm ||x_i||. Equal to `fraction` when the variance is spread evenly; near 1 when a few
    massive tokens carry it."""
    x = x.to(torch.float64)
    k = max(1, math.ceil(fraction * x.shape[0]))
    dev = (x - x.mean(0)).square().sum(1)
    total = dev.sum()
    if total <= 0:
        raise ValueError("massive-activation share is undefined: all states are identical")
    top = torch.topk(x.square().sum(1), k).indices
    return float(dev[top].sum() / total)


def layer_predictors(x0: torch.Tensor, prev: torch.Tensor, x: torch.Tensor, *,
                     seed: int = 0, ridge: RidgeFolds | None = None) -> dict[str, float]:
    """Every rival predictor of one candidate layer, from the sampled states of the condition
    (layer 0), the layer below and the layer itself (same tokens, same order). `ridge`: the
    condition's RidgeFolds (made with `seed`), shared by the layers; made from `x0` itself, it
    also gives linear CKA the condition's normaliser, so that is not recomputed every layer."""
    shared = ridge is not None and ridge.condition is x0
    return {
        "cond_distance": cosine_distance(x0, x),
        "cond_cka": linear_cka(x0, x, a_norm=ridge.cka_norm() if shared else None),
        "block_influence": cosine_distance(prev, x),
        "ridge_r2": (ridge or RidgeFolds(x0, seed=seed)).r2(x),
        "twonn_id": twonn_dimension(x),
        "massive_share": massive_share(x),
    }
