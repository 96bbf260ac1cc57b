"""The pre-flight's checks travel with the assets: a heavy stage launched by any door (here an
in-process `materialize`, as the web UI, `dagster asset materialize`, `dg launch` and the
schedules launch them) refuses, before its heavy work, a dump the disk cannot hold, a bridge
whose pairs the host memory cannot hold, and sequences longer than the backbone's positions,
naming the numbers and the setting to change."""

import shutil

import pytest

import dihal.run.preflight as pf
from dihal.run.capacity import pair_bytes


def test_a_dump_the_disk_cannot_hold_is_refused_before_a_batch_is_dumped(world, monkeypatch):
    shutil.rmtree(world.path("hidden_states"))
    monkeypatch.setattr(pf, "disk_free", lambda root: 1000)
    res, err = world.materialize(["hidden_states_llama"])
    assert not res.success
    assert "hidden_states_llama: pre-flight refused this dump step of llama (1 problem(s))" in err[0]
    assert "- disk: the store (" in err[0] and "free space or point DIHAL_ARTIFACTS" in err[0]
    assert not (world.path("hidden_states") / "manifest.json").exists()
    assert not (world.path("hidden_states") / "states.zarr").exists()  # not a batch dumped


@pytest.mark.parametrize("workers", [1, 3])
def test_a_bridge_whose_pairs_the_host_cannot_hold_is_refused_naming_workers(world, monkeypatch,
                                                                               workers):
    from resources import ComputeResource

    shutil.rmtree(world.path("bridge_sweep"))
    seq = pf.SequenceConfig(seq_len=16, n_train=8, n_val=6, val_fraction=0.3,
                            max_tokens_per_doc=40)
    pairs = pair_bytes(seq.n_train * seq.seq_len, 32)
    weights = 200_000  # more than the tiny model's float32 weights (about 50k parameters)
    monkeypatch.setattr(pf, "available_memory", lambda: int((pairs + weights) * 1.5 / 0.9))
    res, err = world.materialize(["bridge_sweep_llama"], partition="1", resources={
        "compute": ComputeResource(device="cpu", threads=1, workers=workers)})
    if workers == 1:
        assert res.success, err
        return
    assert not res.success
    assert "bridge_sweep_llama[1]: pre-flight refused this training step of llama" in err[0]
    assert "host memory: 3 concurrent step(s) x (" in err[0] and "Lower --workers to 1" in err[0]
    assert not (world.path("bridge_sweep") / "layer_001" / "manifest.json").exists()


def test_sequences_longer_than_the_backbones_positions_are_refused_before_tokenising(
        world, monkeypatch):
    """The tiny llama's config.json says max_position_embeddings 256: sequences of 300 tokens
    are refused by the sequences stage, naming the model, its limit and the setting, before its
    tokenizer is loaded; the sequences made before stay as they were."""
    from resources import BackboneResource
    from tests.tiny import TINY

    before = (world.path("sequences") / "manifest.json").read_text()
    monkeypatch.setattr(BackboneResource, "load_tokenizer",
                        lambda *a: pytest.fail("the tokenizer was loaded"))
    res, err = world.materialize(["sequences_llama"], sequences_llama={
        "config": {**TINY["sequences"], "seq_len": 300}})
    assert not res.success
    assert "sequences_llama: pre-flight refused the sequences of llama (1 problem(s))" in err[0]
    assert ("positions: sequences.seq_len 300 (the BOS included) is longer than llama's "
            "max_position_embeddings 256") in err[0]
    assert "Set sequences.seq_len to at most 256" in err[0]
    assert (world.path("sequences") / "manifest.json").read_text() == before


def test_a_dump_of_sequences_longer_than_the_positions_is_refused(world, monkeypatch):
    """Sequences made before the check (or for another model folder) are refused by the dump's
    own pre-flight, before a batch is dumped."""
    from dataclasses import replace

    shutil.rmtree(world.path("hidden_states"))
    real = pf.model_facts
    monkeypatch.setattr(pf, "model_facts",
                        lambda *a, **kw: replace(real(*a, **kw), max_positions=8))
    res, err = world.materialize(["hidden_states_llama"])
    assert not res.success
    assert "hidden_states_llama: pre-flight refused this dump step of llama" in err[0]
    assert "positions: sequences.seq_len 16 (the BOS included) is longer than llama's " \
           "max_position_embeddings 8" in err[0]
    assert not (world.path("hidden_states") / "states.zarr").exists()
