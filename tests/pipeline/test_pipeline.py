"""The Locate graph on a tiny model, through Dagster, in seconds (a corpus of shards, or a
Hugging Face dataset in the Hub's layout)."""

import subprocess
import sys

import dagster as dg
import pytest

from dihal.run.stages import CODE_VERSIONS
from storage import read_manifest
from tests.tiny import (
    LOCATE,
    TINY_RUN,
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
