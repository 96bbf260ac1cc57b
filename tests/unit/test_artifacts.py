"""Storage round trips: each artifact class writes a stage result and reads typed values back;
reuse needs the fingerprint and every owned file; damage and absence are named errors."""

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from dihal.config import BridgeProtocol
from dihal.errors import CorruptArtifactError, MissingArtifactError, StaleArtifactError
from dihal.generation_rows import BASELINE_ROW, GenerationRow, JudgeInfo, Sample, generation_rows
from dihal.inputs import GeometryRow
from dihal.net_configs import DenoiserConfig, TrainConfig
from dihal.results import (
    BridgeHparams,
    BridgeMetrics,
    EvalResult,
    GeometryResult,
    SequencesResult,
    TrainedBridge,
)
from dihal.rows import TrainingPoint
from dihal.run.stages import CODE_VERSIONS
from storage import (
    Bridge,
    Evaluation,
    Geometry,
    Manifest,
    Plot,
    Sequences,
    SweepBridge,
    Table,
    fingerprint,
)

PNG = b"\x89PNG\r\n\x1a\n not really a picture"


def _manifest(art, result, fp="f" * 64) -> Manifest:
    return Manifest(stage=art.stage, backbone=art.backbone, fingerprint=fp, config={},
                    code_version=CODE_VERSIONS[art.stage],
                    info={**result.info(), "metadata": result.metadata()})


def test_sequences_round_trip_and_reuse_needs_every_file(tmp_path):
    res = SequencesResult(input_ids={"train": [[1, 5, 6], [1, 7, 8]], "val": [[1, 9, 2]]},
                          doc_ids={"train": [["a"], ["a", "b"]], "val": [["c"]]},
                          sources={"train": [["wiki"], ["wiki"]], "val": [["code"]]},
                          bos_id=1, eos_id=2, revision="r1")
    art = Sequences(tmp_path, "llama")
    art.write(_manifest(art, res), res)
    ids = art.token_ids()
    assert ids["train"].dtype == np.int64 and ids["train"].tolist() == [[1, 5, 6], [1, 7, 8]]
    assert ids["val"].tolist() == [[1, 9, 2]]
    assert art.manifest().info["metadata"]["train_documents"] == 2
    assert art.reuse("f" * 64) is not None and art.reuse("0" * 64) is None
    art.path("sequences.parquet").unlink()
    assert art.reuse("f" * 64) is None  # a missing file is never reported as cached


def _sequences(tmp_path, code_version):
    res = SequencesResult(input_ids={"train": [[1, 5, 6]], "val": [[1, 9, 2]]},
                          doc_ids={"train": [["a"]], "val": [["c"]]},
                          sources={"train": [["wiki"]], "val": [["code"]]},
                          bos_id=1, eos_id=2, revision="r1")
    art = Sequences(tmp_path, "llama")
    art.write(replace(_manifest(art, res), code_version=code_version), res)
    return art


@pytest.mark.parametrize("made_by", ["0", ""])
def test_an_artifact_of_another_stage_version_is_stale_and_never_read(tmp_path, made_by):
    """A reader refuses what another code version of the stage made (or a manifest that did
    not record it), naming the command that makes it again."""
    art = _sequences(tmp_path, made_by)
    with pytest.raises(StaleArtifactError) as got:
        art.require()
    said = str(got.value)
    assert "sequences_llama" in said and "is stale and is not read" in said
    assert "dagster asset materialize --select" in said
    assert (f"version {made_by} of stage sequences" if made_by else "did not record") in said
    assert _sequences(tmp_path, CODE_VERSIONS["sequences"]).require().code_version == \
        CODE_VERSIONS["sequences"]


def test_a_current_artifact_whose_manifest_lacks_the_version_is_stamped_not_remade(tmp_path):
    """Its stage found its fingerprint (which holds the code version) current: stamping
    records the version in the manifest, changes no file, and a reader then takes it."""
    art = _sequences(tmp_path, "")
    files = art.manifest().files
    stamped = art.stamp_version(art.reuse("f" * 64))
    assert stamped.code_version == CODE_VERSIONS["sequences"]
    assert art.manifest() == stamped and stamped.files == files
    assert art.require() == stamped
    assert art.stamp_version(stamped) is stamped  # a stamped manifest is not written again


def test_geometry_writes_tables_plot_and_display_metadata(tmp_path):
    rows = [GeometryRow(ll, n, m_curv=1.0 + ll, m_mono=0.5, m_mono_median=0.5, m_mono_q05=0.1,
                        m_mono_min_eig=0.05, k_eff=3.0, tr_sigma=6.0, lambda_max=2.0)
            for ll in range(3) for n in ("none", "rms")]
    res = GeometryResult(rows, np.array([[0, 1], [1, 3]]), np.array([0]), np.array([[0, 1]]), 1.5,
                         plot_png=PNG)
    art = Geometry(tmp_path, "llama")
    m = Manifest(stage="geometry", backbone="llama", fingerprint="g" * 64,
                 code_version=CODE_VERSIONS["geometry"],
                 config={"normalizations": ["none", "rms"]},
                 info={**res.info(), "metadata": res.metadata()})
    art.write(m, res)
    assert art.rows() == rows and art.plot() == PNG
    meta = art.metadata(art.manifest())
    assert isinstance(meta["plot"], Plot) and meta["plot"].path.read_bytes() == PNG
    assert isinstance(meta["table"], Table) and [r["norm"] for r in meta["table"].rows] == ["none"] * 3
    assert meta["layers"] == 3 and meta["tokens"] == 2
    assert not list(tmp_path.rglob("*.tmp"))  # the atomic swap left nothing behind


def _trained(layer=3):
    metrics = BridgeMetrics(layer=layer, val_loss=0.5, recon_error=0.4, hybrid_nll=3.0,
                            backbone_nll=2.5, top1_agreement=0.6, hybrid_ppl=20.0, backbone_ppl=12.2,
                            init_val_loss=1.1,
                            train_loss=0.6, train_steps=10, train_tokens=640, seconds=1.0,
                            resumed_from_step=0, denoiser_parameters=1234)
    tensors = {"denoiser.w": torch.arange(6.0).reshape(2, 3), "cond_std.mean": torch.zeros(3)}
    return TrainedBridge(tensors, BridgeHparams(layer, BridgeProtocol(sampler_steps=4)), metrics,
                         [TrainingPoint(5, 1.0, 1e-3, 0.5), TrainingPoint(10, 0.6, 5e-4, 0.25)])


def test_bridge_run_is_made_in_its_work_folder_and_reads_back_typed(tmp_path):
    art = SweepBridge(tmp_path, "llama", 3)
    work = art.claim("b" * 64)
    (art.checkpoints / "step-00000005").mkdir(parents=True)
    res = _trained()
    art.write(_manifest(art, res, "b" * 64), res)
    assert not work.exists() and art.directory.name == "layer_003"
    back = art.read()
    assert back.layer == 3 and back.metrics == res.metrics and back.hparams == res.hparams
    assert json.loads(art.path("hparams.json").read_text()) == {  # None fields are not stored
        "layer": 3, "protocol": BridgeProtocol(sampler_steps=4).to_dict()}
    assert torch.equal(back.tensors["denoiser.w"], res.tensors["denoiser.w"])
    assert art.name == "bridge_sweep_llama[3]" and art.reuse("b" * 64) is not None


def test_a_bridges_hyper_parameters_of_no_bridge_are_refused_by_name():
    ridge = BridgeHparams(2, BridgeProtocol(), "llama", "r1", "ridge", ridge_lambda=0.1,
                          lambdas=[0.1, 1.0], val_mses=[0.5, 0.6])
    assert BridgeHparams.from_dict(ridge.to_dict()) == ridge
    net = BridgeHparams(2, BridgeProtocol(), "llama", "r1", "regression",
                        denoiser_config=DenoiserConfig(d_in=8, d_model=16, n_heads=2),
                        train_config=TrainConfig(batch_size=4))
    stored = json.loads(json.dumps(net.to_dict()))  # as hparams.json holds it: lists, no tuples
    assert BridgeHparams.from_dict(stored) == net and stored["denoiser_config"]["d_in"] == 8
    with pytest.raises(ValueError, match=r"fields \['steps'\]"):
        BridgeHparams.from_dict({**ridge.to_dict(), "steps": 4})
    with pytest.raises(ValueError, match="objective is one of"):
        BridgeHparams(2, BridgeProtocol(), objective="diffusion")


def test_missing_and_damaged_bridges_are_named_errors(tmp_path):
    art = Bridge(tmp_path, "llama")
    with pytest.raises(MissingArtifactError, match=r"dagster asset materialize --select '\*bridge_llama'"):
        art.read()
    res = _trained()
    art.write(_manifest(art, res), res)
    weights = art.path("bridge.safetensors")
    weights.write_bytes(weights.read_bytes()[:40])  # truncated
    with pytest.raises(CorruptArtifactError, match=str(art.directory)):
        art.read()


def test_evaluation_samples_round_trip(tmp_path):
    rows = [{"model": "DiHAL (l=2)", "role": "dihal", "gen_ppl": 10.0, "diversity": 0.5,
             "repetition": 0.1, "ms_per_token": 3.0, "latency_vs_backbone": 1.5},
            {"model": "backbone (AR reference)", "role": "backbone", "gen_ppl": 5.0,
             "diversity": 0.6, "repetition": 0.05, "ms_per_token": 2.0, "latency_vs_backbone": 1.0},
            *({"model": f"{name} (l=2)", "role": "control", "gen_ppl": ppl, "diversity": 0.4,
               "repetition": 0.2, "ms_per_token": 1.0, "latency_vs_backbone": 0.5}
              for name, ppl in (("ridge", 12.0), ("layer-drop", 90.0)))]
    samples = [Sample(r["model"], 0, 0, f"text of {r['role']}") for r in rows]
    res = EvalResult(generation_rows(rows), samples, JudgeInfo("tiny-judge", "x", "Tiny", 32, 64), 2)
    art = Evaluation(tmp_path, "llama")
    art.write(_manifest(art, res), res)
    assert art.samples() == samples
    meta = art.metadata(art.manifest())
    assert meta["judge"] == "tiny-judge" and meta["layer"] == 2
    assert meta["dihal gen_ppl"] == 10.0 and meta["backbone diversity"] == 0.6  # top-level numbers
    # the controls share a role: their numbers are keyed by name, none overwrites another's
    assert meta["ridge (l=2) gen_ppl"] == 12.0 and meta["layer-drop (l=2) gen_ppl"] == 90.0
    assert "text of dihal" in meta["samples"].text
    assert json.loads(art.path("samples.jsonl").read_text().splitlines()[1])["text"] == "text of backbone"


def test_fingerprint_is_stable_over_dataclasses_dicts_and_tuples():
    from dihal.config import GeometryConfig

    a = fingerprint("geometry", "1", GeometryConfig(), {"up": "x"}, {})
    b = fingerprint("geometry", "1", {**GeometryConfig().__dict__,
                                      "normalizations": list(GeometryConfig().normalizations)},
                    {"up": "x"}, {})
    assert a == b and a != fingerprint("geometry", "2", GeometryConfig(), {"up": "x"}, {})


@pytest.mark.parametrize("kind", ["sweep bridge", "baseline"])
def test_a_same_size_change_to_trained_weights_is_never_reused_however_recent_the_check(tmp_path,
                                                                                        kind):
    """A trained model's files are checked against their digests on every reuse, not only
    when the last full check is older than verify_every_hours."""
    from dihal.results import BaselineResult
    from storage import BaselineRun

    if kind == "sweep bridge":
        art, res, weights = SweepBridge(tmp_path, "llama", 3), _trained(), "bridge.safetensors"
    else:
        row = GenerationRow.from_dict({"gen_ppl": 9.0, "diversity": 0.5, "repetition": 0.1,
                                       "train_steps": 4}, BASELINE_ROW)
        art = BaselineRun(tmp_path, "llama", "sed")
        res = BaselineResult("sed", row, ["a text", "another"], {"w": torch.arange(6.0)}, {"d": 1})
        weights = "model.safetensors"
    art.write(_manifest(art, res, "c" * 64), res)
    if kind != "sweep bridge":
        assert art.texts() == ["a text", "another"]  # the samples' texts, read back in order
    assert art.verified_within(3600) and art.reuse("c" * 64, digests=False) is not None
    path = art.path(weights)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01  # one bit of the last tensor's data: same size
    path.write_bytes(bytes(data))
    assert art.verified_within(3600)  # the stamp says "checked a moment ago"
    assert art.reuse("c" * 64, digests=False) is None
    assert any(f"{weights}: content changed" in p for p in art.damage)
