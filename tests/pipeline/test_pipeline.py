"""The Locate graph on a tiny model, through Dagster, in seconds (a corpus of shards, or a
Hugging Face dataset in the Hub's layout)."""

import os
import subprocess
import sys

import dagster as dg
import pytest

from dihal.run.stages import CODE_VERSIONS
from storage import read_manifest
from tests.tiny import (
    LOCATE,
    ROOT,
    SWEEP_RUN,
    TINY_RUN,
    copy_world,
    hub_folder,
    hub_rows,
    materialized_metadata,
    tiny_definitions,
)


def _run(defs, instance, selection, corpus_cfg):
    job = defs.resolve_implicit_global_asset_job_def()
    ops = {**TINY_RUN, "corpus": {"config": corpus_cfg}}
    ops = {k: v for k, v in ops.items() if k in selection}
    return job.execute_in_process(
        run_config={"ops": ops}, instance=instance,
        asset_selection=[dg.AssetKey(k) for k in selection], raise_on_error=False,
    )



def test_locate_graph_runs_caches_and_recomputes_on_change(tiny):
    defs, shard, root = tiny
    instance = dg.DagsterInstance.ephemeral()
    corpus_cfg = {"paths": [str(shard)]}

    first = _run(defs, instance, LOCATE, corpus_cfg)
    assert first.success, [e.message for e in first.all_events if e.is_failure]
    meta = materialized_metadata(first)
    assert all(meta[k]["cached"].value is False for k in LOCATE)
    l_star = meta["layer_score_llama"]["l_star"].value
    assert l_star in (1, 2, 3)  # a candidate layer of the 4-layer model
    checks = {e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data.passed
              for e in first.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    assert checks == {"finite_states": True, "expected_shapes": True}
    for name in ("geometry.parquet", "positions.parquet", "plan.parquet", "proxies.png"):
        assert (root / "llama" / "geometry" / name).exists()
    # l*'s stability over whole held-out sequences (6 of them) and on split halves (3 each)
    seq = read_manifest(root / "llama" / "layer_score").info["sequence_stability"]
    assert seq["norm"] == "none" and seq["sequences"] == 6
    from dihal.config import LayerScoreConfig

    assert seq["bootstrap"]["l_star"] == l_star
    assert seq["bootstrap"]["replicates"] == LayerScoreConfig().sequence_resamples  # the default
    assert sum(seq["bootstrap"]["picks"].values()) == pytest.approx(1.0)
    (split,) = seq["split_half"]["splits"]
    assert {split["l_star_a"], split["l_star_b"]} <= {1, 2, 3}
    assert seq["split_half"]["agreement"] == float(split["l_star_a"] == split["l_star_b"])
    zarr_dir = root / "llama" / "hidden_states" / "states.zarr"
    mtimes = {p: p.stat().st_mtime_ns for p in zarr_dir.rglob("*") if p.is_file()}

    again = _run(defs, instance, LOCATE, corpus_cfg)
    assert again.success
    assert all(m["cached"].value is True for m in materialized_metadata(again).values())
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes  # nothing rewritten
    assert materialized_metadata(again)["layer_score_llama"]["l_star"].value == l_star

    # manifests written before the stages' code versions were recorded: their own stage finds
    # them current (the fingerprint holds the version), stamps them and makes nothing again
    from dataclasses import replace

    from storage.manifest import write_manifest

    for stage in ("geometry", "layer_score"):
        old = read_manifest(root / "llama" / stage)
        assert old.code_version == CODE_VERSIONS[stage]
        write_manifest(root / "llama" / stage, replace(old, code_version=""))
    stamped = _run(defs, instance, LOCATE, corpus_cfg)
    assert stamped.success
    assert all(m["cached"].value is True for m in materialized_metadata(stamped).values())
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes
    for stage in ("geometry", "layer_score"):
        assert read_manifest(root / "llama" / stage).code_version == CODE_VERSIONS[stage]

    changed = _run(defs, instance, LOCATE, {"paths": [str(shard)], "max_docs": 100})
    assert changed.success
    assert all(m["cached"].value is False for m in materialized_metadata(changed).values())
    fp_old = read_manifest(root / "llama" / "sequences")
    assert fp_old.upstream["corpus"] == read_manifest(root / "corpus").fingerprint


def test_missing_upstream_names_the_command(tiny):
    defs, _, _ = tiny
    res = _run(defs, dg.DagsterInstance.ephemeral(), ["geometry_llama"], {})
    assert not res.success
    failure = next(e for e in res.all_events if e.event_type_value == "STEP_FAILURE")
    assert "dagster asset materialize --select '*hidden_states_llama'" in str(
        failure.step_failure_data.error.to_string())


def test_definitions_load_fast_without_heavy_imports():
    code = ("import sys, time; t = time.time(); import pipeline.definitions as d; "
            "keys = {k.to_user_string() for k in d.defs.resolve_asset_graph().get_all_asset_keys()}; "
            "assert {'hidden_states_smollm2', 'geometry_llama', 'layer_score_qwen'} <= keys, keys; "
            "heavy = [m for m in ('torch', 'transformers', 'zarr') if m in sys.modules]; "
            "assert not heavy, heavy; print(time.time() - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert float(out.stdout.strip()) < 10.0


# A process where torch (and so transformers) cannot be imported materialises a world whose
# artifacts are all made: every step finds its artifact and reports it cached.
CACHED_WITHOUT_TORCH = """
import json, sys
sys.modules["torch"] = None  # `import torch` raises ImportError here
import dagster as dg
from tests.tiny_location import defs  # the tiny model and root from the environment

run = json.loads(sys.argv[1])
assets = list(defs.assets) + list(defs.asset_checks)
cached = {}
for keys, partition in json.loads(sys.argv[2]):
    res = dg.materialize(assets, selection=keys, partition_key=partition, resources=defs.resources,
                         instance=dg.DagsterInstance.ephemeral(), raise_on_error=False,
                         run_config={"ops": {k: v for k, v in run.items() if k in keys}})
    failures = [e.step_failure_data.error.to_string() for e in res.all_events
                if e.event_type_value == "STEP_FAILURE"]
    assert res.success, failures
    for e in res.get_asset_materialization_events():
        meta = e.step_materialization_data.materialization.metadata
        cached[f"{e.asset_key.to_user_string()}[{partition}]"] = meta["cached"].value
print("CACHED", json.dumps(cached))
"""


def test_a_step_that_finds_its_artifact_made_loads_no_torch(swept_world, tmp_path,
                                                             tiny_llama_dir):
    """Reuse is cheap: the steps of Locate and of a swept layer whose artifacts are made
    resolve the backbone's weights (their revision is in the fingerprint) and read manifests,
    without importing torch, transformers or a model (seconds of a process's start)."""
    import json

    world = copy_world(swept_world, tmp_path, tiny_llama_dir)
    steps = [[LOCATE, None], [["bridge_sweep_llama"], "2"]]
    run = {**SWEEP_RUN, "corpus": {"config": {"paths": [str(world.shard)]}}}
    env = {**os.environ, "DIHAL_TINY_MODEL": str(tiny_llama_dir),
           "DIHAL_ARTIFACTS": str(world.root), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", CACHED_WITHOUT_TORCH, json.dumps(run),
                          json.dumps(steps)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("CACHED ")]
    cached = json.loads(line.removeprefix("CACHED "))
    assert cached == {**{f"{k}[None]": True for k in LOCATE},
                      "bridge_sweep_llama[2]": True}, cached


def test_run_configs_mirror_the_dihal_dataclasses():
    import dataclasses

    from assets import configs
    from dihal import config as dc

    pairs = [(configs.CorpusRunConfig, dc.CorpusConfig, "corpus"),
             (configs.SequencesRunConfig, dc.SequenceConfig, "sequences"),
             (configs.ExtractRunConfig, dc.ExtractConfig, "hidden_states"),
             (configs.GeometryRunConfig, dc.GeometryConfig, "geometry"),
             (configs.BridgeProtocolRunConfig, dc.BridgeProtocol, "bridge_sweep"),
             (configs.EvalRunConfig, dc.EvalConfig, "eval"),
             (configs.BaselineRunConfig, dc.BaselineRunConfig, "baseline"),
             (configs.SamplerCurveRunConfig, dc.SamplerCurveConfig, "sampler_steps")]
    # the defaults are the dataclass's under the preset in force (the cpu preset: its sweep
    # measures on 8 held-out sequences at K = 8)
    assert configs.PROFILE_NAME == "cpu"
    assert configs.PROFILE["bridge_sweep"] == {"eval_sequences": 8, "sampler_steps": 8}
    for run_cls, cls, stage in pairs:
        assert set(run_cls.model_fields) == {f.name for f in dataclasses.fields(cls)}, run_cls
        assert run_cls().to_dihal() == cls(**configs.PROFILE.get(stage, {})), run_cls
    full = configs.FullBridgeRunConfig().to_dihal()
    assert full == dataclasses.replace(dc.BridgeProtocol(), epochs=2.0)
    with pytest.raises(ValueError, match="on_malformed"):
        configs.CorpusRunConfig(on_malformed="ignore").to_dihal()


def test_a_hub_dataset_runs_through_corpus_sequences_and_locate(tmp_path, tiny_llama_dir):
    """corpus -> sequences_llama -> hidden_states -> geometry -> layer_score on a local
    Hub-layout dataset, through Dagster."""
    folder = hub_folder(tmp_path / "ds", {"train": hub_rows(120)})
    defs = tiny_definitions(tmp_path / "artifacts", tiny_llama_dir)
    corpus_cfg = {"hf_dataset": str(folder), "hf_text_field": "body", "hf_id_field": "doc",
                  "max_docs": 200}
    result = _run(defs, dg.DagsterInstance.ephemeral(), LOCATE, corpus_cfg)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    meta = materialized_metadata(result)
    assert meta["corpus"]["documents"].value == 120
    assert meta["layer_score_llama"]["l_star"].value in (1, 2, 3)
