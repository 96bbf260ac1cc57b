"""Locate: geometry of every layer of a hidden-state dump, and the layer score.

Glue between the dump (storage.states.StateReader) and the pure proxies in dihal.locate.geometry /
dihal.locate.score. The same token positions are used for every layer, and they are returned so the
table can be recomputed from the dump by anyone.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from dihal.config import LayerScoreConfig
from dihal.inputs import GeometryRow, LayerScoreSummary, PredictorRow, TokenResamples
from dihal.locate.geometry import (
    GeometryConfig,
    layer_proxies_resampled,
    make_plan,
    resample_weights,
    sample_positions,
)
from dihal.locate.predictors import RidgeFolds, layer_predictors
from dihal.plots import plot_proxies, plot_scores
from dihal.proxies import NAMES, combine
from dihal.results import GeometryResult, LayerScoreResult
from dihal.seeds import derive_seed


def compute_geometry(
    reader,
    cfg: GeometryConfig,
    *,
    backbone: str,
    split: str = "val",
    progress: Callable[[str], None] | None = None,
    device: str = "cpu",
) -> GeometryResult:
    """The three proxies for every layer of the dump, under every normalisation, and the rival
    predictors (dihal.locate.predictors) of every candidate layer, all on the same sampled tokens.
    The proxies' linear algebra (float64) runs on `device` (the step's GPU where it has one);
    the rival predictors and every sampled index stay on the CPU."""
    n_layers, n_seq, seq_len, _ = reader.shape(split)
    gen = torch.Generator().manual_seed(derive_seed(cfg.seed, backbone, "geometry"))
    positions = sample_positions(n_seq, seq_len, cfg.n_tokens, gen)
    plan = make_plan(cfg.n_tokens, cfg, gen)
    weights = None  # the token bootstrap: one set of replicates shared by every layer
    if cfg.n_resamples:
        boot = torch.Generator().manual_seed(derive_seed(cfg.seed, backbone, "geometry-bootstrap"))
        weights = resample_weights(cfg.n_tokens, cfg.n_resamples, boot)
    replicates: dict[str, list] = {k: [] for k in TokenResamples.__dataclass_fields__}
    rows: list[GeometryRow] = []
    rivals: list[PredictorRow] = []
    x0 = prev = ridge = None
    t0 = time.perf_counter()
    for layer in range(n_layers):
        states = reader.layer(split, layer)  # (n_seq, seq_len, d), stored dtype
        x = torch.from_numpy(np.asarray(states[positions[:, 0], positions[:, 1]], dtype=np.float64))
        if not torch.isfinite(x).all():
            raise ValueError(
                f"layer {layer} of the dump holds non-finite states: re-run the hidden_states "
                "asset (its checks reject NaN) before computing geometry."
            )
        layer_rows, reps = layer_proxies_resampled(x.to(device), plan, cfg, weights)
        rows += [GeometryRow(layer=layer, **row) for row in layer_rows]
        for norm, rep in reps.items():
            replicates["resample"] += range(cfg.n_resamples)
            replicates["layer"] += [layer] * cfg.n_resamples
            replicates["norm"] += [norm] * cfg.n_resamples
            for k in NAMES:
                replicates[k] += rep[k].cpu().tolist()
        if layer == 0:
            x0, ridge = x, RidgeFolds(x, seed=cfg.seed)
        else:  # the rival predictors of a candidate layer, on the same tokens
            rivals.append(PredictorRow(layer=layer, **layer_predictors(x0, prev, x, seed=cfg.seed,
                                                                      ridge=ridge)))
        prev = x
        if progress:
            progress(f"geometry layer {layer + 1}/{n_layers} ({time.perf_counter() - t0:.1f} s)")

    return GeometryResult(rows, positions, plan.anchors.numpy(), plan.pairs.numpy(),
                          time.perf_counter() - t0, predictors=rivals,
                          resamples=TokenResamples.from_columns(replicates),
                          plot_png=plot_proxies(rows, f"{backbone}: geometry proxies per layer"))


def score_summary(rows: list[GeometryRow], *, primary_norm: str = "none") -> dict:
    """Layer scores per normalisation, l* for each, and Spearman(S_l, -l): how much of the
    score is just "shallower is better" (the depth control of docs/method.md §1)."""
    from dihal.locate.score import depth_control, layer_scores, select_layer, spearman

    layers = sorted({r.layer for r in rows})
    norms = sorted({r.norm for r in rows})
    if primary_norm not in norms:
        raise ValueError(f"primary_norm {primary_norm!r} not computed; the table has {norms}")
    candidates = [ll for ll in layers if ll >= 1]
    scored = layer_scores(rows, candidates)
    selected = {n: select_layer(scored, n) for n in norms}
    vs_depth = {}
    for n in norms:
        pts = sorted((r.layer, r.S) for r in scored if r.norm == n and r.candidate)
        vs_depth[n] = spearman([p[1] for p in pts], depth_control([p[0] for p in pts]))
    return {"rows": scored, "selected": selected, "l_star": selected[primary_norm],
            "spearman_vs_depth": vs_depth, "candidates": candidates}


def l_star_stability(resamples: TokenResamples, candidates: list[int],
                     selected: dict[str, int]) -> dict[str, dict]:
    """How stable l* is over the geometry's token-bootstrap replicates: per normalisation, each replicate's S_l over the candidate
    layers (the same z-scores, ties to the shallower layer) and its l*; the fraction of
    replicates that pick the full sample's l*, a 95 % interval of the picked layer, and the
    share of each layer picked."""
    import numpy as np

    from dihal.locate.score import zscore

    if not len(resamples):
        return {}
    cols = {k: np.asarray(v) for k, v in resamples.columns().items()}
    cand = np.asarray(sorted(candidates))
    out = {}
    for norm, l_star in selected.items():
        on = cols["norm"] == norm
        n_rep = int(cols["resample"][on].max()) + 1
        grid = {}
        for k in NAMES:
            g = np.full((n_rep, int(cols["layer"].max()) + 1), np.nan)
            g[cols["resample"][on], cols["layer"][on]] = cols[k][on]
            grid[k] = g[:, cand]
        ok = np.all([np.isfinite(g).all(axis=1) for g in grid.values()], axis=0)

        def z(g):  # the score's own z-scores, one replicate (row) at a time
            return np.apply_along_axis(zscore, 1, g)

        s = combine({k: z(grid[k][ok]) for k in NAMES})
        picks = cand[np.argmax(s, axis=1)]  # the first maximum: ties go to the shallower layer
        layers, counts = np.unique(picks, return_counts=True)
        lo, hi = np.quantile(picks, [0.025, 0.975], method="inverted_cdf")
        out[norm] = {"l_star": int(l_star), "same": float(np.mean(picks == l_star)),
                     "low": int(lo), "high": int(hi), "replicates": int(ok.sum()),
                     "dropped": int((~ok).sum()),
                     "picks": {int(ll): round(float(c) / len(picks), 4)
                               for ll, c in sorted(zip(layers, counts, strict=True),
                                                   key=lambda t: (-t[1], t[0]))}}
    return out


def sequence_stability(reader, geometry: GeometryConfig, candidates: list[int], l_star: int,
                       cfg: LayerScoreConfig, *, backbone: str,
                       progress: Callable[[str], None] | None = None,
                       device: str = "cpu") -> dict:
    """l*'s stability under the primary normalisation when the held-out sequences change
    (dihal.locate.stability): `cfg.sequence_resamples` cluster-bootstrap replicates of whole
    sequences and `cfg.split_halves` seeded splits into two disjoint halves, each recomputing
    the geometry of every candidate layer from the dump (fresh tokens, anchors, pairs,
    neighbourhoods and covariance; `geometry`: the geometry stage's config). {"norm",
    "bootstrap" (pick_summary, or None with 0 replicates), "split_half" (split_half_l_star,
    or None), "seconds"}. The recomputed geometry runs on `device` (the step's)."""
    from dihal.locate.stability import (
        geometry_pick_layers,
        sequence_bootstrap_l_star,
        split_half_l_star,
    )

    t0 = time.perf_counter()
    seed = derive_seed(geometry.seed, backbone, "sequence-stability")
    pick = geometry_pick_layers(reader, geometry, candidates, norm=cfg.primary_norm, seed=seed,
                                progress=progress, device=device)
    n_seq = reader.shape("val")[1]
    boot = (sequence_bootstrap_l_star(pick, n_seq, l_star=l_star, n_boot=cfg.sequence_resamples,
                                      seed=seed) if cfg.sequence_resamples else None)
    halves = (split_half_l_star(pick, n_seq, seed=seed, n_splits=cfg.split_halves)
              if cfg.split_halves else None)
    return {"norm": cfg.primary_norm, "bootstrap": boot, "split_half": halves,
            "sequences": int(n_seq), "seconds": round(time.perf_counter() - t0, 2)}


def score_layers(rows: list[GeometryRow], cfg: LayerScoreConfig, *, backbone: str,
                 resamples: TokenResamples | None = None, reader=None,
                 geometry: GeometryConfig | None = None,
                 progress: Callable[[str], None] | None = None,
                 device: str = "cpu") -> LayerScoreResult:
    """The layer_score stage: S_l per normalisation over the candidate layers, l*, how much of
    the score is depth, and (with the geometry's token-bootstrap `resamples`) how stable l* is;
    with the dump's `reader` and the geometry stage's config, also over resamples of whole
    held-out sequences and on split halves (sequence_stability, on `device`: the step's; off
    when cfg asks for neither)."""

    s = score_summary(rows, primary_norm=cfg.primary_norm)
    title = f"{backbone}: layer score, l* = {s['l_star']} ({cfg.primary_norm})"
    by_sequence = {}
    if reader is not None and geometry is not None and (cfg.sequence_resamples or cfg.split_halves):
        by_sequence = sequence_stability(reader, geometry, s["candidates"], s["l_star"], cfg,
                                         backbone=backbone, progress=progress, device=device)
    summary = LayerScoreSummary.from_dict({
        "l_star": s["l_star"], "selected": s["selected"], "spearman_vs_depth": s["spearman_vs_depth"],
        "stability": l_star_stability(resamples or TokenResamples(), s["candidates"], s["selected"]),
        "sequence_stability": by_sequence})
    return LayerScoreResult(rows=s["rows"], summary=summary, primary_norm=cfg.primary_norm,
                            plot_png=plot_scores(s["rows"], s["selected"], title))
