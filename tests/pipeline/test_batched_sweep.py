"""A batched backfill's run (several layer partitions in one run process, as the daemon cuts a
backfill by assets._stage.partition_policy): one backbone and dump load for its layers, one
materialization per layer with that layer's own metadata, and a layer that fails loses none
of the others and is retried alone."""

from __future__ import annotations

import dagster as dg

from storage import RegressionControl, SweepBridge
from tests.tiny import SWEPT

SWEEP = ["bridge_sweep_llama", "regression_sweep_llama"]


def _materializations(instance, asset: str) -> dict[str, dict]:
    """{partition: metadata} of the latest materialization of each partition of `asset`."""
    out = {}
    for rec in instance.fetch_materializations(dg.AssetKey(asset), limit=100).records:
        mat = rec.asset_materialization
        out.setdefault(mat.partition, {k: getattr(v, "value", v) for k, v in mat.metadata.items()})
    return out


def test_a_batched_run_records_each_layer_alone_and_a_failed_layer_loses_no_other(
        located_world, tmp_path, tiny_llama_dir, monkeypatch):
    from tests.tiny import copy_world

    world = copy_world(located_world, tmp_path, tiny_llama_dir)
    instance = dg.DagsterInstance.ephemeral()
    import dihal.replace.stage as stage

    train = stage.train_layer

    def layer_2_fails(backbone, reader, layer, *args, **kwargs):
        if layer == 2 and not kwargs.get("regression"):
            raise RuntimeError("layer 2 ran out of memory")
        return train(backbone, reader, layer, *args, **kwargs)

    monkeypatch.setattr(stage, "train_layer", layer_2_fails)
    res, err = world.materialize(SWEEP, instance=instance, span=(SWEPT[0], SWEPT[-1]))
    assert not res.success
    # the step names the failed layer and why, and says the others are made
    assert "partition(s) 2 failed, 2 of this run's 3 made and recorded" in err[0], err
    assert "layer 2 ran out of memory" in err[0]
    # layers 1 and 3 are written, and recorded as materialised, each with its own metadata
    for layer in (1, 3):
        assert SweepBridge(world.root, "llama", layer).manifest() is not None
    assert SweepBridge(world.root, "llama", 2).manifest() is None
    made = _materializations(instance, "bridge_sweep_llama")
    assert sorted(made) == ["1", "3"]
    assert made["1"]["path"] != made["3"]["path"]
    assert made["1"]["path"].endswith("layer_001") and made["3"]["path"].endswith("layer_003")
    assert made["1"]["cached"] is False and made["3"]["cached"] is False

    # the failed layer alone, again: only it is trained; its control is made in the same run
    monkeypatch.setattr(stage, "train_layer", train)
    res, err = world.materialize(SWEEP, instance=instance, span=(SWEPT[0], SWEPT[-1]))
    assert res.success, err
    got = {(e.asset_key.to_user_string(), e.partition):
           e.step_materialization_data.materialization.metadata["cached"].value
           for e in res.get_asset_materialization_events()}
    assert got == {("bridge_sweep_llama", "1"): True, ("bridge_sweep_llama", "2"): False,
                   ("bridge_sweep_llama", "3"): True,
                   # 1 and 3 made by the first run (each after its bridge, on the pairs in
                   # memory, though its regression step never ran), 2 by this one
                   ("regression_sweep_llama", "1"): True,
                   ("regression_sweep_llama", "2"): False,
                   ("regression_sweep_llama", "3"): True}, got
    for layer in (1, 2, 3):
        assert RegressionControl(world.root, "llama", layer).manifest() is not None
    paths = {p: m["path"] for p, m in _materializations(instance, "regression_sweep_llama").items()}
    assert sorted(paths) == ["1", "2", "3"] and len(set(paths.values())) == 3
