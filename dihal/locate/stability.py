"""How stable l* is when the held-out SEQUENCES change: a cluster bootstrap that
resamples whole sequences and recomputes everything that depends on the sample (the token
positions, the anchors and pairs, each layer's neighbourhoods and covariance, the z-scores of
the score), and a split-half check (l* on two disjoint halves of the held-out sequences).

The geometry token bootstrap (dihal.locate.geometry resample_weights, dihal.locate.stage l_star_stability)
resamples single tokens, which come from few sequences, and keeps the neighbourhoods and the
preconditioner of the full sample fixed: it overstates how stable l* is. Here tokens of one
sequence move together.

Everything is written against a caller-given `pick_layers(samples) -> [l* per sample]`, where
a sample is an array of held-out sequence ids (a sequence drawn twice is listed twice), so the
resampling can be tested on arrays; `geometry_pick_layers` builds the one that recomputes the
geometry from a hidden-state dump (dihal.locate.geometry's functions, unchanged). Pure: no Dagster.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import torch

from dihal.config import GeometryConfig
from dihal.inputs import GeometryRow
from dihal.locate.geometry import layer_proxies, make_plan, sample_positions
from dihal.locate.score import layer_scores, select_layer
from dihal.seeds import derive_seed

PickLayers = Callable[[Sequence[np.ndarray]], list[int]]


def resample_sequences(n_seq: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n_seq) held-out sequence ids, each row drawn with replacement (a cluster
    bootstrap over sequences). Covered by test_resample_sequences_and_split_halves."""
    if n_seq < 2 or n_boot < 1:
        raise ValueError(f"a sequence bootstrap needs n_seq >= 2 and n_boot >= 1, got "
                         f"{n_seq}, {n_boot}")
    return np.random.default_rng(seed).integers(0, n_seq, size=(n_boot, n_seq))


def split_halves(n_seq: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two disjoint halves of range(n_seq) (sorted ids; the first gets the extra one when
    n_seq is odd), by a seeded permutation. Covered by test_resample_sequences_and_split_halves."""
    if n_seq < 2:
        raise ValueError(f"split halves need at least 2 held-out sequences, got {n_seq}")
    perm = np.random.default_rng(seed).permutation(n_seq)
    half = (n_seq + 1) // 2
    return np.sort(perm[:half]), np.sort(perm[half:])


def positions_from_sequences(seq_ids: np.ndarray, seq_len: int, n_tokens: int,
                             generator: torch.Generator) -> np.ndarray:
    """(n_tokens, 2) (sequence, position) pairs drawn as dihal.locate.geometry.sample_positions draws
    them (without replacement, position 0 excluded, sorted), over the sequences in `seq_ids`:
    every listed id is one slot of seq_len - 1 positions, so a sequence drawn k times can give
    up to k times its tokens (a position drawn in two of its slots is a duplicated state).
    Covered by test_positions_from_sequences_only_use_the_drawn_sequences."""

    ids = np.asarray(seq_ids, dtype=np.int64)
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError(f"seq_ids must be a non-empty 1-D array, got shape {ids.shape}")
    slots = sample_positions(ids.size, seq_len, n_tokens, generator)
    out = np.stack([ids[slots[:, 0]], slots[:, 1]], axis=1)
    return out[np.lexsort((out[:, 1], out[:, 0]))]


def pick_summary(picks: Sequence[int], l_star: int, level: float = 0.95) -> dict:
    """The share of replicates that pick `l_star`, an interval of the picked layer (inverted
    CDF quantiles), and the share of each layer picked (most often first), in the format of
    dihal.locate.stage.l_star_stability. Covered by test_pick_summary_by_hand."""
    p = np.asarray(list(picks), dtype=np.int64)
    if p.size == 0:
        raise ValueError("no replicate picked a layer")
    tail = (1 - level) / 2
    lo, hi = np.quantile(p, [tail, 1 - tail], method="inverted_cdf")
    layers, counts = np.unique(p, return_counts=True)
    return {"l_star": int(l_star), "same": float(np.mean(p == l_star)), "low": int(lo),
            "high": int(hi), "replicates": int(p.size),
            "picks": {int(ll): round(float(c) / p.size, 4)
                      for ll, c in sorted(zip(layers, counts, strict=True),
                                          key=lambda t: (-t[1], t[0]))}}


def sequence_bootstrap_l_star(pick_layers: PickLayers, n_seq: int, *, l_star: int,
                              n_boot: int = 50, seed: int = 0) -> dict:
    """l*'s stability under a cluster bootstrap of the held-out sequences: `pick_layers` is
    given every replicate's sequence ids at once (so it can read each layer once) and returns
    each replicate's l*; summarised by pick_summary against the full sample's `l_star`.
    Covered by test_sequence_bootstrap_known_answer and test_geometry_pick_layers_*."""
    samples = list(resample_sequences(n_seq, n_boot, seed))
    picks = pick_layers(samples)
    if len(picks) != len(samples):
        raise ValueError(f"pick_layers returned {len(picks)} layers for {len(samples)} samples")
    return pick_summary(picks, l_star)


def split_half_l_star(pick_layers: PickLayers, n_seq: int, *, seed: int = 0,
                      n_splits: int = 1) -> dict:
    """l* on two disjoint halves of the held-out sequences, for `n_splits` seeded splits:
    {"splits": [{"l_star_a", "l_star_b", "agree"}], "agreement": share of splits whose halves
    agree}. Covered by test_split_half_*."""
    if n_splits < 1:
        raise ValueError(f"n_splits must be >= 1, got {n_splits}")
    halves = [split_halves(n_seq, derive_seed(seed, "split-half", i)) for i in range(n_splits)]
    picks = pick_layers([h for pair in halves for h in pair])
    if len(picks) != 2 * n_splits:
        raise ValueError(f"pick_layers returned {len(picks)} layers for {2 * n_splits} halves")
    splits = [{"l_star_a": int(a), "l_star_b": int(b), "agree": int(a) == int(b)}
              for a, b in zip(picks[0::2], picks[1::2], strict=True)]
    return {"splits": splits, "agreement": float(np.mean([s["agree"] for s in splits]))}


def _fit_config(cfg: GeometryConfig, n_tokens: int) -> GeometryConfig:
    """cfg with n_tokens (and n_anchors, k_neighbors where they no longer fit) lowered to
    what a smaller sample (a half) holds."""
    if n_tokens >= cfg.n_tokens:
        return cfg
    return dataclasses.replace(cfg, n_tokens=n_tokens, n_anchors=min(cfg.n_anchors, n_tokens),
                               k_neighbors=min(cfg.k_neighbors, n_tokens - 1))


def geometry_pick_layers(reader, cfg: GeometryConfig, candidates: Sequence[int], *,
                         norm: str = "none", split: str = "val", seed: int = 0,
                         progress: Callable[[str], None] | None = None,
                         device: str | torch.device = "cpu") -> PickLayers:
    """A `pick_layers` that recomputes l* from the dump (storage.states.StateReader, or
    anything with shape(split) and layer(split, l)) for each sample of sequence ids: fresh
    token positions from those sequences (positions_from_sequences, seeded per sample), a
    fresh plan (dihal.locate.geometry.make_plan), every layer's proxies under `norm`
    (dihal.locate.geometry.layer_proxies: neighbourhoods and covariance of this sample), the score
    over `candidates` (dihal.locate.score.layer_scores) and its argmax (select_layer). Each layer is
    read once for all samples. A sample with fewer tokens than cfg.n_tokens (a half) uses all
    it has. The proxies' float64 linear algebra runs on `device` (the step's GPU where it has
    one, as the geometry stage's; the states are read on the host and copied there once per
    sample and layer). Covered by test_geometry_pick_layers_* and
    test_sequence_resamples_run_on_the_steps_device."""

    one = dataclasses.replace(cfg, normalizations=(norm,), n_resamples=0)
    cands = sorted(int(c) for c in candidates)

    def pick(samples: Sequence[np.ndarray]) -> list[int]:
        n_layers, _, seq_len, _ = reader.shape(split)
        if not cands or cands[0] < 0 or cands[-1] >= n_layers:
            raise ValueError(f"candidates {cands} must lie in the dump's layers 0..{n_layers - 1}")
        setups = []
        for i, ids in enumerate(samples):
            gen = torch.Generator().manual_seed(derive_seed(seed, "sequence-sample", i))
            c = _fit_config(one, min(one.n_tokens, len(ids) * (seq_len - 1)))
            pos = positions_from_sequences(ids, seq_len, c.n_tokens, gen)
            setups.append((pos, make_plan(c.n_tokens, c, gen), c))
        rows: list[list[GeometryRow]] = [[] for _ in samples]
        for layer in cands:
            states = reader.layer(split, layer)
            for (pos, plan, c), out in zip(setups, rows, strict=True):
                x = torch.from_numpy(np.asarray(states[pos[:, 0], pos[:, 1]], dtype=np.float64))
                x = x.to(device)
                out += [GeometryRow(layer=layer, **r) for r in layer_proxies(x, plan, c)]
            if progress:
                progress(f"sequence resample: layer {layer} of {n_layers}, {len(samples)} samples")
        return [select_layer(layer_scores(r, cands), norm) for r in rows]

    return pick
