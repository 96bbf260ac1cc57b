"""Locate: geometry of every layer of a hidden-state dump, and the layer score.

Glue between the dump (storage.states.StateReader) and the pure proxies in dihal.geometry /
dihal.score. The same token positions are used for every layer, and they are returned so the
table can be recomputed from the dump by anyone.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from dihal.config import LayerScoreConfig
from dihal.geometry import GeometryConfig, layer_proxies, make_plan
from dihal.predictors import layer_predictors
from dihal.results import GeometryResult, LayerScoreResult
from dihal.seeds import derive_seed


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


def compute_geometry(
    reader,
    cfg: GeometryConfig,
    *,
    backbone: str,
    split: str = "val",
    progress: Callable[[str], None] | None = None,
) -> GeometryResult:
    """The three proxies for every layer of the dump, under every normalisation, and the rival
    predictors (dihal.predictors) of every candidate layer, all on the same sampled tokens."""
    n_layers, n_seq, seq_len, _ = reader.shape(split)
    gen = torch.Generator().manual_seed(derive_seed(cfg.seed, backbone, "geometry"))
    positions = sample_positions(n_seq, seq_len, cfg.n_tokens, gen)
    plan = make_plan(cfg.n_tokens, cfg, gen)
    rows: list[dict] = []
    rivals: list[dict] = []
    x0 = prev = None
    t0 = time.perf_counter()
    for layer in range(n_layers):
        states = reader.layer(split, layer)  # (n_seq, seq_len, d), stored dtype
        x = torch.from_numpy(np.asarray(states[positions[:, 0], positions[:, 1]], dtype=np.float64))
        if not torch.isfinite(x).all():
            raise ValueError(
                f"layer {layer} of the dump holds non-finite states: re-run the hidden_states "
                "asset (its checks reject NaN) before computing geometry."
            )
        for row in layer_proxies(x, plan, cfg):
            rows.append({"layer": layer, **row})
        if layer == 0:
            x0 = x
        else:  # the rival predictors of a candidate layer, on the same tokens
            rivals.append({"layer": layer, **layer_predictors(x0, prev, x, seed=cfg.seed)})
        prev = x
        if progress:
            progress(f"geometry layer {layer + 1}/{n_layers} ({time.perf_counter() - t0:.1f} s)")
    from dihal.plots import plot_proxies

    return GeometryResult(rows, positions, plan.anchors.numpy(), plan.pairs.numpy(),
                          time.perf_counter() - t0, predictors=rivals,
                          plot_png=plot_proxies(rows, f"{backbone}: geometry proxies per layer"))


def score_summary(rows: list[dict], *, primary_norm: str = "none") -> dict:
    """Layer scores per normalisation, l* for each, and Spearman(S_l, -l): how much of the
    score is just "shallower is better" (the depth control of METHOD.md s.1)."""
    from dihal.score import depth_control, layer_scores, select_layer, spearman

    layers = sorted({r["layer"] for r in rows})
    norms = sorted({r["norm"] for r in rows})
    if primary_norm not in norms:
        raise ValueError(f"primary_norm {primary_norm!r} not computed; the table has {norms}")
    candidates = [ll for ll in layers if ll >= 1]
    scored = layer_scores(rows, candidates)
    selected = {n: select_layer(scored, n) for n in norms}
    vs_depth = {}
    for n in norms:
        pts = sorted((r["layer"], r["S"]) for r in scored if r["norm"] == n and r["candidate"])
        vs_depth[n] = spearman([p[1] for p in pts], depth_control([p[0] for p in pts]))
    return {"rows": scored, "selected": selected, "l_star": selected[primary_norm],
            "spearman_vs_depth": vs_depth, "candidates": candidates}


def score_layers(rows: list[dict], cfg: LayerScoreConfig, *, backbone: str) -> LayerScoreResult:
    """The layer_score stage: S_l per normalisation over the candidate layers, l*, and how much
    of the score is depth."""
    from dihal.plots import plot_scores

    s = score_summary(rows, primary_norm=cfg.primary_norm)
    title = f"{backbone}: layer score, l* = {s['l_star']} ({cfg.primary_norm})"
    return LayerScoreResult(rows=s["rows"], selected=s["selected"], l_star=s["l_star"],
                            primary_norm=cfg.primary_norm, spearman_vs_depth=s["spearman_vs_depth"],
                            plot_png=plot_scores(s["rows"], s["selected"], title))
