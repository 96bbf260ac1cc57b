"""l* stability by whole held-out sequences: the cluster bootstrap and the split-half check,
on arrays with known answers and on a small synthetic hidden-state dump."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from dihal.config import GeometryConfig
from dihal.locate.stability import (
    geometry_pick_layers,
    pick_summary,
    positions_from_sequences,
    resample_sequences,
    sequence_bootstrap_l_star,
    split_half_l_star,
    split_halves,
)
from tests.tiny import ArrayReader


def test_resample_sequences_and_split_halves():
    r = resample_sequences(7, 50, seed=3)
    assert r.shape == (50, 7) and r.min() >= 0 and r.max() < 7
    assert (resample_sequences(7, 50, seed=3) == r).all()
    assert not (resample_sequences(7, 50, seed=4) == r).all()
    a, b = split_halves(7, seed=1)
    assert len(a) == 4 and len(b) == 3 and not set(a) & set(b)
    assert sorted([*a, *b]) == list(range(7))
    with pytest.raises(ValueError, match="at least 2"):
        split_halves(1, seed=0)
    with pytest.raises(ValueError, match="n_seq >= 2"):
        resample_sequences(1, 5, seed=0)


def test_positions_from_sequences_only_use_the_drawn_sequences():
    gen = torch.Generator().manual_seed(0)
    pos = positions_from_sequences(np.array([2, 2, 5]), seq_len=9, n_tokens=20, generator=gen)
    assert pos.shape == (20, 2) and set(pos[:, 0]) <= {2, 5}
    assert pos[:, 1].min() >= 1 and pos[:, 1].max() <= 8  # position 0 is never drawn
    # a sequence drawn twice, every slot taken: each of its positions appears exactly twice
    both = positions_from_sequences(np.array([4, 4]), seq_len=5, n_tokens=8,
                                    generator=torch.Generator().manual_seed(1))
    assert both.tolist() == [[4, p] for p in (1, 1, 2, 2, 3, 3, 4, 4)]
    with pytest.raises(ValueError, match="Raise n_val"):
        positions_from_sequences(np.array([0]), seq_len=5, n_tokens=5,
                                 generator=torch.Generator().manual_seed(0))


def test_pick_summary_by_hand():
    s = pick_summary([3, 3, 1, 3, 2, 3, 3, 3, 3, 3], l_star=3)
    assert s["same"] == 0.8 and s["replicates"] == 10
    assert s["picks"] == {3: 0.8, 1: 0.1, 2: 0.1} and list(s["picks"]) == [3, 1, 2]
    assert (s["low"], s["high"]) == (1, 3)
    with pytest.raises(ValueError, match="no replicate"):
        pick_summary([], l_star=1)


# per-sequence scores of two layers (columns: layer 1, layer 2): a sample's l* is the layer
# with the higher mean over its sequences
_HETERO = np.array([[3.0, 0.0], [0.0, 2.0]])


def _array_picker(values):
    def pick(samples):
        return [int(1 + np.argmax(values[ids].mean(axis=0))) for ids in samples]
    return pick


def test_sequence_bootstrap_known_answer():
    """Two sequences, one for each layer: resamples {0,0} and the mixed ones pick layer 1
    (mean 1.5 vs 1.0), {1,1} layer 2: layer 1 in 3 of 4 resamples."""
    out = sequence_bootstrap_l_star(_array_picker(_HETERO), 2, l_star=1, n_boot=4000, seed=0)
    assert out["same"] == pytest.approx(0.75, abs=0.02)
    assert out["picks"][2] == pytest.approx(0.25, abs=0.02)
    # sequences that all agree: l* never moves
    agree = np.array([[1.0, 0.0]] * 5)
    assert sequence_bootstrap_l_star(_array_picker(agree), 5, l_star=1, n_boot=200)["same"] == 1.0
    with pytest.raises(ValueError, match="returned 0 layers"):
        sequence_bootstrap_l_star(lambda samples: [], 5, l_star=1, n_boot=3)


def test_split_half_known_answer_and_agreement():
    """Four sequences, two for each layer (layer 1's stronger): of the three ways to halve
    them, {01|23} disagrees and the two mixed splits agree on layer 1: agreement 2/3."""
    values = np.repeat(_HETERO, 2, axis=0)
    out = split_half_l_star(_array_picker(values), 4, seed=0, n_splits=600)
    assert out["agreement"] == pytest.approx(2 / 3, abs=0.06)
    assert {(s["l_star_a"], s["l_star_b"]) for s in out["splits"]} == {(1, 1), (1, 2), (2, 1)}
    same = split_half_l_star(_array_picker(np.array([[0.0, 1.0]] * 6)), 6, n_splits=5)
    assert same["agreement"] == 1.0 and all(s["l_star_a"] == 2 for s in same["splits"])
    with pytest.raises(ValueError, match="n_splits"):
        split_half_l_star(_array_picker(values), 4, n_splits=0)


_CFG = GeometryConfig(n_tokens=96, n_anchors=32, k_neighbors=6, n_pairs=200,
                      normalizations=("none",), n_resamples=0)
_LOW = np.r_[4.0, np.full(7, 0.2)]  # variance on one direction: low effective rank
_ISO = np.ones(8)


def _dump(per_layer, seed=0):
    """per_layer: (scale of sequences 0-5, scale of sequences 6-11) for each layer."""
    rng = np.random.default_rng(seed)
    layers = []
    for a, b in per_layer:
        x = rng.normal(size=(12, 17, 8))
        x[:6] *= a
        x[6:] *= b
        layers.append(x)
    return ArrayReader(np.stack(layers).astype(np.float32))


def test_geometry_pick_layers_clear_case_matches_locate_and_never_moves():
    from dihal.locate.stage import compute_geometry, score_summary

    reader = _dump([(_ISO, _ISO), (_ISO, _ISO), (_LOW, _LOW), (_ISO * 3, _ISO * 3)])
    full = score_summary(compute_geometry(reader, _CFG, backbone="t").rows)["l_star"]
    pick = geometry_pick_layers(reader, _CFG, [1, 2, 3])
    assert full == 2 and pick([np.arange(12)]) == [2]
    assert sequence_bootstrap_l_star(pick, 12, l_star=2, n_boot=8, seed=1)["same"] == 1.0
    assert split_half_l_star(pick, 12, n_splits=3)["agreement"] == 1.0
    with pytest.raises(ValueError, match="candidates"):
        geometry_pick_layers(reader, _CFG, [1, 9])([np.arange(12)])


def test_geometry_pick_layers_follows_the_sequences():
    """Layer 1 is low-rank on sequences 0-5 only, layer 3 on 6-11 only: each half of the
    sequences picks its own layer, and the cluster bootstrap sees l* move."""
    reader = _dump([(_ISO, _ISO), (_LOW, _ISO), (_ISO, _ISO), (_ISO, _LOW)])
    pick = geometry_pick_layers(reader, _CFG, [1, 2, 3], seed=0)
    assert pick([np.arange(6), np.arange(6, 12)]) == [1, 3]
    boot = sequence_bootstrap_l_star(pick, 12, l_star=pick([np.arange(12)])[0], n_boot=30)
    assert boot["same"] < 0.9 and set(boot["picks"]) == {1, 3}
    # a half too small for cfg.n_tokens uses every token it has (here 6 x 16 = 96: all)
    small = dataclasses.replace(_CFG, n_tokens=150, n_anchors=100)
    assert geometry_pick_layers(reader, small, [1, 2, 3])([np.arange(6)]) == [1]


def test_sequence_resamples_run_on_the_steps_device(monkeypatch):
    """The recomputed geometry of every sample and layer is computed on the device it is given
    (the layer_score step's: its GPU where it has one), from score_layers down; the picks are
    those computed on the host. "meta" stands for a device other than the CPU: the spy records
    where the states arrive, then computes on the host."""
    import dihal.locate.geometry as geometry
    import dihal.locate.stability as stability
    from dihal.config import LayerScoreConfig
    from dihal.locate.stage import compute_geometry, score_layers

    reader = _dump([(_ISO, _ISO), (_LOW, _ISO), (_ISO, _ISO), (_ISO, _LOW)])
    real = geometry.layer_proxies
    on_host = geometry_pick_layers(reader, _CFG, [1, 2, 3], seed=0)([np.arange(6)])
    seen = []

    def spy(x, plan, cfg):  # the n-th call computes on the n-th call's states of a host run
        seen.append((x.device.type, x.dtype))
        return real(reader_states[len(seen) - 1], plan, cfg)

    reader_states = []
    record = lambda x, plan, cfg: reader_states.append(x) or real(x, plan, cfg)  # noqa: E731
    monkeypatch.setattr(stability, "layer_proxies", record)
    geometry_pick_layers(reader, _CFG, [1, 2, 3], seed=0)([np.arange(6)])
    monkeypatch.setattr(stability, "layer_proxies", spy)
    picks = geometry_pick_layers(reader, _CFG, [1, 2, 3], seed=0, device="meta")([np.arange(6)])
    assert picks == on_host and seen == [("meta", torch.float64)] * 3

    seen.clear()
    reader_states.clear()
    monkeypatch.setattr(stability, "layer_proxies", record)
    rows = compute_geometry(reader, _CFG, backbone="t").rows
    cfg = LayerScoreConfig(sequence_resamples=1, split_halves=0)
    score_layers(rows, cfg, backbone="t", reader=reader, geometry=_CFG)
    monkeypatch.setattr(stability, "layer_proxies", spy)
    score_layers(rows, cfg, backbone="t", reader=reader, geometry=_CFG, device="meta")
    assert seen and {s[0] for s in seen} == {"meta"}
