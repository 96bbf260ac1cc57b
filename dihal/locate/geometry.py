"""Locate: geometry proxies of one layer's hidden states (docs/method.md §1).

For a sample x of n hidden states (n, d), after normalisation, with Sigma the sample covariance
(denominator n - 1):

- local curvature   m_curv = median_i 1 / lambda_max(C_i), C_i the sample covariance of the k
                    nearest neighbours of anchor i (Euclidean, anchor excluded), about their mean;
- monotonicity      r_ij = (x_i - x_j)^T P (x_i - x_j) / ||x_i - x_j||^2,
                    P = (Sigma + gamma I)^-1, gamma = gamma_rel * tr(Sigma) / d;
                    m_mono = median, 5 % quantile of r_ij, or lambda_min(P) = 1 / (lambda_max + gamma);
- effective rank    k_eff = tr(Sigma) / ||Sigma||_2.

Everything is computed in float64 (hidden states carry "massive activations", a few dimensions
and tokens ~100x the rest); inputs of any floating dtype and device are accepted, and the
arithmetic runs on the input's device (the geometry stage gives it the step's GPU: covariances,
eigendecompositions and the kNN search there; on the CPU nothing changes).
Pure functions: tensors and a config in, numbers out. No Dagster here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from dihal.config import (  # noqa: F401 (re-exported)
    MONO_STATS,
    NORMALIZATIONS,
    GeometryConfig,
    is_positive,
)

# |z| cap of the robust normalisation, in robust standard deviations (1.4826 MAD).
ROBUST_CLIP = 5.0
# Elements (float64) per working block of the kNN search: bounds memory to ~32 MB a block.
_BLOCK_ELEMENTS = 2**22


# ---------------------------------------------------------------------------------------------
# Config and sampling plan
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GeometryPlan:
    """Which sampled states are anchors and which pairs enter the monotonicity quotient.

    Drawn once per backbone and reused for every layer, so that layers differ only in their states.
    """

    anchors: torch.Tensor  # (n_anchors,) int64, distinct indices into the n sampled states
    pairs: torch.Tensor  # (n_pairs, 2) int64, i != j


def sample_positions(
    n_seq: int, seq_len: int, n_tokens: int, generator: torch.Generator
) -> np.ndarray:
    """(n_tokens, 2) array of (sequence, position) pairs, position 0 excluded, sorted.

    The sequences are packed (no padding), so every position >= 1 is a real token."""
    available = n_seq * (seq_len - 1)
    if n_tokens > available:
        raise ValueError(
            f"geometry wants {n_tokens} tokens but the held-out split has only {available} "
            f"(= {n_seq} sequences x {seq_len - 1} positions after dropping position 0). "
            "Raise n_val in the sequences config or lower n_tokens."
        )
    flat = torch.randperm(available, generator=generator)[:n_tokens].sort().values.numpy()
    return np.stack([flat // (seq_len - 1), flat % (seq_len - 1) + 1], axis=1)


def make_plan(n: int, cfg: GeometryConfig, generator: torch.Generator) -> GeometryPlan:
    """Anchors: n_anchors distinct indices (a random permutation's prefix).

    Pairs: i uniform on [0, n), j = (i + u) mod n with u uniform on [1, n), so j is uniform over the
    other n - 1 states and never equals i. Pairs are drawn with replacement.
    """
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"n must be an int, got {n!r}")
    if n < cfg.n_anchors:
        raise ValueError(f"n = {n} states is fewer than n_anchors = {cfg.n_anchors}")
    if n <= cfg.k_neighbors:
        raise ValueError(
            f"n = {n} states is too few for k_neighbors = {cfg.k_neighbors} (need n > k)"
        )
    anchors = torch.randperm(n, generator=generator)[: cfg.n_anchors]
    first = torch.randint(0, n, (cfg.n_pairs,), generator=generator)
    offset = torch.randint(1, n, (cfg.n_pairs,), generator=generator)
    pairs = torch.stack([first, (first + offset) % n], dim=1)
    return GeometryPlan(anchors=anchors.to(torch.int64), pairs=pairs.to(torch.int64))


# ---------------------------------------------------------------------------------------------
# Input checks and normalisation
# ---------------------------------------------------------------------------------------------


def _as_states(x: torch.Tensor) -> torch.Tensor:
    """Validate a (n, d) sample of states and return it as float64 (same device)."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"states must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim != 2:
        raise ValueError(f"states must be 2-D (n, d), got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"states must be floating point, got dtype {x.dtype}")
    n, d = x.shape
    if n < 2 or d < 1:
        raise ValueError(f"states need n >= 2 rows and d >= 1 columns, got shape {(n, d)}")
    bad = int((~torch.isfinite(x)).sum())
    if bad:
        raise ValueError(f"states contain {bad} non-finite values (NaN or inf) out of {n * d}")
    return x.to(torch.float64)


def _check_indices(name: str, idx: torch.Tensor, n: int) -> torch.Tensor:
    if idx.numel() == 0:
        raise ValueError(f"{name} is empty")
    if idx.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} must be an integer tensor, got dtype {idx.dtype}")
    lo, hi = int(idx.min()), int(idx.max())
    if lo < 0 or hi >= n:
        raise ValueError(f"{name} indices must lie in [0, {n}), got range [{lo}, {hi}]")
    return idx.to(torch.int64)


def _check_anchors(anchors: torch.Tensor, n: int) -> torch.Tensor:
    if anchors.ndim != 1:
        raise ValueError(f"anchors must be 1-D (n_anchors,), got shape {tuple(anchors.shape)}")
    return _check_indices("anchors", anchors, n)


def _check_pairs(pairs: torch.Tensor, n: int) -> torch.Tensor:
    if pairs.ndim != 2 or pairs.shape[1] != 2:
        raise ValueError(f"pairs must have shape (n_pairs, 2), got {tuple(pairs.shape)}")
    return _check_indices("pairs", pairs, n)


def normalize(x: torch.Tensor, kind: str) -> torch.Tensor:
    """Centre and (optionally) rescale a (n, d) sample; returns float64.

    - ``none``:        x - mean
    - ``rms``:         (x - mean) / s,  s = sqrt(tr(Sigma) / d), so tr(Sigma) = d afterwards
    - ``standardize``: (x - mean) / std per dimension (denominator n - 1); a constant dimension
                       stays 0 rather than becoming NaN.
    - ``robust``:      per dimension, (x - median) / (1.4826 MAD), clipped to +-ROBUST_CLIP, then
                       centred: a few massive-activation tokens or dimensions cannot dominate it
                       (a dimension with MAD 0 falls back to its std, a constant one stays 0).
    """
    if kind not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {kind!r}")
    x = _as_states(x)
    xc = x - x.mean(dim=0)
    if kind == "none":
        return xc
    var = xc.square().sum(dim=0) / (x.shape[0] - 1)  # per-dimension sample variance
    if kind == "rms":
        mean_var = var.mean()
        if mean_var <= 0:
            raise ValueError("rms normalisation: all states are identical (tr(Sigma) = 0)")
        return xc / mean_var.sqrt()
    std = var.sqrt()
    if kind == "standardize":
        return xc / torch.where(std > 0, std, torch.ones_like(std))
    med = x.median(dim=0).values
    mad = 1.4826 * (x - med).abs().median(dim=0).values
    scale = torch.where(mad > 0, mad, torch.where(std > 0, std, torch.ones_like(std)))
    z = ((x - med) / scale).clamp(-ROBUST_CLIP, ROBUST_CLIP)
    return z - z.mean(dim=0)


# ---------------------------------------------------------------------------------------------
# Global spectrum: effective rank and monotonicity
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Spectrum:
    """Eigendecomposition Sigma = V diag(evals) V^T (ascending), evals clamped at 0."""

    evals: torch.Tensor  # (d,)
    evecs: torch.Tensor  # (d, d), columns
    trace: float

    @property
    def lambda_max(self) -> float:
        return float(self.evals[-1])


def _spectrum(x64: torch.Tensor) -> _Spectrum:
    """Sample covariance Sigma = (x - mean)^T (x - mean) / (n - 1) and its eigendecomposition."""
    xc = x64 - x64.mean(dim=0)
    sigma = xc.T @ xc / (x64.shape[0] - 1)
    evals, evecs = torch.linalg.eigh(sigma)
    trace = float(torch.diagonal(sigma).sum())
    if trace <= 0:
        raise ValueError("all states are identical (tr(Sigma) = 0); geometry is undefined")
    return _Spectrum(evals=evals.clamp_min(0.0), evecs=evecs, trace=trace)


def _gamma(spec: _Spectrum, gamma_rel: float) -> float:
    if not is_positive(gamma_rel):
        raise ValueError(f"gamma_rel must be a finite float > 0, got {gamma_rel!r}")
    return gamma_rel * spec.trace / spec.evecs.shape[0]


def _quotients(
    x64: torch.Tensor, pairs: torch.Tensor, spec: _Spectrum, gamma: float
) -> torch.Tensor:
    """r_ij = sum_k (v_k . delta)^2 / (lambda_k + gamma) / ||delta||^2; NaN where delta = 0."""
    delta = x64[pairs[:, 0]] - x64[pairs[:, 1]]
    weights = 1.0 / (spec.evals + gamma)
    num = ((delta @ spec.evecs).square() * weights).sum(dim=1)
    den = delta.square().sum(dim=1)
    return torch.where(den > 0, num / den, torch.full_like(num, float("nan")))


def _median(values: torch.Tensor) -> float:
    """Median ignoring NaN (mean of the two middle values for an even count; inf is allowed)."""
    v = values[~torch.isnan(values)].sort().values
    if v.numel() == 0:
        raise ValueError("median of an empty set (every value was NaN)")
    m = v.numel()
    return float(v[m // 2]) if m % 2 else float((v[m // 2 - 1] + v[m // 2]) / 2)


def _mono_stats(r: torch.Tensor, spec: _Spectrum, gamma: float) -> dict[str, float]:
    finite = r[~torch.isnan(r)]
    if finite.numel() == 0:
        raise ValueError("every pair has x_i == x_j; the monotonicity quotient is undefined")
    return {
        "median": _median(finite),
        "q05": float(torch.quantile(finite, 0.05)),
        "min_eig": 1.0 / (spec.lambda_max + gamma),  # lambda_min(P)
    }


def effective_rank(x: torch.Tensor) -> float:
    """k_eff = tr(Sigma) / ||Sigma||_2 = sum_k lambda_k / lambda_max, in [1, d]."""
    spec = _spectrum(_as_states(x))
    return spec.trace / spec.lambda_max


def monotonicity_quotients(x: torch.Tensor, pairs: torch.Tensor, gamma_rel: float) -> torch.Tensor:
    """r_ij = (x_i - x_j)^T P (x_i - x_j) / ||x_i - x_j||^2 for each pair, float64.

    P = (Sigma + gamma I)^-1 with gamma = gamma_rel * tr(Sigma) / d, via the eigendecomposition of
    Sigma. Every r_ij lies in [1 / (lambda_max + gamma), 1 / (lambda_min + gamma)]. A pair of
    identical states has no direction: its r_ij is NaN (and is ignored by the statistics).
    """
    x64 = _as_states(x)
    pairs = _check_pairs(pairs, x64.shape[0])
    spec = _spectrum(x64)
    return _quotients(x64, pairs, spec, _gamma(spec, gamma_rel))


def global_monotonicity(
    x: torch.Tensor, pairs: torch.Tensor, gamma_rel: float, stat: str = "median"
) -> float:
    """m_mono: median or 5 % quantile of r_ij, or ``min_eig`` = lambda_min(P) = 1/(lambda_max + gamma)."""
    if stat not in MONO_STATS:
        raise ValueError(f"stat must be one of {MONO_STATS}, got {stat!r}")
    x64 = _as_states(x)
    pairs = _check_pairs(pairs, x64.shape[0])
    spec = _spectrum(x64)
    gamma = _gamma(spec, gamma_rel)
    return _mono_stats(_quotients(x64, pairs, spec, gamma), spec, gamma)[stat]


# ---------------------------------------------------------------------------------------------
# Local curvature
# ---------------------------------------------------------------------------------------------


def _neighbour_lambda_max(x64: torch.Tensor, anchors: torch.Tensor, k: int) -> torch.Tensor:
    """lambda_max of the sample covariance of each anchor's k nearest neighbours (anchor excluded).

    kNN: a block of anchors at a time, rank the states by ||b||^2 - 2 a.b (the squared distance
    minus the row constant ||a||^2) in float64; the anchor's own column is set to +inf.
    Spectrum: with Z the k x d neighbour matrix centred on its own mean, C = Z^T Z / (k - 1)
    shares its non-zero eigenvalues with the k x k Gram matrix Z Z^T / (k - 1), which is far
    cheaper than the d x d covariance.
    """
    n, d = x64.shape
    if k < 2:
        raise ValueError(f"k must be >= 2 (the covariance of one point is 0), got {k}")
    if k >= n:
        raise ValueError(f"k = {k} neighbours need n > k states (anchor excluded), got n = {n}")
    sq_norms = x64.square().sum(dim=1)
    block = max(1, min(anchors.numel(), _BLOCK_ELEMENTS // max(n, k * d)))
    out = []
    for start in range(0, anchors.numel(), block):
        idx = anchors[start : start + block]
        rank_key = torch.addmm(sq_norms[None, :], x64[idx], x64.T, alpha=-2.0)  # (b, n)
        rank_key[torch.arange(idx.numel(), device=x64.device), idx] = float("inf")
        nbrs = torch.topk(rank_key, k, dim=1, largest=False).indices  # (b, k)
        z = x64[nbrs]  # (b, k, d), a fresh copy
        z -= z.mean(dim=1, keepdim=True)
        gram = z @ z.transpose(1, 2) / (k - 1)
        out.append(torch.linalg.eigvalsh(gram)[:, -1].clamp_min(0.0))
    return torch.cat(out)


def _curvature(lambda_max: torch.Tensor) -> float:
    """m_curv = median_i 1 / lambda_max_i (a neighbourhood of identical states gives inf)."""
    return _median(1.0 / lambda_max)


def local_curvature(x: torch.Tensor, anchors: torch.Tensor, k: int) -> float:
    """m_curv = median over anchors i of 1 / lambda_max(C_i).

    C_i is the sample covariance (denominator k - 1) of the k nearest neighbours of x_i in
    Euclidean distance, the anchor itself excluded, about the neighbours' own mean.
    """
    x64 = _as_states(x)
    anchors = _check_anchors(anchors, x64.shape[0])
    return _curvature(_neighbour_lambda_max(x64, anchors, k))


# ---------------------------------------------------------------------------------------------
# One layer, every normalisation
# ---------------------------------------------------------------------------------------------


def _proxies(x64: torch.Tensor, plan: GeometryPlan, cfg: GeometryConfig,
             weights: torch.Tensor | None = None) -> tuple[dict[str, float], dict | None]:
    """All proxies of one already-normalised float64 sample, and with `weights` (B, n) their
    token-bootstrap replicates (resampled_proxies), else None."""
    spec = _spectrum(x64)
    gamma = _gamma(spec, cfg.gamma_rel)
    r = _quotients(x64, plan.pairs, spec, gamma)
    lam = _neighbour_lambda_max(x64, plan.anchors, cfg.k_neighbors)
    mono = _mono_stats(r, spec, gamma)
    point = {
        "m_curv": _curvature(lam),
        "m_mono": mono[cfg.mono_stat],
        "m_mono_median": mono["median"],
        "m_mono_q05": mono["q05"],
        "m_mono_min_eig": mono["min_eig"],
        "k_eff": spec.trace / spec.lambda_max,
        "tr_sigma": spec.trace,
        "lambda_max": spec.lambda_max,
    }
    if weights is None:
        return point, None
    return point, resampled_proxies(x64, plan, cfg, spec, 1.0 / lam, r, weights)


# ---------------------------------------------------------------------------------------------
# Token bootstrap
# ---------------------------------------------------------------------------------------------

RESAMPLE_RANK = 32  # the leading eigenvectors of the span a replicate's lambda_max is sought in


def resample_weights(n: int, n_resamples: int, generator: torch.Generator) -> torch.Tensor:
    """(n_resamples, n) float64 multiplicities of a bootstrap over the n sampled tokens: each
    row counts how often each token was drawn in n draws with replacement (rows sum to n)."""
    draws = torch.randint(n, (n_resamples, n), generator=generator)
    w = torch.zeros(n_resamples, n, dtype=torch.float64)
    return w.scatter_add_(1, draws, torch.ones_like(draws, dtype=torch.float64))


def weighted_quantile(values: torch.Tensor, weights: torch.Tensor, q: float) -> torch.Tensor:
    """(B,) q-quantiles of `values` (m,) under each row of `weights` (B, m): the smallest value
    whose cumulative weight reaches q of the total, averaged with the next one where it meets
    q exactly (with unit weights and q = 0.5, the ordinary median). NaN values are ignored; a
    row with no weight gives NaN."""
    keep = ~torch.isnan(values)
    v, order = values[keep].sort()
    w = weights[:, keep][:, order]
    if v.numel() == 0:
        return torch.full((weights.shape[0],), float("nan"), dtype=torch.float64)
    cum = w.cumsum(dim=1)
    target = q * cum[:, -1:]
    last = v.numel() - 1
    lo = torch.searchsorted(cum, target)[:, 0].clamp_max(last)  # first reaching the target
    hi = torch.searchsorted(cum, target, right=True)[:, 0].clamp_max(last)  # first passing it
    out = (v[lo] + v[hi]) / 2  # lo == hi unless the target is met exactly
    return torch.where(cum[:, -1] > 0, out, torch.full_like(out, float("nan")))


def _replicate_lambda_max(x64: torch.Tensor, basis: torch.Tensor, y: torch.Tensor,
                          w: torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
    """lambda_max of each replicate's weighted covariance (rows of w: token multiplicities, mu:
    their weighted means), by Rayleigh-Ritz in the span of the full sample's RESAMPLE_RANK
    leading eigenvectors plus, per replicate, the residual of its Ritz vector there (one block
    Krylov step: the direction the span misses most). basis: those eigenvectors (d, r); y:
    x64 @ basis."""
    total = w.sum(dim=1)  # (b,)

    def cov_times(v: torch.Tensor, xv: torch.Tensor) -> torch.Tensor:
        """Sigma_b v for each replicate: v (b, d), xv = x64 @ v_b as (b, n)."""
        return ((w * xv) @ x64 - total[:, None] * mu * (mu * v).sum(1, keepdim=True)) / (total[:, None] - 1)

    mu_y = mu @ basis
    cov = (w[:, :, None] * y).transpose(1, 2) @ y - total[:, None, None] * mu_y[:, :, None] * mu_y[:, None, :]
    cov /= (total - 1)[:, None, None]
    theta, u = torch.linalg.eigh(cov)
    ritz = u[:, :, -1] @ basis.T  # (b, d)
    resid = cov_times(ritz, u[:, :, -1] @ y.T) - theta[:, -1:] * ritz
    for _ in range(2):  # outside the span (twice, for orthogonality to rounding)
        resid -= (resid @ basis) @ basis.T
    norm = resid.norm(dim=1, keepdim=True)
    # where the Ritz vector is already an eigenvector (or the span is the whole space) there is
    # no direction to add: a zero vector leaves the Ritz values as they are
    useful = norm > 1e-9 * theta[:, -1:].abs().clamp_min(1e-300)
    e = torch.where(useful, resid / norm.clamp_min(1e-300), torch.zeros_like(resid))
    se = cov_times(e, e @ x64.T)
    r = basis.shape[1]
    big = torch.zeros(w.shape[0], r + 1, r + 1, dtype=x64.dtype, device=x64.device)
    big[:, :r, :r] = cov
    big[:, :r, r] = big[:, r, :r] = se @ basis
    big[:, r, r] = (se * e).sum(1)
    return torch.linalg.eigvalsh(big)[:, -1]


def resampled_proxies(x64: torch.Tensor, plan: GeometryPlan, cfg: GeometryConfig, spec: _Spectrum,
                      inv_lambda: torch.Tensor, quotients: torch.Tensor,
                      weights: torch.Tensor) -> dict[str, torch.Tensor]:
    """m_curv, m_mono, k_eff and tr(Sigma) of each bootstrap replicate (rows of `weights`, token
    multiplicities), each (B,) float64.

    k_eff: tr and lambda_max of the weighted covariance, lambda_max in the span of the full
    sample's RESAMPLE_RANK leading eigenvectors (a replicate's covariance is a perturbation of
    the full one, so its top eigenvector stays in that span to second order). m_curv: the
    weighted median over anchors (weight: the anchor's multiplicity) of the full sample's
    1 / lambda_max_i. m_mono: the weighted statistic over pairs (weight: the product of the two
    multiplicities) of the full sample's r_ij, or 1 / (lambda_max + gamma) for min_eig. The
    neighbourhoods and P are the full sample's: a replicate varies which tokens enter the
    statistics, not the neighbour search or the preconditioner.
    """
    n, d = x64.shape
    w = weights.to(x64.dtype)
    total = w.sum(dim=1)  # n for every bootstrap row
    mu = w @ x64 / total[:, None]  # (B, d)
    tr = (w @ x64.square().sum(dim=1) - total * mu.square().sum(dim=1)) / (total - 1)
    basis = spec.evecs[:, -min(d, RESAMPLE_RANK):]  # (d, r), projected once for every chunk
    y = x64 @ basis
    lam = torch.cat([_replicate_lambda_max(x64, basis, y, w[lo : lo + 16], mu[lo : lo + 16])
                     for lo in range(0, w.shape[0], 16)])
    if cfg.mono_stat == "min_eig":
        m_mono = 1.0 / (lam + cfg.gamma_rel * tr / d)
    else:
        pair_w = w[:, plan.pairs[:, 0]] * w[:, plan.pairs[:, 1]]
        m_mono = weighted_quantile(quotients, pair_w, 0.5 if cfg.mono_stat == "median" else 0.05)
    return {"m_curv": weighted_quantile(inv_lambda, w[:, plan.anchors], 0.5), "m_mono": m_mono,
            "k_eff": tr / lam, "tr_sigma": tr}


def _rescaled(proxies: dict[str, float], c: float) -> dict[str, float]:
    """Proxies of the sample x / sqrt(c), from those of x, exactly.

    Sigma -> Sigma / c, gamma -> gamma / c, so P -> c P and every r_ij -> c r_ij; neighbours are
    unchanged and every C_i -> C_i / c, so m_curv -> c m_curv; k_eff is scale-free.
    """
    out = dict(proxies)
    for key in ("m_curv", "m_mono", "m_mono_median", "m_mono_q05", "m_mono_min_eig"):
        out[key] = proxies[key] * c
    out["tr_sigma"] = proxies["tr_sigma"] / c
    out["lambda_max"] = proxies["lambda_max"] / c
    return out


def layer_proxies(x: torch.Tensor, plan: GeometryPlan, cfg: GeometryConfig) -> list[dict]:
    """Geometry proxies of one layer's sampled states under each of cfg.normalizations.

    Returns one dict per normalisation, in cfg order, with keys: norm, m_curv, m_mono (the
    cfg.mono_stat variant), m_mono_median, m_mono_q05, m_mono_min_eig, k_eff, tr_sigma, lambda_max.
    ``rms`` is a global rescaling of ``none`` by s^2 = tr(Sigma)/d, so its proxies are derived
    exactly from those of ``none`` instead of repeating the kNN search and eigendecomposition.
    """
    return layer_proxies_resampled(x, plan, cfg, None)[0]


def layer_proxies_resampled(x: torch.Tensor, plan: GeometryPlan, cfg: GeometryConfig,
                            weights: torch.Tensor | None) -> tuple[list[dict], dict[str, dict]]:
    """layer_proxies, and with bootstrap `weights` (B, n) the replicates of m_curv, m_mono and
    k_eff under each normalisation ({norm: {proxy: (B,) tensor}}; rms derived from none by each
    replicate's own tr(Sigma) / d, as for the point values). The normalisation's centre and
    scale are the full sample's."""
    x64 = _as_states(x)
    n = x64.shape[0]
    plan = GeometryPlan(
        anchors=_check_anchors(plan.anchors, n).to(x64.device),
        pairs=_check_pairs(plan.pairs, n).to(x64.device),
    )
    if weights is not None and (weights.ndim != 2 or weights.shape[1] != n):
        raise ValueError(f"bootstrap weights must be (B, {n}), got {tuple(weights.shape)}")
    if weights is not None:
        weights = weights.to(x64.device)  # the states' device: a GPU's, or the CPU
    computed: dict[str, dict[str, float]] = {}
    replicates: dict[str, dict] = {}
    if "none" in cfg.normalizations or "rms" in cfg.normalizations:
        computed["none"], replicates["none"] = _proxies(normalize(x64, "none"), plan, cfg, weights)
    if "rms" in cfg.normalizations:
        none = computed["none"]
        computed["rms"] = _rescaled(none, none["tr_sigma"] / x64.shape[1])
        if weights is not None:
            rep = replicates["none"]
            c = rep["tr_sigma"] / x64.shape[1]
            replicates["rms"] = {"m_curv": rep["m_curv"] * c, "m_mono": rep["m_mono"] * c,
                                 "k_eff": rep["k_eff"], "tr_sigma": rep["tr_sigma"] / c}
    for kind in ("standardize", "robust"):
        if kind in cfg.normalizations:
            computed[kind], replicates[kind] = _proxies(normalize(x64, kind), plan, cfg, weights)
    rows = [{"norm": kind, **computed[kind]} for kind in cfg.normalizations]
    if weights is None:
        return rows, {}
    return rows, {kind: replicates[kind] for kind in cfg.normalizations}
