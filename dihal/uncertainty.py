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


def percentile_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return float("nan"), float("nan")
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(v, [tail, 100 - tail])
    return float(lo), float(hi)


def _rank_rows(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their positions, as scipy.stats.spearmanr) of
    each row: by counting, over rows of up to 64 values (the swept layers), in one vectorised
    pass; by scipy's rankdata for longer rows."""
    if x.shape[1] > 64:
        from scipy.stats import rankdata

        return rankdata(x, axis=1)
    a = x[:, :, None]
    b = x[:, None, :]
    below = (b < a).sum(axis=2)
    same = (b == a).sum(axis=2)
    return below + (same + 1) / 2.0


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
    lo, hi = percentile_interval(boot)
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
    return percentile_interval(np.array([statistic(row) for row in idx], dtype=np.float64))


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


# ---------------------------------------------------------------------------------------------
# Paired comparisons on the same layers: the difference of two Spearman correlations
# with one target, the partial Spearman given depth, Holm's correction, and the verdict.
# ---------------------------------------------------------------------------------------------

INTERVAL_METHODS = ("percentile", "bca")


def lower_tail_level(boot: np.ndarray, theta: float, jack: np.ndarray | None,
                      at: float) -> float:
    """The lower-tail level alpha at which the bootstrap interval's bound sits at `at`
    (percentile: the share of replicates below it; BCa: that share mapped through the bias
    and acceleration corrections). Ties at `at` count half; the share is kept inside
    [1/(2B), 1 - 1/(2B)], so a p-value is never below 1/B."""
    from scipy.stats import norm

    b = boot.size
    q = (np.sum(boot < at) + 0.5 * np.sum(boot == at)) / b
    q = min(max(q, 0.5 / b), 1 - 0.5 / b)
    if jack is None:
        return float(q)
    z0, a = _bca_constants(boot, theta, jack)
    w = float(norm.ppf(q)) - z0
    return float(norm.cdf(w / (1 + a * w) - z0))


def _bca_constants(boot: np.ndarray, theta: float, jack: np.ndarray) -> tuple[float, float]:
    """(z0, a): the bias correction (from the share of replicates below the estimate) and the
    acceleration (from the leave-one-out jackknife) of Efron's BCa interval."""
    from scipy.stats import norm

    b = boot.size
    share = (np.sum(boot < theta) + 0.5 * np.sum(boot == theta)) / b
    z0 = float(norm.ppf(min(max(share, 0.5 / b), 1 - 0.5 / b)))
    d = jack.mean() - jack
    den = 6.0 * float((d * d).sum()) ** 1.5
    return z0, (float((d ** 3).sum()) / den if den > 0 else 0.0)


def _interval(boot: np.ndarray, theta: float, jack: np.ndarray | None,
              level: float) -> tuple[float, float]:
    """Percentile interval of `boot`, or with `jack` (leave-one-out values) the BCa one."""
    from scipy.stats import norm

    v = boot[np.isfinite(boot)]
    if v.size == 0 or not np.isfinite(theta):
        return float("nan"), float("nan")
    tail = (1 - level) / 2
    if jack is None or not np.all(np.isfinite(jack)):
        levels = np.array([tail, 1 - tail])
    else:
        z0, a = _bca_constants(v, theta, jack)
        z = z0 + norm.ppf([tail, 1 - tail])
        levels = norm.cdf(z0 + z / (1 - a * z))
    lo, hi = np.quantile(v, levels)
    return float(lo), float(hi)


def _check_layers(name: str, values, n: int | None = None) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64)
    if a.ndim != 1 or a.size < 3 or (n is not None and a.size != n):
        want = f"{n} values (one per layer)" if n else ">= 3 values (one per layer)"
        raise ValueError(f"{name} must be a 1-D sequence of {want}, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} holds non-finite values; drop those layers first")
    return a


def _rho_diff_rows(a: np.ndarray, b: np.ndarray, y: np.ndarray) -> np.ndarray:
    return _row_spearman(a, y) - _row_spearman(b, y)


def paired_spearman_difference(x_a, x_b, y, *, n_boot: int = N_BOOT, seed: int = 0,
                               level: float = LEVEL, method: str = "percentile") -> dict:
    """rho(x_a, y) - rho(x_b, y) over the same layers, with a paired bootstrap interval: each
    resample draws layers with replacement and recomputes BOTH correlations on those layers,
    so what the two statistics share (the target's noise, the layers) cancels in the
    difference. `method` "percentile" or "bca" (Efron's bias-corrected and accelerated, the
    acceleration from the leave-one-layer-out jackknife). The two-sided p-value is the
    inverted interval: 2 min(alpha, 1 - alpha), alpha the lower-tail level at which the
    interval's bound reaches 0 (so p < 1 - level exactly when the interval excludes 0, up to
    the replicates' resolution; never below 1 / n_boot).

    Measured (200 simulated 10-layer sweeps, tests/unit/test_uncertainty.py's generators): with
    a predictor truly better than depth (Spearman 0.98 vs 0.67) the percentile test says
    "above" in 55 % of runs, BCa in 58.5 %, the overlap of two separate intervals in 17.5 %;
    under the null any verdict came out in 3 % (percentile) and 8.5 % (BCa) of runs at the
    two-sided 5 % level: at ten layers BCa is too liberal, so percentile is the default.

    Returns {"rho_a", "rho_b", "diff", "low", "high", "p", "undefined"} (`undefined`:
    resamples with a constant side, left out). Covered by tests/unit/test_uncertainty.py
    test_paired_difference_* and test_paired_test_power_and_level_by_simulation."""
    if method not in INTERVAL_METHODS:
        raise ValueError(f"method must be one of {INTERVAL_METHODS}, got {method!r}")
    y = _check_layers("the target", y)
    a, b = _check_layers("predictor A", x_a, y.size), _check_layers("predictor B", x_b, y.size)
    rho_a = float(_row_spearman(a[None], y[None])[0])
    rho_b = float(_row_spearman(b[None], y[None])[0])
    diff = rho_a - rho_b
    idx = resample_indices(y.size, n_boot, seed)
    boot = _rho_diff_rows(a[idx], b[idx], y[idx])
    finite = boot[np.isfinite(boot)]
    jack = None
    if method == "bca":
        loo = np.array([np.delete(np.arange(y.size), i) for i in range(y.size)])
        jack = _rho_diff_rows(a[loo], b[loo], y[loo])
    lo, hi = _interval(finite, diff, jack, level)
    p = float("nan")
    if finite.size and np.isfinite(diff):
        alpha = lower_tail_level(finite, diff, jack if method == "bca" else None, 0.0)
        p = min(1.0, 2 * min(alpha, 1 - alpha))
    return {"rho_a": rho_a, "rho_b": rho_b, "diff": diff, "low": lo, "high": hi, "p": p,
            "undefined": int(boot.size - finite.size)}


def _partial_rows(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    rxy, rxz, ryz = _row_spearman(x, y), _row_spearman(x, z), _row_spearman(y, z)
    den = np.sqrt((1 - rxz ** 2) * (1 - ryz ** 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 1e-12, (rxy - rxz * ryz) / den, np.nan)


MAX_UNDEFINED = 0.05  # above this share of undefined resamples an interval is not given


def _partial_result(point: float, boot: np.ndarray, level: float) -> dict:
    """The partial Spearman's point, interval and undefined resamples: never dropped silently.
    The interval over the defined resamples only is conditional on the drawn layers not being
    ranked alike by predictor and control (where the partial is undefined), which biases it
    (at ten layers it rested on the resamples that drew one particular layer), so above
    MAX_UNDEFINED it is suppressed (NaN) and `suppressed` says so."""
    share = float(np.isnan(boot).mean())
    lo, hi = percentile_interval(boot, level)
    suppressed = share > MAX_UNDEFINED
    if suppressed:
        lo = hi = float("nan")
    return {"partial": point, "low": lo, "high": hi, "undefined": int(np.isnan(boot).sum()),
            "undefined_share": share, "suppressed": suppressed}


def partial_spearman(x, y, z, *, n_boot: int = N_BOOT, seed: int = 0,
                     level: float = LEVEL) -> dict:
    """The partial Spearman correlation of predictor x with target y given z (depth): the
    Pearson partial correlation of the ranks, (r_xy - r_xz r_yz) / sqrt((1 - r_xz^2)
    (1 - r_yz^2)) with r the Spearman correlations; what x says about y beyond depth. NaN
    where x or y is a monotone function of z (nothing is left once z is known), also in a
    resample whose drawn layers x or y rank as z does. Percentile interval over resampled
    layers, suppressed (NaN) where more than MAX_UNDEFINED of the resamples are undefined
    (_partial_result); {"partial", "low", "high", "undefined", "undefined_share",
    "suppressed"}. Covered by tests/unit/test_uncertainty.py test_partial_spearman_*."""
    y = _check_layers("the target", y)
    x, z = _check_layers("the predictor", x, y.size), _check_layers("the control", z, y.size)
    point = float(_partial_rows(x[None], y[None], z[None])[0])
    idx = resample_indices(y.size, n_boot, seed)
    return _partial_result(point, _partial_rows(x[idx], y[idx], z[idx]), level)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values (controls the family-wise error
    rate under any dependence): sorted ascending, the i-th (0-based) of m is multiplied by
    m - i, made non-decreasing, capped at 1; returned in the input order. NaN p-values are
    left out of the family and stay NaN. Covered by test_holm_by_hand."""
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    if ok.size:
        order = ok[np.argsort(p[ok], kind="stable")]
        m = order.size
        adj = np.maximum.accumulate(p[order] * (m - np.arange(m)))
        out[order] = np.minimum(adj, 1.0)
    return out.tolist()


VERDICTS = ("above", "below", "not distinguishable")


def paired_verdict(diff: float, p_adjusted: float, level: float = LEVEL) -> str:
    """"above" / "below" the reference when the (multiplicity-adjusted) p-value of the paired
    difference is under 1 - level and the difference is positive / negative; otherwise (NaN
    included) "not distinguishable". Covered by test_paired_verdict_every_way."""
    alpha = round(1 - level, 12)  # 1 - 0.95 is 0.05000000000000004 in floating point
    if not (np.isfinite(diff) and np.isfinite(p_adjusted)) or p_adjusted >= alpha:
        return "not distinguishable"
    return "above" if diff > 0 else "below" if diff < 0 else "not distinguishable"


def paired_standing(predictors: dict[str, Sequence[float]], reference: Sequence[float],
                    targets: dict[str, Sequence[float]], *, n_boot: int = N_BOOT,
                    seed: int = 0, level: float = LEVEL, method: str = "percentile") -> list[dict]:
    """Every predictor against the reference (depth) on every target, all on the same layers
    (the same resamples for every pair and the partial correlation): the paired difference of
    Spearman correlations with its interval and p-value, Holm's correction over the whole
    family (predictors x targets), the verdict from the corrected p-value, and the partial
    Spearman of the predictor given the reference. Values are oriented (higher = predicts
    higher target). A target given as (layers, seeds) (NaN where a layer has fewer seeds) is
    compared on its per-layer seed means with the two-level resample (layers, then seeds:
    two_level_paired_difference, two_level_partial_spearman; `method` then must be
    "percentile"). One dict per (predictor, target): predictor, target, rho, rho_reference,
    diff, low, high, p, p_holm, verdict, partial, partial_low, partial_high,
    partial_undefined (the share of resamples where the partial is undefined; its interval is
    NaN above MAX_UNDEFINED). Covered by test_paired_standing_corrects_over_the_family and
    test_paired_standing_gives_every_verdict_on_hand_made_layers."""
    rows = []
    for tname, y in targets.items():
        seeds = np.ndim(y) == 2
        if seeds and method != "percentile":
            raise ValueError("a (layers, seeds) target takes the percentile interval only")
        for pname, x in predictors.items():
            if seeds:
                d = two_level_paired_difference(x, reference, y, n_boot=n_boot, seed=seed,
                                                level=level)
                pc = two_level_partial_spearman(x, y, reference, n_boot=n_boot, seed=seed,
                                                level=level)
            else:
                d = paired_spearman_difference(x, reference, y, n_boot=n_boot, seed=seed,
                                               level=level, method=method)
                pc = partial_spearman(x, y, reference, n_boot=n_boot, seed=seed, level=level)
            rows.append({"predictor": pname, "target": tname, "rho": d["rho_a"],
                         "rho_reference": d["rho_b"], "diff": d["diff"], "low": d["low"],
                         "high": d["high"], "p": d["p"], "partial": pc["partial"],
                         "partial_low": pc["low"], "partial_high": pc["high"],
                         "partial_undefined": pc["undefined_share"]})
    for row, adj in zip(rows, holm([r["p"] for r in rows]), strict=True):
        row["p_holm"] = adj
        row["verdict"] = paired_verdict(row["diff"], adj, level)
    return rows


# ---------------------------------------------------------------------------------------------
# Training-seed variance: values per layer and seed (layers x seeds, NaN where a layer has fewer
# seeds), resampled on two levels.
# ---------------------------------------------------------------------------------------------


def _seed_table(values) -> tuple[np.ndarray, np.ndarray]:
    """(L, S) float64 with each layer's finite values first (NaN after), and each layer's
    seed count; at least one seed per layer."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2 or v.shape[0] < 1 or v.shape[1] < 1:
        raise ValueError(f"seed values must be (layers, seeds), got shape {v.shape}")
    if np.isinf(v).any():
        raise ValueError("seed values hold inf; a diverged run should be dropped (NaN), not kept")
    v = np.sort(v, axis=1)  # NaN sort last: each row's seeds first
    counts = np.isfinite(v).sum(axis=1)
    if (counts == 0).any():
        raise ValueError(f"layers at rows {np.flatnonzero(counts == 0).tolist()} have no seed "
                         "value; drop them or train them")
    return v, counts


def seed_resample_means(values, *, n_boot: int = N_BOOT, seed: int = 0,
                        resample_layers: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The two-level bootstrap: each replicate draws layers with replacement (when
    `resample_layers`), then, for every drawn layer, its seeds with replacement (as many as it
    has), and averages them. Returns (layer indices (n_boot, L), seed means (n_boot, L)): row b
    column i is the mean over resampled seeds of layer idx[b, i]. A layer with one seed keeps
    its one value. Covered by test_seed_resample_means_*."""
    v, counts = _seed_table(values)
    n_layers, width = v.shape
    rng = np.random.default_rng(seed)
    idx = (rng.integers(0, n_layers, size=(n_boot, n_layers)) if resample_layers
           else np.broadcast_to(np.arange(n_layers), (n_boot, n_layers)).copy())
    c = counts[idx]  # (B, L) seeds of each drawn layer
    pick = np.floor(rng.random((n_boot, n_layers, width)) * c[..., None]).astype(np.int64)
    drawn = v[idx[..., None], pick]  # (B, L, S): only the first c columns count
    use = np.arange(width) < c[..., None]
    return idx, np.where(use, drawn, 0.0).sum(axis=2) / c


def seed_spread(values, layers: Sequence[int]) -> list[dict]:
    """Per layer: how many seeds, their mean, standard deviation (ddof 1; NaN with one seed),
    min and max. Covered by test_seed_spread_by_hand."""
    v, counts = _seed_table(values)
    if len(layers) != v.shape[0]:
        raise ValueError(f"{len(layers)} layer names for {v.shape[0]} rows of seed values")
    out = []
    for ll, row, c in zip(layers, v, counts, strict=True):
        s = row[:c]
        out.append({"layer": int(ll), "n_seeds": int(c), "mean": float(s.mean()),
                    "sd": float(s.std(ddof=1)) if c > 1 else float("nan"),
                    "min": float(s.min()), "max": float(s.max())})
    return out


def two_level_spearman(predictor: Sequence[float], values, *, n_boot: int = N_BOOT,
                       seed: int = 0, level: float = LEVEL) -> dict:
    """Spearman(predictor, per-layer mean over seeds) with a two-level percentile interval
    (layers, then seeds within layers: seed_resample_means). Orient both sides before calling
    (e.g. -NLL). {"rho", "low", "high", "undefined"}. Covered by test_two_level_spearman_*."""
    v, _ = _seed_table(values)
    x = _check_layers("the predictor", predictor, v.shape[0])
    mean = np.nanmean(v, axis=1)
    rho = float(_row_spearman(x[None], mean[None])[0])
    idx, means = seed_resample_means(v, n_boot=n_boot, seed=seed)
    boot = _row_spearman(x[idx], means)
    lo, hi = percentile_interval(boot, level)
    return {"rho": rho, "low": lo, "high": hi, "undefined": int(np.isnan(boot).sum())}


def two_level_paired_difference(x_a: Sequence[float], x_b: Sequence[float], values, *,
                                n_boot: int = N_BOOT, seed: int = 0,
                                level: float = LEVEL) -> dict:
    """paired_spearman_difference against the per-layer seed means, each replicate resampling
    layers and then seeds within layers (the same draws for both sides); percentile interval,
    p-value by inversion as there. {"rho_a", "rho_b", "diff", "low", "high", "p"}. Covered by
    test_two_level_paired_difference_widens_with_seed_noise."""
    v, _ = _seed_table(values)
    a = _check_layers("predictor A", x_a, v.shape[0])
    b = _check_layers("predictor B", x_b, v.shape[0])
    mean = np.nanmean(v, axis=1)
    rho_a = float(_row_spearman(a[None], mean[None])[0])
    rho_b = float(_row_spearman(b[None], mean[None])[0])
    idx, means = seed_resample_means(v, n_boot=n_boot, seed=seed)
    boot = _rho_diff_rows(a[idx], b[idx], means)
    boot = boot[np.isfinite(boot)]
    lo, hi = percentile_interval(boot, level)
    p = float("nan")
    if boot.size:
        alpha = lower_tail_level(boot, rho_a - rho_b, None, 0.0)
        p = min(1.0, 2 * min(alpha, 1 - alpha))
    return {"rho_a": rho_a, "rho_b": rho_b, "diff": rho_a - rho_b, "low": lo, "high": hi,
            "p": p}


def two_level_partial_spearman(x: Sequence[float], values, z: Sequence[float], *,
                               n_boot: int = N_BOOT, seed: int = 0, level: float = LEVEL) -> dict:
    """partial_spearman of x with the per-layer seed means of `values` (layers, seeds) given
    z, its interval from the two-level resample (seed_resample_means), suppressed as there.
    {"partial", "low", "high", "undefined", "undefined_share", "suppressed"}. Covered by
    test_two_level_partial_spearman_matches_one_level."""
    v, _ = _seed_table(values)
    x = _check_layers("the predictor", x, v.shape[0])
    z = _check_layers("the control", z, v.shape[0])
    mean = np.nanmean(v, axis=1)
    point = float(_partial_rows(x[None], mean[None], z[None])[0])
    idx, means = seed_resample_means(v, n_boot=n_boot, seed=seed)
    return _partial_result(point, _partial_rows(x[idx], means, z[idx]), level)


def seed_oracle(values, layers: Sequence[int], *, l_star: int | None = None,
                n_boot: int = N_BOOT, seed: int = 0, level: float = LEVEL) -> dict:
    """The oracle layer (lowest mean over seeds; ties to the first listed) and how it moves
    when each layer's seeds are resampled (layers are all kept: a layer left out of a resample
    could not be its oracle). With `l_star`, l*'s standing: its rank by the seed mean (1 =
    best) with an interval, the share of replicates in which it is the oracle, and its gap
    to the best layer's mean with an interval.
    {"oracle", "oracle_share", "picks" {layer: share}, and with l_star "l_star_rank",
    "l_star_rank_low", "l_star_rank_high", "l_star_is_oracle", "gap", "gap_low",
    "gap_high"}. Covered by test_seed_oracle_*."""
    v, _ = _seed_table(values)
    names = np.asarray(list(layers))
    if names.size != v.shape[0]:
        raise ValueError(f"{names.size} layer names for {v.shape[0]} rows of seed values")
    mean = np.nanmean(v, axis=1)
    _, means = seed_resample_means(v, n_boot=n_boot, seed=seed, resample_layers=False)
    picks = names[np.argmin(means, axis=1)]
    oracle = names[int(np.argmin(mean))]
    got, counts = np.unique(picks, return_counts=True)
    out = {"oracle": int(oracle), "oracle_share": float(np.mean(picks == oracle)),
           "picks": {int(ll): round(float(c) / n_boot, 4)
                     for ll, c in sorted(zip(got, counts, strict=True), key=lambda t: -t[1])}}
    if l_star is None:
        return out
    where = np.flatnonzero(names == l_star)
    if where.size != 1:
        raise ValueError(f"l* = {l_star} is not one of the layers {names.tolist()}")
    j = int(where[0])
    tail = (1 - level) / 2
    ranks = 1 + (means < means[:, [j]]).sum(axis=1)
    gaps = means[:, j] - means.min(axis=1)
    lo, hi = np.quantile(ranks, [tail, 1 - tail], method="inverted_cdf")
    glo, ghi = percentile_interval(gaps, level)
    out.update({"l_star_rank": int(1 + (mean < mean[j]).sum()), "l_star_rank_low": int(lo),
                "l_star_rank_high": int(hi), "l_star_is_oracle": float(np.mean(picks == l_star)),
                "gap": float(mean[j] - mean.min()), "gap_low": glo, "gap_high": ghi})
    return out


def oracle_by_measures(layers: Sequence[dict], measures: Sequence[str] = ("val_loss", "hybrid_nll")
                       ) -> dict:
    """The oracle (lowest) and worst (highest) swept layer by each measure (lower is better;
    ties to the shallower layer), and whether the measures disagree on either. Rows are the
    sweep's {"layer", <measure>...}; a row whose measure is missing or NaN is left out of that
    measure. {"by": {measure: {"oracle", "worst"}}, "oracle_disagree", "worst_disagree"}.
    Covered by test_oracle_by_measures_*."""
    by = {}
    for m in measures:
        pts = sorted((int(r["layer"]), float(r[m])) for r in layers
                     if r.get(m) is not None and math.isfinite(float(r[m])))
        if not pts:
            raise ValueError(f"no swept layer has a finite {m!r}; is the sweep complete?")
        by[m] = {"oracle": min(pts, key=lambda t: (t[1], t[0]))[0],
                 "worst": max(pts, key=lambda t: (t[1], -t[0]))[0]}
    oracles = {b["oracle"] for b in by.values()}
    worsts = {b["worst"] for b in by.values()}
    return {"by": by, "oracle_disagree": len(oracles) > 1, "worst_disagree": len(worsts) > 1}


# ---------------------------------------------------------------------------------------------
# Power, prospective: how many samples per model the test actually used needs for a NAMED effect
# ---------------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------------
# The pre-registered primary test: S_l under the primary normalisation against depth on one
# target, one-sided, with the smallest p-value its design (the swept layers) can reach.
# ---------------------------------------------------------------------------------------------

PRIMARY_RESAMPLES = 10_000  # the primary test's resamples of layers (>= 10^4: arithmetic on ranks)
TIE = 1e-12  # |rho_a - rho_b| at or under this is a tie: both rank the drawn layers alike
PRIMARY_BETTER, PRIMARY_NOT, PRIMARY_UNDECIDABLE = (
    "better", "not distinguishable", "design cannot decide")  # primary_test's verdicts


def _one_sided_share(boot: np.ndarray) -> tuple[float, int, int]:
    """(p, ties, undefined) of a one-sided bootstrap test of "the difference is > 0": p =
    (1 + resamples at or under 0, ties and undefined ones included) / (1 + resamples), the
    Monte Carlo p-value that never reaches 0; ties: resamples with |difference| <= TIE."""
    undefined = int(np.isnan(boot).sum())
    ties = int((np.abs(boot) <= TIE).sum())
    against = int((boot <= TIE).sum()) + undefined
    return (1 + against) / (1 + boot.size), ties, undefined


def design_min_p(x, z, *, n_boot: int = PRIMARY_RESAMPLES, seed: int = 0) -> dict:
    """The smallest p-value primary_test can return over these layers whatever the target:
    in a resample where x and z rank the drawn layers alike their Spearman correlations with
    ANY target are equal, so the difference is 0 and the resample counts against the claim;
    in every other resample a target ranked exactly as x puts x's correlation (1) above z's.
    So the floor is primary_test's p with the target := x, from the same resamples (same
    `seed`). {"p_min", "ties" (share of resamples where x and z tie), "layers"}. Covered by
    test_design_min_p_*."""
    x = _check_layers("the predictor", x)
    z = _check_layers("the reference", z, x.size)
    idx = resample_indices(x.size, n_boot, seed)
    p, ties, undefined = _one_sided_share(_rho_diff_rows(x[idx], z[idx], x[idx]))
    return {"p_min": p, "ties": (ties + undefined) / n_boot, "layers": int(x.size)}


def primary_test(x, z, y, *, n_boot: int = PRIMARY_RESAMPLES, seed: int = 0,
                 level: float = LEVEL) -> dict:
    """The one pre-registered test: does predictor x (oriented: higher = predicts a higher
    target) rank the layers by the target y better than the reference z (depth)? H0:
    rho(x, y) <= rho(z, y); H1: rho(x, y) > rho(z, y), one-sided as the claim is directional.
    Each of `n_boot` resamples draws layers with replacement (and, for a (layers, seeds) y,
    each drawn layer's seeds: seed_resample_means) and recomputes both correlations on them;
    p = (1 + resamples with difference <= 0) / (1 + n_boot) (ties and undefined resamples
    count against the claim). Beside it the design's floor (design_min_p: the p a target
    ranked exactly as x would get from the same resamples) and the verdict:
    "better" (p < 1 - level), "not distinguishable" (p >= 1 - level although the floor is
    below it), "design cannot decide" (the floor itself is >= 1 - level: no target could
    have told them apart at these layers). {"rho", "rho_reference", "diff", "low" (the
    one-sided lower bound of the difference at `level`), "p", "p_min", "ties", "undefined",
    "n_boot", "layers", "alpha", "verdict"}. Covered by test_primary_test_*."""
    y = np.asarray(y, dtype=np.float64)
    seeds = y.ndim == 2
    mean = np.nanmean(_seed_table(y)[0], axis=1) if seeds else _check_layers("the target", y)
    x = _check_layers("the predictor", x, mean.size)
    z = _check_layers("the reference", z, mean.size)
    if n_boot < 1000:
        raise ValueError(f"the primary test needs >= 1000 resamples, got {n_boot}")
    rho, rho_ref = (float(_row_spearman(v[None], mean[None])[0]) for v in (x, z))
    if seeds:
        idx, means = seed_resample_means(y, n_boot=n_boot, seed=seed)
    else:
        idx = resample_indices(mean.size, n_boot, seed)
        means = mean[idx]
    boot = _rho_diff_rows(x[idx], z[idx], means)
    p, _, undefined = _one_sided_share(boot)
    floor = design_min_p(x, z, n_boot=n_boot, seed=seed)
    alpha = round(1 - level, 12)
    finite = boot[np.isfinite(boot)]
    verdict = (PRIMARY_UNDECIDABLE if floor["p_min"] >= alpha else
               PRIMARY_BETTER if p < alpha else PRIMARY_NOT)
    return {"rho": rho, "rho_reference": rho_ref, "diff": rho - rho_ref,
            "low": float(np.quantile(finite, alpha)) if finite.size else float("nan"),
            "p": p, "p_min": floor["p_min"], "ties": floor["ties"],
            "undefined": undefined / n_boot, "n_boot": int(n_boot),
            "layers": int(mean.size), "alpha": alpha, "verdict": verdict}

