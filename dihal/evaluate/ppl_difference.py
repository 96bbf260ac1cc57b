"""Is one model's Gen.PPL above another's beyond the noise of its samples: the token-weighted
log Gen.PPL difference with a bootstrap interval and p-value (independent or paired samples),
and the power statement (how many samples a named Gen.PPL ratio needs under that same test).
Pure functions on (NLL, judge tokens) per sample, as GenPPL.per_text gives them."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dihal.uncertainty import (
    LEVEL,
    N_BOOT,
    lower_tail_level,
    paired_verdict,
    percentile_interval,
    resample_indices,
)

POWER = 0.8
GEN_PPL_EFFECT = 1.25  # the named effect of the power statement: Gen.PPL 25 % apart


def _log_ppl_influence(rows: np.ndarray) -> np.ndarray:
    """Each sample's linearised share (delta method) of the token-weighted log Gen.PPL, the
    ratio r = sum nll / sum n: (nll_i - r n_i) / mean(n); the variance of the log Gen.PPL of
    n such samples is about var(share) / n."""
    r = rows[:, 0].sum() / rows[:, 1].sum()
    return (rows[:, 0] - r * rows[:, 1]) / rows[:, 1].mean()


def _per_text(rows, name: str) -> np.ndarray:
    a = np.asarray(rows, dtype=np.float64).reshape(-1, 2)
    if a.shape[0] < 2 or (a[:, 1] <= 0).any() or not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: need >= 2 scored samples, each with >= 1 judge token")
    return a


def samples_for_effect(per_text_a, per_text_b, *, ratio: float = GEN_PPL_EFFECT,
                       family: int = 1, level: float = LEVEL, power: float = POWER) -> dict:
    """Samples per model that log_ppl_difference (the token-weighted log Gen.PPL difference,
    two-sided percentile bootstrap) needs to tell apart two models whose Gen.PPL differ by the
    NAMED ratio `ratio` (not the observed one) with probability `power`, at the strictest step
    of Holm's correction over `family` pairs (alpha / family; later steps need fewer). The
    spread per sample comes from the samples at hand, taken as a pilot: per_text_a and
    per_text_b as (NLL, judge tokens) lists give the unpaired test (each side resampled on its
    own: var = var_a + var_b); as dicts keyed by SAMPLE INDEX they give the paired test, over
    the indices both scored (var of the per-index difference), never by list position. n =
    ((z_{1 - alpha/2} + z_power) sd / log(ratio))^2 on the delta method's spread
    (_log_ppl_influence). {"n", "ratio", "alpha", "sd", "paired", "observed_n"}. Covered by
    test_samples_for_effect_*."""
    from scipy.stats import norm

    if not (ratio > 0 and ratio != 1 and family >= 1 and 0 < level < 1 and 0 < power < 1):
        raise ValueError(f"need a ratio > 0 and != 1, family >= 1, level and power in (0, 1); "
                         f"got {ratio}, {family}, {level}, {power}")
    paired = isinstance(per_text_a, dict) and isinstance(per_text_b, dict)
    if paired:
        both = sorted(set(per_text_a) & set(per_text_b))
        a = _per_text([per_text_a[i] for i in both], "side A")
        b = _per_text([per_text_b[i] for i in both], "side B")
        var = float(np.var(_log_ppl_influence(a) - _log_ppl_influence(b), ddof=1))
        observed = len(both)
    else:
        a, b = _per_text(per_text_a, "side A"), _per_text(per_text_b, "side B")
        var = float(np.var(_log_ppl_influence(a), ddof=1) + np.var(_log_ppl_influence(b), ddof=1))
        observed = min(len(a), len(b))
    alpha = (1 - level) / family
    z = float(norm.ppf(1 - alpha / 2) + norm.ppf(power))
    n = max(2, math.ceil((z / math.log(ratio)) ** 2 * var))
    return {"n": n, "ratio": ratio, "alpha": alpha, "sd": math.sqrt(var), "paired": paired,
            "observed_n": observed, "power": power}


def log_ppl_difference(per_text_a: Sequence[tuple[float, int]],
                       per_text_b: Sequence[tuple[float, int]], *, paired: bool = False,
                       n_boot: int = N_BOOT, seed: int = 0, level: float = LEVEL) -> dict:
    """log Gen.PPL(A) - log Gen.PPL(B), token-weighted (total NLL / total judge tokens, from
    GenPPL.per_text), with a percentile bootstrap interval and the p-value by inversion:
    each side's samples resampled independently (different models' samples), or with
    `paired` the same indices on both sides (samples paired one to one, equal counts).
    {"diff", "ratio" (Gen.PPL A / B), "low", "high", "p", "verdict"}: verdict "above" when A's
    Gen.PPL is higher beyond the level, "below" when lower (paired_verdict; correct p over a
    family with holm first when several pairs are read together). Covered by
    test_log_ppl_difference_*."""
    a = np.asarray(per_text_a, dtype=np.float64).reshape(-1, 2)
    b = np.asarray(per_text_b, dtype=np.float64).reshape(-1, 2)
    if a.shape[0] < 2 or b.shape[0] < 2 or (a[:, 1] <= 0).any() or (b[:, 1] <= 0).any():
        raise ValueError("need >= 2 scored samples a side, each with >= 1 judge token")
    if paired and a.shape[0] != b.shape[0]:
        raise ValueError(f"paired samples need equal counts, got {a.shape[0]} and {b.shape[0]}")

    def log_ppl(rows, idx):
        return rows[idx, 0].sum(axis=-1) / rows[idx, 1].sum(axis=-1)

    diff = float(log_ppl(a, np.arange(len(a))) - log_ppl(b, np.arange(len(b))))
    ia = resample_indices(len(a), n_boot, seed)
    ib = ia if paired else resample_indices(len(b), n_boot, seed + 1)
    boot = log_ppl(a, ia) - log_ppl(b, ib)
    lo, hi = percentile_interval(boot, level)
    alpha = lower_tail_level(boot, diff, None, 0.0)
    p = min(1.0, 2 * min(alpha, 1 - alpha))
    return {"diff": diff, "ratio": math.exp(diff), "low": lo, "high": hi, "p": p,
            "verdict": paired_verdict(diff, p, level)}
