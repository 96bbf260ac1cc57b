"""The pre-flight's checks travel with the assets: a heavy stage launched by any door (here an
in-process `materialize`, as the web UI, `dagster asset materialize`, `dg launch` and the
schedules launch them) refuses, before its heavy work, a dump the disk cannot hold and a bridge
whose pairs the host memory cannot hold, naming the numbers and the setting to change."""

import shutil

import pytest

import dihal.preflight as pf


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
    pairs = pf.pair_bytes(pf.SequenceConfig(seq_len=16, n_train=8, n_val=6, val_fraction=0.3,
                                            max_tokens_per_doc=40), 32)
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
