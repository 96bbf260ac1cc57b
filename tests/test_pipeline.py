"""The Locate graph on a tiny model, through Dagster, in seconds."""

import subprocess
import sys

import dagster as dg
import pytest

from pipeline.definitions import build_definitions
from resources import BackboneResource, ComputeResource, JudgeResource, StorageResource
from storage import read_manifest
from tests.tiny import make_docs, write_shard

TINY_RUN = {
    "sequences_llama": {"config": {"seq_len": 16, "n_train": 8, "n_val": 6, "val_fraction": 0.3,
                                   "max_tokens_per_doc": 40}},
    "hidden_states_llama": {"config": {"batch_size": 4}},
    "geometry_llama": {"config": {"n_tokens": 64, "n_anchors": 24, "k_neighbors": 6,
                                  "n_pairs": 100}},
}


@pytest.fixture()
def tiny_defs(tmp_path, tiny_llama_dir):
    (tmp_path / "corpus").mkdir()
    shard = write_shard(tmp_path / "corpus" / "s0.json.gz", make_docs(120))
    defs = build_definitions(("llama",), resources={
        "storage": StorageResource(root=str(tmp_path / "artifacts")),
        "backbones": BackboneResource(paths={"llama": str(tiny_llama_dir)}),
        "compute": ComputeResource(device="cpu", threads=1),
        "judge": JudgeResource(name=str(tiny_llama_dir)),
    }, n_layers={"llama": 4})
    return defs, shard, tmp_path / "artifacts"


def _run(defs, instance, selection, corpus_cfg):
    job = defs.resolve_implicit_global_asset_job_def()
    ops = {**TINY_RUN, "corpus": {"config": corpus_cfg}}
    ops = {k: v for k, v in ops.items() if k in selection}
    return job.execute_in_process(
        run_config={"ops": ops}, instance=instance,
        asset_selection=[dg.AssetKey(k) for k in selection], raise_on_error=False,
    )


def _mat_meta(result):
    return {e.asset_key.to_user_string(): e.step_materialization_data.materialization.metadata
            for e in result.get_asset_materialization_events()}


CHAIN = ["corpus", "sequences_llama", "hidden_states_llama", "geometry_llama", "layer_score_llama"]


def test_locate_graph_runs_caches_and_recomputes_on_change(tiny_defs):
    defs, shard, root = tiny_defs
    instance = dg.DagsterInstance.ephemeral()
    corpus_cfg = {"paths": [str(shard)]}

    first = _run(defs, instance, CHAIN, corpus_cfg)
    assert first.success, [e.message for e in first.all_events if e.is_failure]
    meta = _mat_meta(first)
    assert all(meta[k]["cached"].value is False for k in CHAIN)
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

    again = _run(defs, instance, CHAIN, corpus_cfg)
    assert again.success
    assert all(m["cached"].value is True for m in _mat_meta(again).values())
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes  # nothing rewritten
    assert _mat_meta(again)["layer_score_llama"]["l_star"].value == l_star

    changed = _run(defs, instance, CHAIN, {"paths": [str(shard)], "max_docs": 100})
    assert changed.success
    assert all(m["cached"].value is False for m in _mat_meta(changed).values())
    fp_old = read_manifest(root / "llama" / "sequences")
    assert fp_old.upstream["corpus"] == read_manifest(root / "corpus").fingerprint


def test_missing_upstream_names_the_command(tiny_defs):
    defs, _, _ = tiny_defs
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

    pairs = [(configs.CorpusRunConfig, dc.CorpusConfig), (configs.SequencesRunConfig, dc.SequenceConfig),
             (configs.ExtractRunConfig, dc.ExtractConfig), (configs.GeometryRunConfig, dc.GeometryConfig),
             (configs.BridgeProtocolRunConfig, dc.BridgeProtocol), (configs.EvalRunConfig, dc.EvalConfig),
             (configs.BaselineRunConfig, dc.BaselineRunConfig),
             (configs.SamplerCurveRunConfig, dc.SamplerCurveConfig)]
    for run_cls, cls in pairs:
        assert set(run_cls.model_fields) == {f.name for f in dataclasses.fields(cls)}, run_cls
        assert run_cls().to_dihal() == cls(), run_cls
    full = configs.FullBridgeRunConfig().to_dihal()
    assert full == dataclasses.replace(dc.BridgeProtocol(), epochs=2.0)
    with pytest.raises(ValueError, match="on_malformed"):
        configs.CorpusRunConfig(on_malformed="ignore").to_dihal()
