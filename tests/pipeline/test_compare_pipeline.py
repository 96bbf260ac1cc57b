"""The comparison on a tiny model through Dagster: four baselines at DiHAL's budget, the comparison,
full training (l*, oracle, worst) and the report."""

import json
import re

import dagster as dg
import pytest

from dihal.config import FRONTIER_TEMPERATURES
from dihal.report.cross_backbone import another_backbone
from storage import read_manifest
from tests.tiny import LOCATE, MATCHED_PROTOCOL, TINY, TINY_RUN, materialize

PROTOCOL = MATCHED_PROTOCOL  # a denoiser the baselines can match
# the whole temperature frontier (the study preset's; the default draws the main temperature
# alone, whose points are the main rows: tests/unit/test_frontier.py), so that every
# temperature other than the main one is sampled again here
WHOLE_FRONTIER = {"frontier_temperatures": list(FRONTIER_TEMPERATURES)}
EVAL = {**TINY["eval"], **WHOLE_FRONTIER}


def test_baselines_comparison_full_training_report(located):
    defs, shard, root = located
    inst = dg.DagsterInstance.ephemeral()
    ops = {**TINY_RUN, "corpus": {"config": {"paths": [str(shard)]}},
           "bridge_sweep_llama": {"config": PROTOCOL},
           # two training seeds for the full-training bridges (their spread per role)
           "bridge_llama": {"config": {**PROTOCOL, "epochs": 2.0, "seeds": 2}},
           "eval_llama": {"config": EVAL}, "full_training_llama": {"config": EVAL},
           "sampler_steps_llama": {"config": {"steps": [1, 2, 4], "n_samples": 2, "length": 4}},
           "baseline_llama": {"config": {"n_samples": 4, "length": 8, **WHOLE_FRONTIER}}}
    res, err = materialize(defs, inst, LOCATE, ops)
    assert res.success, err
    for layer in ("1", "2", "3"):
        res, err = materialize(defs, inst, ["bridge_sweep_llama"], ops, partition=layer)
        assert res.success, err
    res, err = materialize(defs, inst, ["bridgeability_llama", "bridge_llama", "eval_llama",
                                        "sampler_steps_llama"], ops)
    assert res.success, err
    # the sampler-steps curve re-measures the bridge at l*; at its trained K the row is the
    # bridge's own measurement (test_extract checks that measuring again gives it back)
    curve = read_manifest(root / "llama" / "sampler_steps").info
    trained = read_manifest(root / "llama" / "bridge").info["metrics"]
    # (both sampler rules by default, each at every K)
    assert [(r["rule"], r["sampler_steps"]) for r in curve["rows"]] == [
        (rule, k) for rule in ("ancestral", "marginal") for k in (1, 2, 4)]
    assert curve["layer"] == trained["layer"]
    at_trained = curve["rows"][2]
    for key in ("recon_error", "hybrid_nll", "top1_agreement"):
        assert at_trained[key] == trained[key], key
    assert [r["from_bridge_metrics"] for r in curve["rows"]] == [False, False, True] + [False] * 3
    assert all(r["ms_per_token"] > 0 for r in curve["rows"])
    assert len({r["hybrid_nll"] for r in curve["rows"][:3]}) == 3
    # the eval rows carry both Gen.PPL conventions and intervals over samples
    ev = read_manifest(root / "llama" / "eval").info["rows"]
    for row in ev:
        assert row["gen_ppl_low"] <= row["gen_ppl"] <= row["gen_ppl_high"]
        assert row["gen_ppl_mean_low"] <= row["gen_ppl_mean"] <= row["gen_ppl_mean_high"]
        # MAUVE against held-out corpus text (NaN only where fewer than 2 samples had text)
        assert row["mauve"] != row["mauve"] or 0 <= row["mauve_low"] <= row["mauve"] <= row["mauve_high"] <= 1
        # one temperature, the start token, lengths, Gen.PPL at a common length L
        assert row["temperature"] == 1.0 and isinstance(row["start_token"], str)
        assert row["ppl_length"] == EVAL["length"] // 2 and row["mean_judge_length"] >= 0
        assert row["ppl_length_scored"] + row["ppl_length_short"] + row["empty_samples"] == 4
        assert len(row["sample_nll"]) == len(row["sample_tokens"]) == 4 - row["empty_samples"]
        if row["mauve"] == row["mauve"]:  # 4 samples a side: a diagnostic
            assert row["mauve_diagnostic"] is True and row["mauve_n_p"] == row["mauve_n_q"]

    # the temperature frontier (0.7, 0.85, 1): DiHAL and the backbone at each, kept
    # out of the rows (all at 1); the points at 1 are the main rows', the others sampled
    # and the held-out text, cut and scored like the samples, as the frontier's anchor
    front = read_manifest(root / "llama" / "eval").info["frontier"]
    assert [(p["role"], p["temperature"], p["sampled"]) for p in front] == [
        (role, t, t != 1.0) for role in ("dihal", "backbone") for t in (0.7, 0.85, 1.0)] + [
        ("reference", None, False)]
    anchor = front.pop()
    assert anchor["model"] == "held-out text" and anchor["n_samples"] <= 4
    assert anchor["gen_ppl"] > 0 and 0 <= anchor["diversity"] <= 1
    for p in front:
        main = next(r for r in ev if r["role"] == p["role"])
        assert p["model"] == main["model"] and "sample_nll" not in p
        assert p["gen_ppl_low"] <= p["gen_ppl"] <= p["gen_ppl_high"]
        assert (p["gen_ppl"] == main["gen_ppl"]) == (p["temperature"] == 1.0)
        assert (p["sample_seconds"] > 0) == p["sampled"]

    bridge = read_manifest(root / "llama" / "bridge").info["metrics"]
    for name in ("diffusion-lm", "sed", "ld4lg", "codar"):
        res, err = materialize(defs, inst, ["baseline_llama"], ops, partition=name)
        assert res.success, (name, err)
        m = read_manifest(root / "llama" / "baseline" / name)
        budget = m.info["row"]["budget"]
        assert abs(budget["denoiser_parameters"] / bridge["denoiser_parameters"] - 1) <= 0.10
        assert budget["train_tokens"] == bridge["train_tokens"]
        assert budget["sampler_steps"] == PROTOCOL["sampler_steps"]
        samples = (root / "llama" / "baseline" / name / "samples.jsonl").read_text().splitlines()
        assert len(samples) == 4 and all("text" in json.loads(s) for s in samples)
        # decoded at the common temperature; SED and Diffusion-LM round deterministically;
        # CoDAR's own 0.7 is one extra row
        row = m.info["row"]
        assert row["temperature"] == {"diffusion-lm": None, "sed": None}.get(name, 1.0)
        assert ("native" in row) == (name == "codar")
        if name == "codar":
            assert row["native"]["temperature"] == 0.7 and "gen_ppl" in row["native"]
        # its frontier: each temperature where the recipe has one (the common and the native
        # temperature's points are those rows'), else one point at no temperature
        got = [(p["temperature"], p["sampled"]) for p in row["frontier"]]
        assert got == ([(None, False)] if name in ("diffusion-lm", "sed") else
                       [(0.7, name != "codar"), (0.85, True), (1.0, False)]), name
        assert all("sample_nll" not in p for p in row["frontier"])

    res, err = materialize(defs, inst, ["comparison_llama", "full_training_llama", "report_llama"], ops)
    assert res.success, err
    checks = {e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data.passed
              for e in res.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    assert checks == {"budgets_matched": True, "names_its_inputs": True}
    rows = read_manifest(root / "llama" / "comparison").info["rows"]
    assert [r["model"] for r in rows][-5:] == ["diffusion-lm", "sed", "ld4lg", "codar",
                                               "codar (native T=0.7)"]
    # the comparison gathers the frontier: the eval's six points and its anchor, then each
    # baseline's
    cmp_front = read_manifest(root / "llama" / "comparison").info["frontier"]
    assert cmp_front[:7] == [*front, anchor] and [p["model"] for p in cmp_front[7:]] == [
        "diffusion-lm", "sed"] + ["ld4lg"] * 3 + ["codar"] * 3
    assert {r["temperature"] for r in rows if r["role"] != "baseline (native temperature)"} <= {
        1.0, None}  # the main table stays at one temperature
    # the control hybrids of the eval (the regression control at l* trained by the eval with
    # the full budget, though no sweep control exists here), and DiHAL at the chosen K where
    # that is not the protocol's
    ev_info = read_manifest(root / "llama" / "eval").info
    assert "regression" not in ev_info["controls"]
    chosen = [] if ev_info["controls"].get("chosen_is_protocol") else ["dihal (chosen K)"]
    assert [r["role"] for r in rows] == ["dihal", "backbone", *chosen, "control", "control",
                                         "control"] + ["baseline"] * 4 + [
        "baseline (native temperature)"]
    assert {r["ppl_length"] for r in rows[:-5]} == {3} and {r["ppl_length"] for r in rows[-5:]} == {4}
    controls = [f"regression (l={bridge['layer']}, full budget)",
                f"layer-drop (l={bridge['layer']})", f"ridge (l={bridge['layer']})"]
    assert [r["model"] for r in rows if r["role"] == "control"] == controls
    # each control's budget, as the comparison's budget columns show it: the regression the
    # bridge's network and budget in one step; layer-drop nothing learned; ridge a d x d map
    # (and bias) fitted once on every real training pair (BOS masked)
    ctl = {r["model"]: r for r in rows if r["role"] == "control"}
    got = [(ctl[c]["train_tokens"], ctl[c]["denoiser_parameters"], ctl[c]["sampler_steps"])
           for c in controls]
    assert got[0] == (bridge["train_tokens"], bridge["denoiser_parameters"], 1)
    assert got[1] == (0, 0, 0)
    ridge_tokens, ridge_params, ridge_steps = got[2]
    assert ridge_steps == 0 and 0 < ridge_tokens < bridge["train_tokens"]
    width = round(ridge_params ** 0.5)
    assert ridge_params == width * width + width  # weight (d, d) and bias (d,)
    assert ctl[controls[0]]["seq_len"] == rows[0]["seq_len"] and ctl[controls[1]]["seq_len"] is None
    for r in rows[1:-5]:
        assert r["dihal_verdict"] in ("above", "below", "not distinguishable")
    import pyarrow.parquet as pq

    written = pq.read_table(root / "llama" / "eval" / "eval.parquet").to_pylist()
    assert [r["dihal_verdict"] for r in written][1:] == [r["dihal_verdict"] for r in ev_info["rows"][1:]]
    # the cost table: the backbone, DiHAL at each K of the curve, the controls; the FLOP model
    # counted from the parts prices each hybrid as the direct count of its decode does
    from dihal.generation_inputs import FlopModel

    cost = ev_info["cost"]
    model = FlopModel.from_dict(cost["flop_model"])
    assert [c["model"] for c in cost["rows"]] == ["backbone"] + [
        f"DiHAL (l={bridge['layer']}, K={k})" for k in (1, 2, 4)] + controls
    assert cost["rows"][0]["flops_per_token"] == pytest.approx(model.backbone(), rel=1e-9)
    for c in cost["rows"][1:4]:
        assert c["flops_per_token"] == pytest.approx(model.hybrid(c["layer"], c["K"]), rel=1e-9)
        assert c["ms_per_token"] > 0
    assert rows[0]["train_tokens"] == bridge["train_tokens"] and rows[1]["train_tokens"] is None
    # DiHAL's rows carry the bridge's optimiser steps; the baselines are matched on tokens
    assert rows[0]["train_steps"] == bridge["train_steps"] > 0
    assert all(r["train_steps"] is None for r in rows if r["role"] == "baseline")
    full = read_manifest(root / "llama" / "full_training").info["rows"]
    b = read_manifest(root / "llama" / "bridgeability").info
    assert {r["role"]: r["layer"] for r in full} == {"geometry l*": b["l_star"],
                                                     "oracle": b["oracle"], "worst": b["worst"]}
    assert len({r["train_tokens"] for r in full}) == 1  # one full budget for all three
    # in the optimiser steps the full-training bridges took (bridge's protocol: one pass more)
    assert {r["train_steps"] for r in full} == {read_manifest(root / "llama" / "bridge").info[
        "metrics"]["train_steps"]}
    # each role at the protocol's K and, unless it is the same sampler, the chosen (rule, K)
    sampler = read_manifest(root / "llama" / "full_training").info["sampler"]
    assert sampler["chosen"] == ev_info["controls"]["chosen"]
    assert sampler["chosen_is_protocol"] == bool(ev_info["controls"].get("chosen_is_protocol"))
    labels = [("protocol", PROTOCOL["sampler_steps"], "ancestral")] + (
        [] if sampler["chosen_is_protocol"] else
        [("chosen on validation", sampler["chosen"]["sampler_steps"], sampler["chosen"]["rule"])])
    assert [(r["role"], r["sampler"], r["sampler_steps"], r["rule"]) for r in full] == [
        (role, *label) for role in ("geometry l*", "oracle", "worst") for label in labels]
    # the eval drew l*'s bridge with the same config: l*'s rows are its samples, not new ones
    ev_dihal = next(r for r in ev_info["rows"] if r["role"] == "dihal")
    for r in full:
        assert r["from_eval"] == (r["layer"] == bridge["layer"])
        if r["from_eval"] and r["sampler"] == "protocol":
            assert r["gen_ppl"] == ev_dihal["gen_ppl"]
    # two training seeds per role: their spread (the kept seed within it)
    for r in full:
        assert r["n_seeds"] == 2
        for m in ("val_loss", "t1_loss", "hybrid_nll"):
            assert r[f"{m}_seed_min"] <= r[m] <= r[f"{m}_seed_max"]
            assert r[f"{m}_seed_sd"] >= 0
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
    full = (root / "llama" / "full_training" / "samples.jsonl").read_text().splitlines()
    kept = [json.loads(s) for s in full]  # every role's samples, with their judge scores
    assert {(s["role"], s["sampler"]) for s in kept} >= {("geometry l*", "protocol")}
    assert all({"index", "text", "nll", "tokens", "layer"} <= set(s) for s in kept)
    for text in (html, md):
        for needle in ("Locate", "bridgeability", "Full training", "diffusion-lm", "codar",
                       "depth (-l)", "S_l (robust)", "-cond_distance",
                       "ridge_r2", "twonn_id", "What the sampler", "mean of samples [95 %]",
                       "MAUVE [95 %] (diagnostic)", "regression control",
                       "resamples picking l*", "diversity (spaCy, as LD4LG)",
                       "mean length (judge tokens)", "drawn unconditionally from the",
                       "samples per model for 80% power at a Gen.PPL ratio of 1.25",
                       "minus depth", "The pre-registered primary test",
                       "smallest attainable p", "held-out text",
                       "3a. DiHAL against its control hybrids", "3b. Cost per generated token",
                       "max K cheaper", "Gen.PPL DiHAL / this [paired 95 %]",
                       "3c. Gen.PPL against diversity across temperatures",
                       "on the frontier", "none (deterministic rounding)",
                       "Each full-training bridge was trained under 2 seeds",
                       f"{controls[0]}, from eval", "K=4 ancestral (protocol)"):
            assert needle in text, needle
    assert "5. Across backbones" in md and "Only llama has been materialised here" in md
    # the HTML embeds its plots; the Markdown links each to a PNG beside it, in the manifest
    assert "data:image/png;base64," in html and "data:image" not in md
    figures = re.findall(r"!\[[^]]*\]\((figure_\d+\.png)\)", md)
    assert len(figures) >= 5 and len(set(figures)) == len(figures)
    recorded = read_manifest(root / "llama" / "report").files
    for name in figures:
        assert (root / "llama" / "report" / name).read_bytes().startswith(b"\x89PNG") and name in recorded
    # it suggests an embedded backbone other than itself (gemma3's report once suggested gemma3)
    assert "`python -m pipeline.main --backbone gemma3`" in md
    assert {another_backbone(b) for b in ("gemma3", "smollm2")} == {"smollm2", "gemma3"}

    # a second backbone's artifacts appear (copied, as if materialised): the report is made
    # again (its fingerprint includes them) and its cross-backbone table has both lines
    import shutil

    for stage in ("layer_score", "bridgeability", "eval"):
        shutil.copytree(root / "llama" / stage, root / "qwen" / stage)
    before = read_manifest(root / "llama" / "report").fingerprint
    res, err = materialize(defs, inst, ["report_llama"], {})
    assert res.success, err
    assert read_manifest(root / "llama" / "report").fingerprint != before
    md = (root / "llama" / "report" / "report.md").read_text()
    across = md[md.index("5. Across backbones"):md.index("6. Sample texts")]
    assert "llama, qwen" in across and "Only llama" not in across
    assert across.count(f"| {b['oracle']} |") >= 2  # both lines name the (same) oracle
    # a damaged artifact of the other backbone is never read as data
    (root / "qwen" / "bridgeability" / "spearman.parquet").write_bytes(b"damaged")
    res, err = materialize(defs, inst, ["report_llama"], {})
    assert not res.success and "qwen" in err[0] and "damaged" in err[0]


def test_cross_backbone_tables_line_up_backbones_and_predictors():
    from dihal.inputs import BackboneSummary
    from dihal.report.cross_backbone import cross_backbone_tables

    def rho(p, v, lo, hi, vs=""):
        return {"predictor": p, "spearman_vs_-val_loss": v, "low_vs_-val_loss": lo,
                "high_vs_-val_loss": hi, "vs_depth_-val_loss": vs}

    smol = {"backbone": "smollm2", "selected": {"none": 1, "rms": 3}, "judge": "gemma3-270m",
            "bridgeability": {"oracle": 1, "worst": 25, "swept_layers": [1, 2, 3],
                              "spearman": [rho("depth (-l)", 0.77, 0.11, 1.0), rho("ridge_r2", 0.7, 0.2, 0.9)]},
            "eval_rows": [{"role": "dihal", "gen_ppl": 894.8, "gen_ppl_low": 700.0, "gen_ppl_high": 1100.0},
                          {"role": "backbone", "gen_ppl": 114.2}]}
    gem = {"backbone": "gemma3", "selected": {"none": 4, "robust": 9}, "judge": None, "eval_rows": None,
           "bridgeability": {"oracle": 2, "worst": 17, "swept_layers": [1, 2],
                             "spearman": [rho("depth (-l)", 0.5, 0.1, 0.9), rho("twonn_id", -0.9, -1.0, -0.8, "below")]}}
    main, spearman = cross_backbone_tables([BackboneSummary.from_dict(s) for s in (smol, gem)])
    assert main[0] == {"backbone": "smollm2", "l* (none)": 1, "l* (rms)": 3, "l* (robust)": "",
                       "oracle": 1, "worst": 25, "swept layers": 3,
                       "hybrid Gen.PPL [95 %]": "894.8 [700.0, 1100.0]",
                       "backbone Gen.PPL [95 %]": "114.2", "judge": "gemma3-270m"}
    assert main[1]["hybrid Gen.PPL [95 %]"] == "not evaluated" and main[1]["l* (robust)"] == 9
    assert spearman == [
        {"predictor": "depth (-l)", "smollm2": "0.77 [0.11, 1.00]", "gemma3": "0.50 [0.10, 0.90]"},
        {"predictor": "ridge_r2", "smollm2": "0.70 [0.20, 0.90]", "gemma3": "not computed"},
        {"predictor": "twonn_id", "smollm2": "not computed", "gemma3": "-0.90 [-1.00, -0.80] (below)"},
    ]
