"""The report's typed inputs (dihal.inputs): each family reads what storage reads back, older
artifacts' tables and infos included (a column or key added later is optional)."""

import math
from dataclasses import replace

import pytest

from dihal.config import BridgeProtocol, GeometryConfig
from dihal.generation_inputs import (
    ChosenSampler,
    CompareInputs,
    CostTable,
    CurvePoint,
    EvaluateInputs,
    FullTrainingInputs,
    FullTrainingRow,
    OrderInK,
    RolePair,
    SamplerChoice,
    SamplingSetting,
)
from dihal.inputs import (
    BackboneInfo,
    BackboneSummary,
    BridgeabilitySummary,
    LayerScoreSummary,
    OracleWorst,
    Picks,
    ReplaceInputs,
    SeedSpread,
    StageConfigs,
)
from dihal.report.build import build_report
from dihal.report.inputs import ReportInputs
from dihal.rows import ABSENT, BridgeMetrics
from dihal.uncertainty import PRIMARY_UNDECIDABLE
from tests.tiny import (
    TINY_JUDGE_INFO,
    bridge_metrics,
    curve_point,
    geometry_row,
    report_inputs,
    report_raw,
    report_raw_with_cost,
)


def test_layer_score_summary_without_the_stability_checks():
    old = {"l_star": 2, "selected": {"none": 1, "robust": 2},
           "spearman_vs_depth": {"none": 0.3, "robust": None}, "stability": {},
           "sequence_stability": {}}
    info = LayerScoreSummary.from_dict(old)
    assert info.to_dict() == old
    assert (info.l_star, info.selected, info.stability) == (2, {"none": 1, "robust": 2}, {})
    seq = info.sequence_stability
    assert (seq.bootstrap, seq.split_half, seq.seconds) == (None, None, None)
    md = build_report(report_inputs(score=old)).markdown
    assert "l*'s stability over resampled sequences was not computed" in md


def test_layer_score_info_reads_the_stability_checks():
    info = LayerScoreSummary.from_dict({
        "l_star": 2, "selected": {"robust": 2}, "spearman_vs_depth": {"robust": 0.2},
        "stability": {"robust": {"l_star": 2, "same": 0.9, "low": 1, "high": 3,
                                 "replicates": 10, "dropped": 0,
                                 "picks": {"2": 0.9, "1": 0.05, "3": 0.03, "0": 0.01,
                                           "4": 0.01}}},
        "sequence_stability": {"norm": "robust", "sequences": 8, "seconds": 1.5,
                               "bootstrap": None,
                               "split_half": {"splits": [{"l_star_a": 2, "l_star_b": 3,
                                                          "agree": False}],
                                              "agreement": 0.0}}})
    robust = info.stability["robust"]
    assert isinstance(robust, Picks) and (robust.same, robust.replicates) == (0.9, 10)
    assert robust.shares() == "2: 90%, 1: 5%, 3: 3%, 0: 1%"  # the four most picked
    # as a manifest keeps them, by key: still the most picked first
    by_key = Picks(2, 0.4, 1, 12, 10, {1: 0.1, 10: 0.2, 11: 0.05, 12: 0.05, 2: 0.4, 3: 0.2})
    assert by_key.shares() == "2: 40%, 3: 20%, 10: 20%, 1: 10%"
    seq = info.sequence_stability
    assert seq.bootstrap is None and seq.split_half.splits == [(2, 3)]
    assert (seq.sequences, seq.seconds, seq.split_half.agreement) == (8, 1.5, 0.0)
    # written back as it was read (the picks keyed by layer, as the stage made them)
    back = info.to_dict()
    assert back["stability"]["robust"]["picks"] == {2: 0.9, 1: 0.05, 3: 0.03, 0: 0.01, 4: 0.01}
    assert back["sequence_stability"]["split_half"]["splits"] == [
        {"l_star_a": 2, "l_star_b": 3, "agree": False}]


def test_locate_inputs_from_the_report_inputs():
    raw = report_raw()
    loc = ReportInputs.from_dicts(**raw).locate
    assert loc.geometry[1] == geometry_row(1, "none", m_curv=0.1, m_mono=0.2)
    assert loc.scores[0].candidate is False and loc.scores[2].S == 1.0
    assert loc.predictors == []
    assert loc.score.selected == {"none": 1, "robust": 2}


def test_bridgeability_info_needs_its_primary_test_and_reads_one_seed_and_no_controls():
    raw = report_raw()["bridgeability"]
    info = BridgeabilitySummary.from_dict(raw)
    assert info.primary.verdict == PRIMARY_UNDECIDABLE and info.primary.layers == 3
    assert (info.seeds, info.regression) == (None, [])
    assert info.oracle_by.chosen_by == "hybrid_nll" and info.spearman[0].predictor == "S_l (robust)"
    # what an older bridgeability stage wrote is stale (storage refuses it): never guessed at
    with pytest.raises(ValueError, match="primary test"):
        BridgeabilitySummary.from_dict({**raw, "primary": None})
    for key in ("primary", "regression", "oracle_by", "seeds"):
        with pytest.raises(KeyError, match=key):
            BridgeabilitySummary.from_dict({k: v for k, v in raw.items() if k != key})
    layers = [bridge_metrics(1, val_loss=0.5, hybrid_nll=3.0)]
    x = report_inputs(sweep_layers=layers)
    assert x.bridges.layers == layers
    # a sweep table row is the stage's BridgeMetrics, whole: one that lacks a measure (an
    # older stage's, before t1_loss) or has a stranger is refused, not filled with None
    row = layers[0].to_dict()
    assert BridgeMetrics.from_dict(row) == layers[0]
    for bad, word in (({k: v for k, v in row.items() if k != "t1_loss"}, "missing"),
                      ({**row, "extra": 1}, "unknown")):
        with pytest.raises(ValueError, match=f"{word} \\['(t1_loss|extra)'\\]"):
            BridgeMetrics.from_dict(bad)
    md = build_report(x).markdown
    assert "The primary test, fixed before any bridge was trained" in md
    assert "trained under one seed" in md
    assert ("the oracle layer by hybrid NLL is 3 and the worst 1 (full training follows these; "
            "chosen and judged on the same held-out sequences: too few to split); by "
            "validation loss, 3 and 1: the measures agree") in md
    assert "| 1 | 1 | 0.5 | 0.6 | 0.5 | 3 | 2 | 0.7 | 4 | 1 |" in md  # the sweep table


def test_bridgeability_info_reads_the_oracle_by_measure_and_the_seeds():
    info = BridgeabilitySummary.from_dict({
        **report_raw()["bridgeability"],
        "oracle_by": {"by": {"hybrid_nll": {"oracle": 3, "worst": 1},
                             "val_loss": {"oracle": 2, "worst": 1}},
                      "chosen_by": "hybrid_nll", "oracle_disagree": True,
                      "worst_disagree": False},
        "seeds": {"n_seeds": 2, "oracle": {"oracle": 3, "oracle_share": 0.7,
                                           "picks": {"3": 0.7, "1": 0.3}},
                  "replicates": 1, "replicate_seconds": 12.0, "bridge_seconds": 30.0,
                  "spread": {"val_loss": [{"layer": 1, "n_seeds": 2, "mean": 1.0, "sd": 0.1,
                                           "min": 0.9, "max": 1.1},
                                          {"layer": 2, "n_seeds": 1, "mean": 2.0,
                                           "sd": float("nan"), "min": 2.0, "max": 2.0}]}}})
    assert info.oracle_by.by["val_loss"] == OracleWorst(2, 1)
    assert info.oracle_by.oracle_disagree and not info.oracle_by.worst_disagree
    seeds = info.seeds
    assert seeds.counts() == {1: 2, 2: 1} and seeds.oracle.l_star_rank is None
    assert seeds.oracle.picks == {3: 0.7, 1: 0.3}  # the manifest's JSON keys read as layers
    assert seeds.replicates == 1 and seeds.spread["val_loss"][0].sd == 0.1
    stored = BridgeProtocol(sampler_steps=4).to_dict()  # as the oracle's bridge stores it
    replace = ReplaceInputs.from_dicts(report_raw()["bridgeability"], [], stored)
    assert replace.protocol == BridgeProtocol(sampler_steps=4)
    assert replace.protocol.to_dict() == stored  # shown as stored
    with pytest.raises(TypeError, match="steps"):  # a config of another protocol is refused
        ReplaceInputs.from_dicts(report_raw()["bridgeability"], [], {"steps": 4})


def test_evaluate_inputs_read_how_the_eval_sampled_and_an_eval_without_its_cost_table():
    setting = {"cpu_threads": 2, "cpu_kernels": "AVX2", "start_token": "<s>", "start_token_id": 1}
    ev = {"rows": [{"model": "dihal", "role": "dihal", "gen_ppl": 50.0, **setting},
                   {"model": "backbone", "role": "backbone", "gen_ppl": 30.0, **setting}],
          "judge": TINY_JUDGE_INFO}
    curve = {"layer": 2, "rows": [curve_point()]}
    e = EvaluateInputs.from_dicts(ev, curve)
    assert (e.cost, e.controls, e.curve_layer) == (None, SamplerChoice(), 2)
    assert e.setting == SamplingSetting(2, "AVX2", "<s>", 1)
    assert e.curve == [CurvePoint(1, "ancestral", 0.5, 3.0, 2.5, 0.5, 1.0, 0.1, 4, False)]
    assert e.rows[1].gen_ppl.value == 30.0
    md = build_report(report_inputs(evaluation=ev, sampler_curve=curve)).markdown
    assert "| CPU kernels while sampling (torch's CPU capability) | AVX2 |" in md
    assert "start token '<s>' (id 1)" in md
    # an eval row without them was made by an older eval stage, which storage refuses as stale
    # (Artifact.check_version): the reader does not guess
    for key in setting:
        rows = [{k: v for k, v in r.items() if k != key} for r in ev["rows"]]
        with pytest.raises(KeyError, match=key):
            EvaluateInputs.from_dicts({**ev, "rows": rows}, curve)


def test_the_cost_table_finds_its_rows_and_reads_back_as_stored():
    cost = report_raw_with_cost(3.0)["evaluation"]["cost"]
    table = CostTable.from_dict(cost)
    assert table.flop_length == 16 and table.order_in_k == OrderInK([4], True, [], True)
    assert table.row("backbone").flops_per_token == 45e6 and table.row("sed") is None
    assert table.dihal(4, 2).model == "DiHAL (l=2, K=4)" and table.dihal(4, 3) is None
    assert table.rows[0].ms_per_token_low is None and not table.rows[0].is_dihal
    order = {"K": [1, 2], "monotone": False, "inversions": [[1, 2]], "within_noise": True}
    assert CostTable.from_dict({**cost, "flop_length": 64, "order_in_k": order}) == replace(
        table, flop_length=64, order_in_k=OrderInK([1, 2], False, [(1, 2)], True))
    choice = SamplerChoice.from_dict({"protocol_sampler_steps": 4, "chosen_is_protocol": False,
                                      "chosen": {"rule": "marginal", "sampler_steps": 2,
                                                 "hybrid_nll": 2.9}})
    assert choice.chosen == ChosenSampler("marginal", 2, 2.9) and choice.regression is None
    # written back as stored: full training's flag always, the eval's only where true
    for stored in ({"protocol_sampler_steps": 4, "chosen": None, "chosen_is_protocol": False},
                   {"protocol_sampler_steps": 4, "chosen": {"rule": "ancestral", "sampler_steps": 4,
                                                    "hybrid_nll": 3.0}},
                   {"protocol_sampler_steps": 4, "chosen": None, "regression": "no control"}):
        assert SamplerChoice.from_dict(stored).to_dict() == stored
    assert CostTable.from_dict(cost).to_dict() == {
        **cost, "rows": [{"flops_from": None, "ms_per_token_low": None,
                          "ms_per_token_high": None, **r} for r in cost["rows"]]}


def test_compare_inputs_of_a_comparison_before_the_frontier():
    raw = report_raw()["comparison"]
    c = CompareInputs.from_dict({"rows": raw["rows"]})
    assert (c.missing, c.frontier, c.frontier_points()) == ([], [], [])
    assert [r.model for r in c.rows] == ["dihal", "backbone", "sed", "codar"]
    point = {"model": "dihal", "role": "dihal", "temperature": 0.7, "gen_ppl": 40.0,
             "diversity": 0.4}
    with_frontier = CompareInputs.from_dict({**raw, "missing": ["ld4lg"], "frontier": [point]})
    assert with_frontier.frontier_points() == [point] and with_frontier.missing == ["ld4lg"]
    assert with_frontier.frontier[0].temperature == 0.7


def test_full_training_rows_read_their_columns_seeds_and_paired_roles():
    """A full-training row reads each column it has (ABSENT: one it has not, which it gives
    back as it was), the spread over seeds where it has a mean and the paired test of the
    roles before it where tested; a column no full-training row has is refused by name."""
    bare = FullTrainingRow.from_dict({"role": "oracle", "layer": 3, "sampler": "protocol",
                                      "val_loss": 0.5, "hybrid_nll": 3.0, "gen_ppl": 40.0})
    assert (bare.sampler_steps, bare.from_eval, bare.n_seeds) == (ABSENT, ABSENT, ABSENT)
    assert (bare.seed_spread, bare.pairs, bare.hybrid_nll_judge) == ({}, {}, ABSENT)
    assert bare.generation.gen_ppl.value == 40.0 and bare.measures()["val_loss"] == 0.5
    assert bare.measures()["n_seeds"] is None
    assert bare.to_dict() == {"role": "oracle", "layer": 3, "val_loss": 0.5, "hybrid_nll": 3.0,
                              "sampler": "protocol", "gen_ppl": 40.0}
    row = FullTrainingRow.from_dict({
        "role": "oracle", "layer": 3, "sampler": "chosen on validation", "sampler_steps": 2,
        "rule": "marginal", "from_eval": True, "n_seeds": 2,
        "val_loss_seed_mean": 1.5, "val_loss_seed_sd": 0.25, "val_loss_seed_min": 1.25,
        "val_loss_seed_max": 1.75, "t1_loss_seed_mean": math.nan, "t1_loss_seed_sd": None,
        "t1_loss_seed_min": math.nan, "t1_loss_seed_max": math.nan,
        "hybrid_nll_seed_mean": None, "hybrid_nll_seed_sd": None, "hybrid_nll_seed_min": None,
        "hybrid_nll_seed_max": None,
        "log_ppl_diff_vs_l_star": 0.4, "log_ppl_diff_low_vs_l_star": 0.1,
        "log_ppl_diff_high_vs_l_star": 0.7, "p_vs_l_star": 0.01, "p_holm_vs_l_star": 0.02,
        "verdict_vs_l_star": "above", "pairs_vs_l_star": 60})
    assert row.seed_spread["val_loss"] == SeedSpread(1.5, 0.25, 1.25, 1.75)
    assert math.isnan(row.seed_spread["t1_loss"].mean) and "hybrid_nll" not in row.seed_spread
    assert row.pairs == {"geometry l*": RolePair(0.4, 0.1, 0.7, 0.01, 0.02, "above", 60)}
    assert (row.sampler, row.sampler_steps, row.rule, row.from_eval) == (
        "chosen on validation", 2, "marginal", True)
    with pytest.raises(ValueError, match="log_ppl_diff_vs_worst"):  # no test against the worst
        FullTrainingRow.from_dict({"role": "worst", "layer": 1, "log_ppl_diff_vs_worst": 0.1})
    full = FullTrainingInputs.from_dicts([bare.to_dict(), {
        "role": "worst", "layer": 1, "sampler": "chosen on validation"}], None)
    assert [r.role for r in full.trained()] == ["oracle"] and full.sampler == SamplerChoice()


def test_backbone_summary_of_a_backbone_not_evaluated_and_the_backbone_info():
    b = report_raw()["bridgeability"]
    s = BackboneSummary.from_dict({"backbone": "qwen", "selected": {"robust": 2},
                                   "bridgeability": b, "eval_rows": None, "judge": None})
    assert (s.oracle, s.worst, s.swept_layers, s.eval_rows, s.by_role()) == (3, 1, [1, 2, 3],
                                                                             None, {})
    assert s.spearman[0].predictor == "S_l (robust)"
    rows = report_raw()["evaluation"]["rows"]
    evaluated = BackboneSummary.from_dict({"backbone": "llama", "selected": {"robust": 2},
                                           "bridgeability": b, "eval_rows": rows,
                                           "judge": "t/tiny"})
    assert set(evaluated.by_role()) == {"dihal", "backbone"} and evaluated.judge == "t/tiny"
    info = BackboneInfo.from_dict({**report_raw()["backbone_info"], "dtype": "float32"})
    assert (info.hf_id, info.n_layers, info.hidden_size) == ("t/tiny", 4, 32)


def test_stage_configs_quote_their_settings_and_keep_every_stage():
    configs = {**report_raw()["configs"], "sequences": {"seq_len": 16}}
    c = StageConfigs.from_dict(configs)
    assert c.stages == configs and c.primary_norm == "robust"
    assert c.geometry == GeometryConfig(**configs["geometry"]) and c.eval.n_samples == 4
    assert (c.geometry.n_tokens, c.geometry.n_resamples) == (64, 20)
    with pytest.raises(TypeError, match="n_tokenz"):  # a config of no such field is refused
        StageConfigs.from_dict({**configs, "geometry": {"n_tokenz": 64}})
