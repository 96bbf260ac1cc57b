"""Intervals from resampling (percentile bootstrap, seeded; the jackknife for pooled counts),
for the correlations of the bridgeability table (resampling layers) and the generation
metrics (resampling samples).

A percentile interval is the [2.5 %, 97.5 %] quantile range of the statistic over `n_boot`
resamples drawn with replacement; resamples where the statistic is undefined (a constant side
of a correlation, no scored token) are left out and counted. Pure functions, no Dagster.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

N_BOOT = 2000
LEVEL = 0.95


def resample_indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n) indices drawn with replacement from range(n), by a seeded generator."""
    if n < 1 or n_boot < 1:
        raise ValueError(f"resampling needs n >= 1 and n_boot >= 1, got {n}, {n_boot}")
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def _percentile_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return float("nan"), float("nan")
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(v, [tail, 100 - tail])
    return float(lo), float(hi)


def _rank_rows(x: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(x, axis=1)  # average ranks for ties, as scipy.stats.spearmanr


def _row_spearman(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman correlation of each row of a with the same row of b; NaN where a side is
    constant."""
    ra, rb = _rank_rows(a), _rank_rows(b)
    ra -= ra.mean(axis=1, keepdims=True)
    rb -= rb.mean(axis=1, keepdims=True)
    den = np.sqrt((ra * ra).sum(axis=1) * (rb * rb).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (ra * rb).sum(axis=1) / den, np.nan)


def spearman_interval(x: Sequence[float], y: Sequence[float], *, n_boot: int = N_BOOT,
                      seed: int = 0) -> dict:
    """Spearman(x, y) over the given points, with a percentile bootstrap interval over the
    points (resampled together). Returns {"rho", "low", "high", "undefined"}: `undefined`
    counts the resamples in which one side was constant."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape or a.size < 3:
        raise ValueError(f"need two 1-D sequences of >= 3 points, got {a.shape}, {b.shape}")
    rho = float(_row_spearman(a[None], b[None])[0])
    idx = resample_indices(a.size, n_boot, seed)
    boot = _row_spearman(a[idx], b[idx])
    lo, hi = _percentile_interval(boot)
    return {"rho": rho, "low": lo, "high": hi, "undefined": int(np.isnan(boot).sum())}


def compare_intervals(ci: tuple[float, float], reference: tuple[float, float]) -> str:
    """"above" / "below" the reference interval when the two do not overlap, else "not
    distinguishable" (also when either interval is undefined)."""
    lo, hi = ci
    rlo, rhi = reference
    if any(v != v for v in (lo, hi, rlo, rhi)):
        return "not distinguishable"
    if lo > rhi:
        return "above"
    if hi < rlo:
        return "below"
    return "not distinguishable"


def bootstrap_interval(n: int, statistic: Callable[[np.ndarray], float], *,
                       n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of `statistic(indices)` over resamples of range(n)."""
    idx = resample_indices(n, n_boot, seed)
    return _percentile_interval(np.array([statistic(row) for row in idx], dtype=np.float64))


def jackknife_interval(n: int, statistic: Callable[[np.ndarray], float],
                       level: float = LEVEL) -> tuple[float, float]:
    """Normal interval from the leave-one-out jackknife's standard error, for statistics that
    pool counts over the samples (diversity: distinct / all n-grams), where a bootstrap's
    duplicated samples would repeat n-grams and bias every resample downwards."""
    from scipy.stats import norm

    if n < 2:
        raise ValueError(f"the jackknife needs n >= 2 samples, got {n}")
    full = statistic(np.arange(n))
    loo = np.array([statistic(np.delete(np.arange(n), i)) for i in range(n)], dtype=np.float64)
    if not np.all(np.isfinite(loo)) or not np.isfinite(full):
        return float("nan"), float("nan")
    se = float(np.sqrt((n - 1) / n * ((loo - loo.mean()) ** 2).sum()))
    z = float(norm.ppf(0.5 + level / 2))
    return float(full - z * se), float(full + z * se)


def samples_to_separate(a: float, a_ci: tuple[float, float], b: float, b_ci: tuple[float, float],
                        n: int) -> int | None:
    """About how many samples (each model's) would make the 95 % intervals of two estimates
    from n samples each stop overlapping, with each interval's half-width facing the other
    shrinking as 1/sqrt(n). n itself where they are already apart; None where the estimates are
    equal (no sample count separates them)."""
    if a == b:
        return None
    lo, hi = (a, b) if a < b else (b, a)
    (_, lo_up), (hi_down, _) = (a_ci, b_ci) if a < b else (b_ci, a_ci)
    reach = (lo_up - lo) + (hi - hi_down)  # the two half-widths that face each other
    if not (reach > 0) or lo_up < hi_down:
        return n
    return int(math.ceil(n * (reach / (hi - lo)) ** 2))
