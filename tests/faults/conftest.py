"""The fault-injection suite's world: a tiny Locate graph and three swept layers, materialised
once, copied into each test's folder so that each test damages its own copy."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from pipeline.definitions import build_definitions
from resources import BackboneResource, ComputeResource, JudgeResource, StorageResource
from tests.tiny import make_docs, write_shard

RUN = {
    "sequences_llama": {"config": {"seq_len": 16, "n_train": 8, "n_val": 6, "val_fraction": 0.3,
                                   "max_tokens_per_doc": 40}},
    "hidden_states_llama": {"config": {"batch_size": 4}},
    "geometry_llama": {"config": {"n_tokens": 64, "n_anchors": 24, "k_neighbors": 6, "n_pairs": 100}},
    "bridge_sweep_llama": {"config": {"d_model": 32, "n_layers": 1, "n_heads": 2, "batch_size": 2,
                                      "eval_sequences": 4, "steps": 4, "checkpoint_every": 2}},
}
LOCATE = ["corpus", "sequences_llama", "hidden_states_llama", "geometry_llama", "layer_score_llama"]


@dataclass
class World:
    root: Path  # the artifact root
    shard: Path
    defs: dg.Definitions

    def materialize(self, keys: list[str], partition: str | None = None, instance=None,
                    resources: dict | None = None, **ops):
        """(result, [failure messages]) of materialising `keys` in-process (on `instance`, or
        a new ephemeral one; with `resources` replacing the world's)."""
        run = {**RUN, "corpus": {"config": {"paths": [str(self.shard)]}}, **ops}
        res = dg.materialize(
            list(self.defs.assets) + list(self.defs.asset_checks), selection=keys,
            partition_key=partition, instance=instance or dg.DagsterInstance.ephemeral(),
            resources={**self.defs.resources, **(resources or {})}, raise_on_error=False,
            run_config={"ops": {k: v for k, v in run.items() if k in keys}})
        errors = [e.step_failure_data.error.to_string() for e in res.all_events
                  if e.event_type_value == "STEP_FAILURE"]
        return res, errors

    def cached(self, res) -> dict[str, bool]:
        return {e.asset_key.to_user_string(): e.step_materialization_data.materialization.metadata[
            "cached"].value for e in res.get_asset_materialization_events()}

    def checks(self, res) -> dict[str, dg.AssetCheckEvaluation]:
        return {e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data
                for e in res.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}

    def path(self, *parts: str) -> Path:
        return self.root / "llama" / Path(*parts)


def make_world(folder: Path, model_dir: Path, artifacts: Path | None = None) -> World:
    shard = folder / "corpus" / "s0.json.gz"
    if not shard.exists():
        shard.parent.mkdir(parents=True, exist_ok=True)
        write_shard(shard, make_docs(120))
    root = artifacts or folder / "artifacts"
    defs = build_definitions(("llama",), n_layers={"llama": 4}, resources={
        "storage": StorageResource(root=str(root), verify_every_hours=24.0),
        "backbones": BackboneResource(paths={"llama": str(model_dir)}),
        "compute": ComputeResource(device="cpu", threads=1),
        "judge": JudgeResource(name=str(model_dir)),
    })
    return World(root.resolve(), shard, defs)


@pytest.fixture(scope="session")
def base_world(tmp_path_factory, tiny_llama_dir) -> World:
    w = make_world(tmp_path_factory.mktemp("faults-base"), tiny_llama_dir)
    res, err = w.materialize(LOCATE)
    assert res.success, err
    for layer in ("1", "2", "3"):
        res, err = w.materialize(["bridge_sweep_llama"], partition=layer)
        assert res.success, err
    return w


@pytest.fixture()
def world(tmp_path, base_world, tiny_llama_dir) -> World:
    """A private copy of the base world's artifacts (same shard, same model)."""
    shutil.copytree(base_world.root, tmp_path / "artifacts")
    w = make_world(tmp_path, tiny_llama_dir, tmp_path / "artifacts")
    w.shard = base_world.shard
    return w
