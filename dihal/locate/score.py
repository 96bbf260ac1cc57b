"""Locate: the layer score S_l and its evaluation (docs/method.md §1).

S_l = z(m_curv)_l + z(m_mono)_l - z(k_eff)_l (dihal.proxies), z-scored over the candidate layers of one backbone,
separately for each normalisation; l* = argmax S_l. Correlations with bridgeability are reported
next to the trivial "shallower is better" predictor -l. Pure functions, no Dagster.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from dihal.inputs import GeometryRow, ScoreRow
from dihal.proxies import NAMES, PROXIES, combine


def zscore(values) -> np.ndarray:
    """z_i = (v_i - mean(v)) / std(v), population std (denominator n).

    A constant column (all values equal) has no spread to standardise: it gives zeros, not NaN.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"zscore needs a non-empty 1-D sequence, got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"zscore needs finite values, got {v.tolist()}")
    if np.ptp(v) == 0:
        return np.zeros_like(v)
    return (v - v.mean()) / v.std()


def _index_rows(rows: list[GeometryRow]) -> dict[str, dict[int, GeometryRow]]:
    """{norm: {layer: row}}, rejecting duplicate (layer, norm)."""
    by_norm: dict[str, dict[int, GeometryRow]] = {}
    for row in rows:
        layers = by_norm.setdefault(row.norm, {})
        layer = int(row.layer)
        if layer in layers:
            raise ValueError(f"duplicate geometry row for layer {layer}, norm {row.norm!r}")
        layers[layer] = row
    return by_norm


def layer_scores(rows: list[GeometryRow], candidate_layers: Sequence[int]) -> list[ScoreRow]:
    """Score every layer of every normalisation.

    For each norm separately, over the candidate layers only:
    z_curv = z(m_curv), z_mono = z(m_mono), z_keff = z(k_eff), S = z_curv + z_mono - z_keff,
    rank = 1 for the best S within the norm (ties -> shallower layer first).
    Non-candidate layers (e.g. layer 0) are kept for reference with NaN z-scores and S, and rank
    None. Returns a ScoreRow per input row (its geometry, with the z-scores, S, candidate and
    rank), sorted by (norm, layer).
    """
    candidates = [int(layer) for layer in candidate_layers]
    if not candidates:
        raise ValueError("candidate_layers is empty")
    if len(set(candidates)) != len(candidates):
        raise ValueError(f"candidate_layers has duplicates: {candidates}")
    candidates = sorted(candidates)
    out: list[ScoreRow] = []
    for norm, layers in sorted(_index_rows(rows).items()):
        absent = [layer for layer in candidates if layer not in layers]
        if absent:
            raise ValueError(f"norm {norm!r} has no geometry rows for candidate layers {absent}")
        z = {}  # proxy -> {layer: z-score over the candidates}
        for key in NAMES:
            values = zscore([getattr(layers[lay], key) for lay in candidates])
            z[key] = dict(zip(candidates, values.tolist(), strict=True))
        score = {lay: combine({k: z[k][lay] for k in NAMES}) for lay in candidates}
        order = sorted(candidates, key=lambda lay: (-score[lay], lay))
        rank = {lay: i + 1 for i, lay in enumerate(order)}
        for layer in sorted(layers):
            is_cand = layer in score
            nan = math.nan
            out.append(ScoreRow(
                **layers[layer].to_dict(),
                **{p.z_column: float(z[p.name][layer]) if is_cand else nan for p in PROXIES},
                S=float(score[layer]) if is_cand else nan,
                candidate=is_cand,
                rank=rank[layer] if is_cand else None,
            ))
    return out


def select_layer(score_rows: list[ScoreRow], norm: str) -> int:
    """l* = argmax S over the candidate layers of one norm; a tie goes to the shallower layer."""
    cands = [r for r in score_rows if r.norm == norm and r.candidate]
    if not cands:
        norms = sorted({r.norm for r in score_rows})
        raise ValueError(f"no candidate score rows for norm {norm!r}; norms present: {norms}")
    best = min(cands, key=lambda r: (-r.S, int(r.layer)))
    return int(best.layer)


def spearman(x, y) -> float:
    """Spearman rank correlation (scipy.stats.spearmanr) over the pairs where both are not NaN.

    Raises ValueError for mismatched lengths or fewer than 3 usable pairs. Returns NaN when one
    side is constant (the correlation is undefined there).
    """
    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(y, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(
            f"spearman needs two 1-D sequences of equal length, got {a.shape}, {b.shape}"
        )
    keep = ~(np.isnan(a) | np.isnan(b))
    a, b = a[keep], b[keep]
    if a.size < 3:
        raise ValueError(f"spearman needs at least 3 non-NaN pairs, got {a.size}")
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    return float(stats.spearmanr(a, b).statistic)


def depth_control(layers) -> np.ndarray:
    """The trivial predictor "shallower is better": score_l = -l."""
    return -np.asarray(layers, dtype=np.float64)
