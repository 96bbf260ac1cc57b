"""Issue 4 on a tiny model through Dagster: four baselines at DiHAL's budget, the comparison,
full training (l*, oracle, worst) and the report."""

import json

import dagster as dg

from storage import read_manifest
from tests.test_pipeline import TINY_RUN
from tests.test_replace_pipeline import _mat, tiny  # noqa: F401 (fixture)

PROTOCOL = {"d_model": 64, "n_layers": 1, "n_heads": 2, "batch_size": 2, "eval_sequences": 4,
            "steps": 4, "checkpoint_every": 50}
EVAL = {"n_samples": 4, "length": 6, "batch_size": 2}


def test_baselines_comparison_full_training_report(tiny):  # noqa: F811
    defs, shard, root = tiny
    inst = dg.DagsterInstance.ephemeral()
    ops = {**TINY_RUN, "corpus": {"config": {"paths": [str(shard)]}},
           "bridge_sweep_llama": {"config": PROTOCOL},
           "bridge_llama": {"config": {**PROTOCOL, "epochs": 2.0}},
           "eval_llama": {"config": EVAL}, "full_training_llama": {"config": EVAL},
           "sampler_steps_llama": {"config": {"steps": [1, 2, 4], "n_samples": 2, "length": 4}},
           "baseline_llama": {"config": {"n_samples": 4, "length": 8}}}
    res, err = _mat(defs, inst, ["corpus", "sequences_llama", "hidden_states_llama",
                                 "geometry_llama", "layer_score_llama"], ops)
    assert res.success, err
    for layer in ("1", "2", "3"):
        res, err = _mat(defs, inst, ["bridge_sweep_llama"], ops, partition=layer)
        assert res.success, err
    res, err = _mat(defs, inst, ["bridgeability_llama", "bridge_llama", "eval_llama",
                                 "sampler_steps_llama"], ops)
    assert res.success, err
    # the sampler-steps curve re-measures the bridge at l*: at its trained K it gives the
    # bridge's own numbers back
    curve = read_manifest(root / "llama" / "sampler_steps").info
    trained = read_manifest(root / "llama" / "bridge").info["metrics"]
    assert [r["steps"] for r in curve["rows"]] == [1, 2, 4] and curve["layer"] == trained["layer"]
    at_trained = curve["rows"][2]
    for key in ("recon_error", "hybrid_nll", "top1_agreement"):
        assert at_trained[key] == trained[key], key
    assert all(r["ms_per_token"] > 0 for r in curve["rows"])
    assert len({r["hybrid_nll"] for r in curve["rows"]}) == 3
    # the eval rows carry both Gen.PPL conventions and intervals over samples
    ev = read_manifest(root / "llama" / "eval").info["rows"]
    for row in ev:
        assert row["gen_ppl_low"] <= row["gen_ppl"] <= row["gen_ppl_high"]
        assert row["gen_ppl_mean_low"] <= row["gen_ppl_mean"] <= row["gen_ppl_mean_high"]
        # MAUVE against held-out corpus text (NaN only where fewer than 2 samples had text)
        assert row["mauve"] != row["mauve"] or 0 <= row["mauve_low"] <= row["mauve"] <= row["mauve_high"] <= 1

    bridge = read_manifest(root / "llama" / "bridge").info["metrics"]
    for name in ("diffusion-lm", "sed", "ld4lg", "codar"):
        res, err = _mat(defs, inst, ["baseline_llama"], ops, partition=name)
        assert res.success, (name, err)
        m = read_manifest(root / "llama" / "baseline" / name)
        budget = m.info["row"]["budget"]
        assert abs(budget["denoiser_parameters"] / bridge["denoiser_parameters"] - 1) <= 0.10
        assert budget["train_tokens"] == bridge["train_tokens"]
        assert budget["sampler_steps"] == PROTOCOL["steps"]
        samples = (root / "llama" / "baseline" / name / "samples.jsonl").read_text().splitlines()
        assert len(samples) == 4 and all("text" in json.loads(s) for s in samples)

    res, err = _mat(defs, inst, ["comparison_llama", "full_training_llama", "report_llama"], ops)
    assert res.success, err
    checks = {e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data.passed
              for e in res.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    assert checks == {"budgets_matched": True, "names_its_inputs": True}
    rows = read_manifest(root / "llama" / "comparison").info["rows"]
    assert [r["model"] for r in rows][2:] == ["diffusion-lm", "sed", "ld4lg", "codar"]
    assert [r["role"] for r in rows] == ["dihal", "backbone"] + ["baseline"] * 4
    assert rows[0]["train_tokens"] == bridge["train_tokens"] and rows[1]["train_tokens"] is None
    full = read_manifest(root / "llama" / "full_training").info["rows"]
    b = read_manifest(root / "llama" / "bridgeability").info
    assert {r["role"]: r["layer"] for r in full} == {"geometry l*": b["l_star"],
                                                     "oracle": b["oracle"], "worst": b["worst"]}
    assert len({r["train_tokens"] for r in full}) == 1  # one full budget for all three
    # the science checks of the earlier assets: 3 swept layers are too few for a Spearman
    from dagster import build_asset_check_context

    results = {}
    for c in defs.asset_checks:
        for key in c.check_keys:
            if key.name in ("enough_layers", "loss_fell", "losses_fell", "samples_readable"):
                results[key.name] = c(build_asset_check_context(
                    resources={"storage": defs.resources["storage"]})).passed
    assert results == {"enough_layers": False, "loss_fell": True, "losses_fell": True,
                       "samples_readable": True}
    # a report edited after it was made fails its check (the digests no longer match)
    report_md = root / "llama" / "report" / "report.md"
    report_md.write_text(report_md.read_text().replace(
        read_manifest(root / "llama" / "geometry").fingerprint[:16], "?"))
    check = next(c for c in defs.asset_checks if any(k.name == "names_its_inputs" for k in c.check_keys))
    edited = check(build_asset_check_context(resources={"storage": defs.resources["storage"]}))
    assert edited.passed is False and "report_llama" in edited.metadata["error"].value
    assert "is damaged: report.md:" in edited.metadata["error"].value
    html = (root / "llama" / "report" / "report.html").read_text()
    md = (root / "llama" / "report" / "report.md").read_text()
    for text in (html, md):
        for needle in ("Locate", "bridgeability", "Full training", "diffusion-lm", "codar",
                       "depth (-l)", "data:image/png;base64,", "S_l (robust)", "-cond_distance",
                       "ridge_r2", "twonn_id", "What the sampler", "mean of samples [95 %]",
                       "MAUVE [95 %]", "regression control"):
            assert needle in text, needle
