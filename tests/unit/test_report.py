"""The report's opening answers, each way each can come out, on hand-made inputs; and the
report built from hand-made inputs opens on them, with one proxy table per normalisation."""

import re

import pytest

from dihal.config import BridgeProtocol
from dihal.generation_inputs import FullTrainingInputs, FullTrainingRow, SamplerChoice
from dihal.generation_rows import GenerationRow, generation_rows
from dihal.inputs import OracleBy, SeedInfo
from dihal.report.bridgeability import answer_bridge_vs_regression, answer_geometry_vs_depth
from dihal.report.build import ANSWERS, build_report
from dihal.report.common import BRIDGEABILITY, CONTROLS, COST, GENERATION, LOCATE, REGRESSION
from dihal.report.controls import answer_controls, controls_sentence
from dihal.report.cost import answer_cost, break_even_sentence, timing_sentence
from dihal.report.generation import answer_generation
from dihal.report.locate import answer_l_star
from dihal.rows import DEPTH, PrimaryTest, RegressionRow, Spearman, SpearmanRow
from tests.tiny import gen_row as _gen
from tests.tiny import png, report_raw, report_raw_with_cost, with_bridgeability, with_eval_rows
from tests.tiny import report_inputs as inputs
from tests.tiny import report_inputs_with_cost as _with_cost
from tests.tiny import spearman_row as _spearman

PNG = png()


def _regression(layer, bridge_nll, control_nll):
    return RegressionRow(layer, 0.5, 0.6, bridge_nll, control_nll, 0.4, 0.3, 0.2).to_dict()


def test_l_star_with_and_without_its_stability():
    text, anchor = answer_l_star(inputs())
    assert text == "Geometry selects l* = 2 (S_l under robust)." and anchor == LOCATE
    firm = {"robust": {"l_star": 2, "same": 0.95, "replicates": 20, "low": 2, "high": 3,
                       "picks": {2: 0.95}}}
    text, _ = answer_l_star(inputs(stability=firm))
    assert ("95% of 20 bootstrap resamples of the tokens pick it again (95 % range [2, 3]; "
            "tokens only, which overstates it)") in text


@pytest.mark.parametrize(("agreement", "says"), [
    (1.0, "on two disjoint halves of the sequences l* is 2 and 2 (the halves agree)"),
    (0.0, "on two disjoint halves of the sequences l* is 2 and 3 (the halves disagree)"),
    (0.5, "(agreeing in 50% of splits)"),
])
def test_l_star_over_resampled_sequences_and_split_halves(agreement, says):

    firm = {"robust": {"l_star": 2, "same": 0.95, "replicates": 20, "low": 2, "high": 3,
                       "picks": {2: 0.95, 3: 0.05}}}
    splits = [{"l_star_a": 2, "l_star_b": 2 if agreement == 1 else 3,
               "agree": agreement == 1}] + ([{"l_star_a": 2, "l_star_b": 2, "agree": True}]
                                            if agreement == 0.5 else [])
    seq = {"norm": "robust", "sequences": 8, "seconds": 3.0,
           "bootstrap": {"l_star": 2, "same": 0.6, "replicates": 10, "low": 1, "high": 3,
                         "picks": {2: 0.6, 1: 0.3, 3: 0.1}},
           "split_half": {"splits": splits, "agreement": agreement}}
    x = inputs(score={**report_raw(stability=firm)["score"], "sequence_stability": seq})
    text, _ = answer_l_star(x)
    # the answer reads the whole-sequence resamples (not the token bootstrap); the section
    # has the split halves
    assert text == ("Geometry selects l* = 2 (S_l under robust); 60% of 10 resamples of whole "
                    "sequences pick it again (95 % range [1, 3]).")
    md = build_report(x).markdown
    assert says in md[md.index("## 1. Locate"):]
    assert "| whole sequences resampled (of 8; all recomputed) | 2 | 10 | 60% | [1, 3] |" in md
    assert "| tokens resampled (neighbourhoods, preconditioner fixed) | 2 | 20 | 95% |" in md
    assert "| split halves of the sequences | 2 |" in md
    # not computed: the report says so and the answer is unchanged
    assert "sequence_resamples and split_halves are 0" in build_report(inputs()).markdown


def _primary(p, p_min, *, p_min_all=0.0006, needed=14, ties=0.43):
    """A primary test as bridgeability writes it (dihal.rows.PrimaryTest), its verdict by the
    rule of dihal.uncertainty.primary_test."""
    from dihal.rows import PrimaryTest
    from dihal.uncertainty import PRIMARY_BETTER, PRIMARY_NOT, PRIMARY_UNDECIDABLE

    verdict = (PRIMARY_UNDECIDABLE if p_min >= 0.05 else PRIMARY_BETTER if p < 0.05 else
               PRIMARY_NOT)
    return PrimaryTest("S_l (robust)", "hybrid_nll", 0.9, 0.7, 0.2, 0.05, p, p_min, ties, 0.0,
                       10000, 3, 0.05, verdict, p_min_all, 29, needed).to_dict()


def _with_primary(x, primary):
    return with_bridgeability(x, primary=PrimaryTest.from_dict(primary))


@pytest.mark.parametrize(("p", "p_min", "answer", "says", "never"), [
    (0.004, 0.001, "Yes: geometry predicts the bridges' hybrid NLL better than depth over 3 "
                   "layers", "geometry predicts the bridges' hybrid NLL better than depth does "
                   "(p < 0.05)", "cannot"),
    (0.30, 0.001, "Not shown: geometry does not predict the bridges' hybrid NLL significantly "
                  "better than depth over 3 layers, though the design could have shown it",
     "geometry and depth cannot be told apart at these 3 layers (p >= 0.05), though "
     "the design could have told them apart (its smallest p is under 0.05)",
     "design cannot decide"),
    (0.43, 0.43, "Undecided: at these 3 layers no outcome could tell geometry from depth",
     "the design cannot decide: at these 3 swept layers no outcome could have told "
     "geometry and depth apart (smallest attainable p >= 0.05); over all 29 "
     "candidate layers the floor is 0.0006, and 14 evenly spread swept layers bring "
     "it under 0.05", "cannot be told apart"),
])
def test_geometry_against_depth_each_way_of_the_primary_test(p, p_min, answer, says, never):
    """The answer is the pre-registered primary test's, with the smallest p its design can
    reach; "not shown" only where the design could have shown it. The section reads it out
    whole."""
    x = _with_primary(inputs(), _primary(p, p_min))
    text, anchor = answer_geometry_vs_depth(x)
    assert text.startswith(answer) and anchor == BRIDGEABILITY
    assert (f"Spearman 0.90 against depth's 0.70, difference +0.20 (one-sided 95% lower bound "
            f"+0.05), p = {p:.3g}, smallest attainable {p_min:.2g}") in text
    assert "Exploratory" not in text
    assert (text.endswith("14 evenly spread layers could).")) is (p_min >= 0.05)
    md = build_report(x).markdown
    section = md[md.index("## 2. Does the score"):]
    assert says in section and never not in section[:section.index("Exploratory")]
    assert (f"p = {p:.3g}; the smallest p these layers allow is {p_min:.3g} (in 43% of "
            "resamples S_l (robust) and depth rank the drawn layers alike") in section
    assert (f"| S_l (robust) | -hybrid_nll | 0.900 | 0.700 | +0.200 | +0.050 | {p:.3g} | "
            f"{p_min:.3g} | 43.0% | 0.0006 (29 layers) |") in md


def test_primary_test_says_when_no_sweep_of_the_backbone_can_decide():
    x = _with_primary(inputs(), _primary(0.5, 0.4, p_min_all=0.2, needed=None))
    assert answer_geometry_vs_depth(x)[0].endswith("; no sweep of this backbone could).")
    assert ("over all 29 candidate layers the floor is 0.2, still not under 0.05: no sweep of "
            "this backbone can decide it") in build_report(x).markdown


def _paired_spearman(predictor, rho, verdicts, diff=0.3, p_holm=0.01):
    """A predictor's row as bridgeability 3 writes it: the paired test per target."""
    return SpearmanRow(predictor, {t: Spearman(rho, rho - 0.2, rho + 0.1, v, diff, diff - 0.1,
                                               diff + 0.1, p_holm / 3, p_holm, 0.4, 0.1, 0.7)
                                   for t, v in verdicts.items()}).to_dict()


@pytest.mark.parametrize("standing", ["above", "below", "not distinguishable"])
def test_the_paired_tests_are_read_as_exploratory(standing):
    """The other predictor x target standings (the paired difference, Holm-corrected) are
    reported as exploratory beside the primary test."""
    verdicts = {"val_loss": standing, "recon_error": "not distinguishable",
                "hybrid_nll": "below" if standing == "above" else "above"}
    x = _with_primary(inputs(spearman=[_paired_spearman("S_l (robust)", 0.6, verdicts),
                                       _spearman(DEPTH, 0.4, 0.1, 0.7)]), _primary(0.3, 0.001))
    md = build_report(x).markdown
    text = md[md.index("## 2. Does the score"):]
    assert (f"Exploratory, not the primary test (two-sided, Holm over 3 predictor x target "
            f"tests): against -val loss S_l (robust) is {standing} depth (difference +0.30 "
            "[+0.20, +0.40])") in text
    assert "above depth on some target: S_l (robust)" in text
    assert "Holm's correction over all 3 predictor x target tests" in md
    assert ("| S_l (robust) | -val_loss | 0.60 [0.40, 0.70] | +0.30 [+0.20, +0.40] | 0.00333 | "
            f"0.01 | {standing} | +0.40 [+0.10, +0.70] |") in md
    above = "1 above depth (S_l (robust))" if standing == "above" else "none above depth"
    assert f"against -val loss, {above}" in md


@pytest.mark.parametrize(("disagree", "says"), [
    ((True, False), "the measures disagree on the oracle"),
    ((True, True), "the measures disagree on the oracle and the worst layer"),
    ((False, False), "the measures agree"),
])
def test_bridgeability_names_the_oracle_by_both_measures(disagree, says):
    x = inputs()
    b = {"oracle_by": {
        "by": {"hybrid_nll": {"oracle": 3, "worst": 1},
               "val_loss": {"oracle": 2 if disagree[0] else 3, "worst": 2 if disagree[1] else 1}},
        "chosen_by": "hybrid_nll", "oracle_disagree": disagree[0],
        "worst_disagree": disagree[1]}}
    md = build_report(with_bridgeability(x, oracle_by=OracleBy.from_dict(b["oracle_by"]))).markdown
    assert ("the oracle layer by hybrid NLL is 3 and the worst 1 (full training follows these; "
            "chosen and judged on the same held-out sequences: too few to split); by "
            "validation loss") in md and says in md
    # chosen on the first half of the held-out sequences: the report says the second judges
    b["oracle_by"]["by"]["hybrid_nll_select"] = {"oracle": 2, "worst": 1}
    b["oracle_by"]["chosen_by"] = "hybrid_nll_select"
    md = build_report(with_bridgeability(x, oracle_by=OracleBy.from_dict(b["oracle_by"]))).markdown
    assert ("the oracle layer by hybrid NLL on the first half of the held-out sequences is 2 and "
            "the worst 1 (full training follows these, and the second half, which did not "
            "choose them, judges them); on all held-out sequences, 3 and 1; by validation "
            "loss") in md


def test_geometry_against_depth_names_rivals_above_depth():
    x = inputs(spearman=[_spearman("S_l (robust)", 0.5, 0.2, 0.8, "not distinguishable"),
                         _spearman("-cond_distance", 0.9, 0.85, 0.95, "above"),
                         _spearman(DEPTH, 0.4, 0.1, 0.7)])
    assert "above depth on some target: -cond_distance." in build_report(x).markdown


@pytest.mark.parametrize(("nlls", "says"), [
    ([(1, 2.0, 3.0), (2, 2.0, 3.0)], "Yes: the diffusion bridge beats the ridge map (closed-form, "
                                     "a context-free linear lower bar) on hybrid NLL at all 2 "
                                     "layers; at l* = 2, 2.000 against 3.000."),
    ([(1, 3.0, 2.0), (2, 3.0, 2.0)], "No: the ridge map (closed-form, a context-free linear lower "
                                     "bar) is at least as good as the diffusion bridge on hybrid "
                                     "NLL at all 2 layers, so the bridges are undertrained or too "
                                     "small"),
    ([(1, 2.0, 3.0), (3, 3.0, 2.0)], "Not everywhere: the diffusion bridge beats the ridge map "
                                     "(closed-form, a context-free linear lower bar) on hybrid NLL "
                                     "at 1 of 2 layers (1)."),
    ([], "Whether the diffusion bridge beats its regression control is not settled"),
])
def test_bridge_against_regression_each_way(nlls, says):
    text, anchor = answer_bridge_vs_regression(inputs(regression=[_regression(*n) for n in nlls]))
    assert says in text and anchor == REGRESSION
    # the two hybrid NLLs at l* (2) where it has a control
    assert ("at l* = 2, " in text) is any(n[0] == 2 for n in nlls)


def text_of(comparison):
    return answer_generation(inputs(comparison=comparison))[0]


def test_generation_against_backbone_and_baselines_each_way():
    text, anchor = answer_generation(inputs())
    assert anchor == GENERATION
    assert "DiHAL's Gen.PPL 50.0 [45.0, 55.0] is higher than the backbone's 30.0 [28.0, 32.0] " \
           "(told apart by the intervals)" in text
    assert "; at a matched budget, lower than 2 of 2 baselines' (sed, codar), 1 of them told " \
           "apart." in text
    worse = [_gen("dihal", "dihal", 90.0, 85.0, 95.0), _gen("backbone", "backbone", 30.0, 28.0, 32.0),
             _gen("sed", "baseline", 80.0, 70.0, 90.0)]
    assert text_of(worse).endswith("; at a matched budget, lower than none of the 1 "
                                   "baselines'.")
    close = [_gen("dihal", "dihal", 29.0, 20.0, 40.0), _gen("backbone", "backbone", 30.0, 28.0, 32.0)]
    text, _ = answer_generation(inputs(comparison=close))
    assert "lower than the backbone's" in text and "(not told apart by the intervals)" in text
    assert "no baseline was compared" in text


@pytest.mark.parametrize(("ratio", "pace"), [(2.0, "slower"), (0.5, "faster"), (1.0, "as fast")])
def test_cost_each_way(ratio, pace):
    from dataclasses import replace

    from dihal.report.inputs import ReportInputs

    raw = report_raw_with_cost(15.0)
    raw["evaluation"]["cost"]["rows"][1].update(ms_per_token=2.0 * ratio)
    x = ReportInputs.from_dicts(**raw)
    text = timing_sentence(x)
    assert f"({ratio:.2f}x the backbone's time: {pace}; a cached decode" in text
    assert f"{2.0 * ratio:.2f} ms per token against the backbone's 2.00" in text
    assert "12,345 parameters, was trained on 65,536 tokens and samples in 4 step(s)" in text
    assert text in build_report(x).markdown  # the cost section's
    assert f"and {ratio:.2f}x its measured time" in answer_cost(x)[0]
    # no cost table: not measured, said so
    untimed = replace(x, evaluate=replace(x.evaluate, cost=None))
    assert "time per token is not measured" in timing_sentence(untimed)


def test_report_opens_on_its_answers_and_splits_the_proxies_by_normalisation():
    x = inputs(regression=[_regression(1, 2.0, 3.0)])
    report = build_report(x)
    md, html = report.markdown, report.html
    answers = md.index("## What this run shows")
    assert answers < md.index("## 1. Locate") < md.index("### Proxies and S_l under none")
    for answer in ANSWERS:
        text, anchor = answer(x)
        assert f"- {text} ([evidence](#{anchor}))" in md
        assert f'<a id="{anchor}"></a>' in md and f"<h2 id='{anchor}'>" in html
    # one table per normalisation, five columns, instead of one 17-column table
    assert "| layer | m_curv | m_mono | k_eff | S |" in md
    assert md.count("### Proxies and S_l under") == 2 and "m_curv[none]" not in md


def _scored(model, role, log_ppl, spread=0.3, n=16, seed=0, **extra):
    """A generation row that kept its per-sample judge scores (eval 6): n samples of 10 judge
    tokens whose log-perplexities scatter around `log_ppl`."""
    import math

    import numpy as np

    lp = log_ppl + spread * np.random.default_rng(seed).standard_normal(n)
    nll = [float(10 * v) for v in lp]
    ppl = math.exp(sum(nll) / (10 * n))
    return _gen(model, role, ppl, ppl * 0.9, ppl * 1.1, **{
        "sample_nll": nll, "sample_tokens": [10] * n, "temperature": 1.0, "ppl_length": 16,
        "ppl_length_scored": n - 1, "ppl_length_short": 1, "gen_ppl_at_length": ppl,
        "diversity_spacy": 0.45, "mean_judge_length": 10.0, "mauve_diagnostic": True,
        "mauve_n_p": n, "mauve_n_q": n, "n_samples": n, "empty_samples": 0, **extra})


def test_generation_pairs_decide_by_the_log_ppl_difference_and_give_a_power_count():
    from dihal.report.generation import generation_pairs

    dihal = _scored("dihal", "dihal", 4.0, seed=1, denoiser_parameters=1, train_tokens=1,
                    sampler_steps=1)
    comparison = [dihal, _scored("backbone", "backbone", 3.0, seed=2),
                  _scored("sed", "baseline", 5.0, seed=3), _scored("codar", "baseline", 4.0,
                                                                   seed=4)]
    pairs = {p["model"]: p for p in generation_pairs(GenerationRow.from_dict(dihal),
                                                     generation_rows(comparison[1:]))}
    assert pairs["backbone"]["verdict"] == "higher" and pairs["sed"]["verdict"] == "lower"
    assert pairs["codar"]["verdict"] == "not distinguishable"
    assert all(p["p_holm"] >= p["p"] for p in pairs.values())
    # the power count is prospective: for a named effect (Gen.PPL 1.25x apart) under this test
    # at Holm's strictest step over the 3 pairs, so it follows the spread, not the effect seen
    # (the backbone, told apart, and codar, not, have the same spread: about the same count)
    for p in pairs.values():
        assert p["power"]["ratio"] == 1.25 and p["power"]["alpha"] == pytest.approx(0.05 / 3)
        assert not p["power"]["paired"] and p["power"]["observed_n"] == 16
    counts = [p["power"]["n"] for p in pairs.values()]
    assert max(counts) < 2 * min(counts)
    text, _ = answer_generation(inputs(comparison=comparison))
    assert ("higher than the backbone's" in text and "(told apart by the log-difference "
            "test)" in text)
    assert "lower than 1 of 2 baselines' (sed), 1 of them told apart." in text
    md = build_report(inputs(comparison=comparison)).markdown
    assert "told apart from 2 of the 3 other models (backbone, sed)" in md
    assert ("Planned ahead, this test (Holm over the 3 pairs, at its strictest step) would "
            "need for 80% power against Gen.PPL 1.25x apart, the spread per sample taken from "
            f"these samples, about {pairs['codar']['power']['n']:,} for codar samples per "
            "model") in md
    assert ("| DiHAL against | Gen.PPL ratio [95 %] | p (Holm) | DiHAL's Gen.PPL | samples per "
            "model for 80% power at a Gen.PPL ratio of 1.25 (alpha 0.0167) |") in md
    # a DiHAL indistinguishable from the backbone says so
    same = [dihal, _scored("backbone", "backbone", 4.0, seed=5)]
    assert "(not told apart by the log-difference test)" in answer_generation(
        inputs(comparison=same))[0]


def _with_eval_rows(x, **columns):
    return with_eval_rows(x, [{**r.to_dict(), **columns} for r in x.evaluate.rows])


def test_generation_section_states_start_token_temperature_length_and_mauve_status():
    comparison = [_scored("dihal", "dihal", 4.0, seed=1, denoiser_parameters=1, train_tokens=1,
                          sampler_steps=1), _scored("backbone", "backbone", 3.0, seed=2),
                  _scored("sed", "baseline", 5.0, seed=3, temperature=None),
                  _scored("codar", "baseline", 4.0, seed=4),
                  _scored("codar (native T=0.7)", "baseline (native temperature)", 3.5, seed=6,
                          temperature=0.7)]
    x = _with_eval_rows(inputs(comparison=comparison), start_token="<|im_start|>",
                        start_token_id=1)
    md = build_report(x).markdown
    assert "from the backbone's start token '<|im_start|>' (id 1)" in md
    assert "Every ranked row decodes at temperature 1 (SED and Diffusion-LM round" in md
    assert "codar (native T=0.7): the recipe's own temperature, an extra row, not ranked." in md
    # of all 16 samples, 15 reach the common length
    assert "first 16 judge tokens" in md and "| 15 of 16 |" in md
    assert "MAUVE here is a diagnostic, not a result" in md and "MAUVE [95 %] (diagnostic)" in md
    header = next(line for line in md.splitlines() if line.startswith("| model | temperature"))
    for column in ("mean length (words)", "mean length (judge tokens)",
                   "diversity (spaCy, as LD4LG)", "Gen.PPL, first 16 judge tokens [95 %]"):
        assert column in header
    # a MAUVE from 512 samples a side is a result; rows at two temperatures are flagged
    big = [{**r, "mauve_diagnostic": False, "mauve_n_p": 512, "mauve_n_q": 512,
            "temperature": 0.85 if r["role"] == "backbone" else r["temperature"]}
           for r in comparison]
    md = build_report(_with_eval_rows(inputs(comparison=big), start_token="<s>",
                                      start_token_id=1)).markdown
    assert "diagnostic" not in md and "| MAUVE [95 %] |" in md
    assert "The rows decode at different temperatures" in md


def test_bridgeability_shows_the_seed_spread_or_says_there_is_one_seed():

    x = inputs()
    assert "trained under one seed" in build_report(x).markdown
    spread = {m: [{"layer": ll, "n_seeds": 2, "mean": 1.0 + ll, "sd": 0.1, "min": 0.9 + ll,
                   "max": 1.1 + ll} for ll in (1, 2, 3)] for m in ("val_loss", "hybrid_nll")}
    seeds = {"n_seeds": 2, "spread": spread,
             "oracle": {"oracle": 1, "oracle_share": 0.8, "picks": {1: 0.8, 2: 0.2},
                        "l_star_rank": 2, "l_star_rank_low": 1, "l_star_rank_high": 3,
                        "l_star_is_oracle": 0.2, "gap": 0.5, "gap_low": 0.1, "gap_high": 0.9},
             "replicates": 3, "replicate_seconds": 30.0, "bridge_seconds": 60.0}
    md = build_report(with_bridgeability(x, seeds=SeedInfo.from_dict(seeds))).markdown
    assert "trained under up to 2 seeds" in md and "stays layer 1 in 80% of replicates" in md
    assert "l* ranks 2 of 3 (95 % [1, 3])" in md
    assert "| 1 | 2 | 2 +- 0.1 [1.9, 2.1] | 2 +- 0.1 [1.9, 2.1] |" in md


@pytest.mark.parametrize("disagree", [True, False])
def test_full_training_says_what_validation_loss_would_have_chosen(disagree):
    from dihal.report.full_training import _full_training_summary

    full = [{"role": role, "layer": ll, "sampler": "protocol", "val_loss": 0.5,
             "hybrid_nll": 3.0, "gen_ppl": 40.0}
            for role, ll in (("geometry l*", 2), ("oracle", 3), ("worst", 1))]
    b = OracleBy.from_dict({
        "by": {"hybrid_nll": {"oracle": 3, "worst": 1},
               "val_loss": {"oracle": 1 if disagree else 3, "worst": 1}},
        "chosen_by": "hybrid_nll", "oracle_disagree": disagree, "worst_disagree": False})
    text = _full_training_summary(with_bridgeability(inputs(full_training=full), oracle_by=b))
    assert "oracle layer 3: 3.000 and 0.500" in text
    assert ("By the sweep's validation loss the oracle would be layer 1 and the worst 1" in text) \
        == disagree


def _control(model, ppl, diff, low, high, verdict, role="control"):
    return _gen(model, role, ppl, ppl * 0.9, ppl * 1.1, dihal_log_ppl_diff=diff,
                dihal_log_ppl_diff_low=low, dihal_log_ppl_diff_high=high,
                dihal_log_ppl_diff_p=0.01 if verdict != "not distinguishable" else 0.5,
                dihal_verdict=verdict, paired_samples=4)


def _with_controls(*controls):
    return inputs(comparison=[_gen("DiHAL (l=2)", "dihal", 50.0, 45.0, 55.0, denoiser_parameters=1,
                                   train_tokens=1, sampler_steps=4),
                              _gen("backbone", "backbone", 30.0, 28.0, 32.0), *controls])


def test_controls_each_way():
    import math

    # no control rows: not settled
    text, anchor = answer_controls(inputs())
    assert anchor == CONTROLS and text.startswith("Whether DiHAL beats its control hybrids is "
                                                  "not settled")
    assert controls_sentence(inputs()) == text
    # DiHAL lower than the ridge beyond the paired interval, the layer-drop not distinguishable
    x = _with_controls(_control("ridge (l=2)", 80.0, math.log(0.625), -0.6, -0.3, "below"),
                       _control("layer-drop (l=2)", 52.0, -0.04, -0.2, 0.1, "not distinguishable"))
    assert answer_controls(x)[0] == (
        "DiHAL has the lowest Gen.PPL of itself and its controls; DiHAL is lower beyond the "
        "paired 95 % interval than 1 of its 2 controls, higher than 0.")
    text = controls_sentence(x)  # the section's, with every ratio
    assert text.startswith("DiHAL has the lowest Gen.PPL of itself and its controls: ")
    assert "0.62x ridge (l=2)'s [0.55, 0.74], lower beyond the paired 95 % interval" in text
    assert "0.96x layer-drop (l=2)'s [0.82, 1.11], not distinguishable at the paired 95 % level" in text
    assert text.endswith("(DiHAL lower beyond the paired interval than 1, higher than 0 of 2).")
    assert text in build_report(x).markdown
    # the regression hybrid wins beyond the interval; DiHAL at the chosen K is a row too
    x = _with_controls(_control("regression (l=2)", 20.0, math.log(2.5), 0.7, 1.1, "above"),
                       _control("DiHAL (l=2, K=2 marginal, chosen on validation)", 45.0,
                                math.log(50 / 45), 0.0, 0.2, "not distinguishable",
                                role="dihal (chosen K)"))
    assert answer_controls(x)[0] == (
        "regression (l=2) has the lowest Gen.PPL of DiHAL and its controls (DiHAL's Gen.PPL is "
        "2.50x regression (l=2)'s [2.01, 3.00], higher beyond the paired 95 % interval); DiHAL "
        "is lower beyond the paired 95 % interval than 0 of its 2 controls, higher than 1.")
    text = controls_sentence(x)
    assert text.startswith("regression (l=2) has the lowest Gen.PPL of DiHAL and its controls: ")
    assert text.endswith("(DiHAL lower beyond the paired interval than 0, higher than 1 of 2).")
    # a row with too few paired samples has no interval, and says so
    x = _with_controls(_control("ridge (l=2)", 20.0, float("nan"), float("nan"), float("nan"),
                                "not distinguishable"))
    assert "ridge (l=2): no paired difference" in controls_sentence(x)
    assert "ridge (l=2): no paired difference" in answer_controls(x)[0]
    md = build_report(x).markdown
    assert "## 3a. DiHAL against its control hybrids" in md and "ridge (l=2)" in md


def test_break_even_each_way():
    # no cost table: not settled
    text, anchor = answer_cost(inputs())
    assert anchor == COST and text.startswith("What the replacement costs per token is not settled")
    assert break_even_sentence(inputs()) == text
    # a step of 15 MFLOPs: DiHAL at l* = 2, K = 4 costs (25 + 60) / 45 = 1.89x; cheaper at l*
    # only for K <= 1; at the sweep's K = 4 at no swept layer
    assert answer_cost(_with_cost(15.0))[0] == (
        "DiHAL at l* = 2, K = 4 costs 1.89x the backbone's FLOPs per generated token and 1.50x "
        "its measured time; at l* it is cheaper only for K <= 1; at the sweep's K = 4, cheaper "
        "at 0 of 3 swept layers.")
    text = break_even_sentence(_with_cost(15.0))
    assert text == ("Per generated token the backbone costs 45 MFLOPs; DiHAL at l* = 2 with K = 4 "
                    "costs 1.89x that (1.50x in measured time), and at l* it is cheaper only for "
                    "K <= 1. At the sweep's K = 4 a hybrid is cheaper than the backbone at none "
                    "of the 3 swept layers.")
    # a step of 3 MFLOPs: cheaper at layers 2 and 3 (37 and 27 < 45), not at 1 (47)
    text = break_even_sentence(_with_cost(3.0, timed=False))
    assert "costs 0.82x that, and at l* it is cheaper only for K <= 6." in text
    assert text.endswith("cheaper than the backbone at 2 of 3 swept layers (2, 3).")
    assert answer_cost(_with_cost(3.0, timed=False))[0] == (
        "DiHAL at l* = 2, K = 4 costs 0.82x the backbone's FLOPs per generated token; at l* it is "
        "cheaper only for K <= 6; at the sweep's K = 4, cheaper at 2 of 3 swept layers.")
    # a step that costs more than the layers saved at l*: never cheaper there
    assert "cheaper only for K <= 0 (never)" in break_even_sentence(_with_cost(30.0))
    assert "; at l* it is never cheaper;" in answer_cost(_with_cost(30.0))[0]
    md = build_report(_with_cost(3.0)).markdown
    assert "## 3b. Cost per generated token" in md and "| l | max K cheaper |" in md
    assert "data:image/png;base64," in build_report(_with_cost(3.0)).html


@pytest.mark.parametrize("cpu_threads", [2, 0])
def test_the_report_says_which_layers_had_how_many_seeds_and_what_more_would_cost(cpu_threads):
    """Two of three layers under 2 seeds: the table shows 1 seed for the third, the text names
    the counts and sizes the missing replicate from the replicates' own timings; on the CPU
    (the eval's threads > 0) it says the subset is what fits the budget."""

    x = _with_eval_rows(inputs(), cpu_threads=cpu_threads)
    spread = {m: [{"layer": ll, "n_seeds": n, "mean": 1.0 + ll,
                   "sd": 0.1 if n > 1 else float("nan"), "min": 0.9 + ll, "max": 1.1 + ll}
                  for ll, n in ((1, 2), (2, 1), (3, 2))] for m in ("val_loss", "hybrid_nll")}
    seeds = {"n_seeds": 2, "spread": spread, "replicates": 2, "replicate_seconds": 60.0,
             "bridge_seconds": 120.0,
             "oracle": {"oracle": 1, "oracle_share": 0.8, "picks": {1: 0.8, 3: 0.2}}}
    x = with_bridgeability(x, seeds=SeedInfo.from_dict(seeds), protocol=BridgeProtocol(sampler_steps=4, seeds=2))
    md = build_report(x).markdown
    assert "Training seeds per swept layer: 2 at layers 1, 3; 1 at layer 2." in md
    assert "| 2 | 1 | 3 [2.9, 3.1] | 3 [2.9, 3.1] |" in md  # one seed: no spread
    assert ("The 2 replicates took 60 s (30 s each; the kept bridges 120 s in all): 2 seeds on "
            "the other 1 layer would add about 30 s, 25% of the kept bridges' time") in md
    assert ("what fits the run's budget (the driver's cpu default: 2 seeds on 4 swept layers"
            in md) == (cpu_threads == 2)
    assert ("The replicates cover the layers the sweep's seed_layers named" in md) == (
        cpu_threads != 2)
    assert "| seeds | per layer (the seed table above): 1: 2, 2: 1, 3: 2 |" in md
    # every layer under the same seeds: the counts, no cost of more
    even = {**seeds, "spread": {m: [{**r, "n_seeds": 2, "sd": 0.1} for r in rows]
                                for m, rows in spread.items()}}
    md = build_report(with_bridgeability(x, seeds=SeedInfo.from_dict(even))).markdown
    assert "Training seeds per swept layer: 2 at layers 1, 2, 3." in md
    assert "would add about" not in md and "| seeds | 2 |" in md


def _full_rows(n_seeds: int, chosen: bool) -> list[dict]:
    spread = ({f"{m}_seed_{k}": v for m in ("val_loss", "t1_loss", "hybrid_nll")
               for k, v in (("mean", 1.5), ("sd", 0.25), ("min", 1.25), ("max", 1.75))}
              if n_seeds > 1 else {})
    rows = []
    for role, ll, secs in (("geometry l*", 2, 10.0), ("oracle", 3, 20.0), ("worst", 1, 30.0)):
        base = {"layer": ll, "val_loss": 0.5, "t1_loss": 0.2, "hybrid_nll": 3.0,
                "train_tokens": 4096, "train_seconds": secs, "n_seeds": n_seeds,
                "train_seconds_all_seeds": secs * n_seeds, **spread}
        rows.append(_gen("x", role, 40.0, 35.0, 45.0, **base, sampler="protocol", sampler_steps=4,
                         rule="ancestral"))
        if chosen:
            rows.append(_gen("x", role, 38.0, 33.0, 43.0, **base,
                             sampler="chosen on validation", sampler_steps=2, rule="marginal",
                             dihal_log_ppl_diff=0.05, dihal_log_ppl_diff_low=-0.1,
                             dihal_log_ppl_diff_high=0.2))
    return [{k: v for k, v in r.items() if k != "model"} for r in rows]  # roles, not models


@pytest.mark.parametrize(("n_seeds", "chosen"), [(1, True), (2, False)])
def test_full_training_table_seeds_samplers_and_controls_from_eval(n_seeds, chosen):
    from dataclasses import replace

    from dihal.report.full_training import full_training_sampler, full_training_seeds

    x = inputs()
    control = {**_control("regression (l=2, full budget)", 60.0, -0.2, -0.4, -0.1, "below"),
               "layer": 2, "train_tokens": 4096, "ms_per_token": 5.0, "latency_vs_backbone": 2.5}
    sampler = {"protocol_sampler_steps": 4, "chosen_is_protocol": not chosen,
               "chosen": ({"rule": "marginal", "sampler_steps": 2, "hybrid_nll": 2.9} if chosen else
                          {"rule": "ancestral", "sampler_steps": 4, "hybrid_nll": 3.0})}
    x = with_eval_rows(replace(x, full_training=FullTrainingInputs.from_dicts(
        _full_rows(n_seeds, chosen), sampler)), [*(r.to_dict() for r in x.evaluate.rows), control])
    seeds = full_training_seeds([FullTrainingRow.from_dict(r) for r in
                                 _full_rows(n_seeds, chosen)[:: 2 if chosen else 1]])
    says = full_training_sampler(SamplerChoice.from_dict(sampler))
    if n_seeds == 1:
        assert seeds.startswith("Each full-training bridge was trained under one seed")
        assert ("training took 60 s here (geometry l* 10 s, oracle 20 s, worst 30 s), so a "
                "second seed would cost about that again") in seeds
    else:
        assert seeds.startswith("Each full-training bridge was trained under 2 seeds")
        assert "120 s of training in all" in seeds
    if chosen:
        assert says == ("Each full-training bridge is sampled twice: at the protocol's K = 4 and "
                        "at the marginal rule with K = 2 (held-out hybrid NLL 2.9000), chosen on "
                        "validation at l*.")
    else:
        assert says.endswith("the protocol's own K = 4 and rule, so each bridge has one "
                             "generation row (no duplicate).")
    assert full_training_sampler(SamplerChoice.from_dict({})) == (
        "Each full-training bridge is sampled at the protocol's K only.")
    md = build_report(x).markdown
    section = md[md.index("## 4. Full training"):md.index("## 5.")]
    assert seeds in section and says in section
    assert "| regression (l=2, full budget), from eval | 2 | from eval |" in section
    assert ("| 1.5 +- 0.25 [1.25, 1.75] |" in section) == (n_seeds > 1)
    assert ("K=2 marginal (chosen on validation)" in section) == chosen
    assert section.count("K=4 ancestral (protocol)") == 3


def test_the_markdown_links_its_plots_to_files_and_the_html_embeds_them():
    x = _with_cost(3.0)
    embedded = build_report(x)
    assert embedded.figures == [] and "data:image/png;base64," in embedded.markdown
    beside = build_report(x, figure_name=lambda n: f"plot{n}.png")
    links = re.findall(r"!\[[^]]*\]\((plot\d+\.png)\)", beside.markdown)
    assert links == [f"plot{n}.png" for n in range(1, len(beside.figures) + 1)] and links
    assert "data:image" not in beside.markdown and "data:image/png;base64," in beside.html
    assert beside.html == embedded.html


def test_the_partial_spearman_shows_its_undefined_share_and_why_its_interval_is_missing():
    def row(share, low, high):
        return SpearmanRow("S_l (robust)", {t: Spearman(0.6, 0.4, 0.7, "not distinguishable",
                                                        0.1, -0.1, 0.3, 0.4, 1.0, 0.51, low,
                                                        high, share)
                                            for t in ("val_loss", "recon_error", "hybrid_nll")}
                           ).to_dict()

    md = build_report(inputs(spearman=[row(0.42, None, None),
                                       _spearman(DEPTH, 0.4, 0.1, 0.7)])).markdown
    assert ("| +0.51 (no interval: undefined in 42% of resamples, where the predictor or the "
            "target ranks the drawn layers as depth does;") in md
    md = build_report(inputs(spearman=[row(0.01, 0.2, 0.8),
                                       _spearman(DEPTH, 0.4, 0.1, 0.7)])).markdown
    assert "| +0.51 [+0.20, +0.80] (undefined in 1.0% of resamples) |" in md


@pytest.mark.parametrize("verdict", ["below", "above", "not distinguishable"])
def test_full_training_reports_the_judged_half_and_the_paired_test_of_the_roles(verdict):
    """The three full-training bridges are compared on the held-out half that did not choose
    the oracle, and by the paired generation test of their samples (each way it comes out);
    rows with too few held-out sequences to split or samples to pair say so."""
    import math

    from dihal.report.full_training import _full_training_summary, role_pairs, role_pairs_sentence

    full = [{"role": role, "layer": ll, "sampler": "protocol", "val_loss": 0.5,
             "hybrid_nll": 3.0, "hybrid_nll_judge": nll, "gen_ppl": 40.0}
            for role, ll, nll in (("geometry l*", 2, 3.1), ("oracle", 3, 2.9), ("worst", 1, 3.5))]
    full[1].update({"log_ppl_diff_vs_l_star": math.log(1.5), "log_ppl_diff_low_vs_l_star":
                    math.log(1.2), "log_ppl_diff_high_vs_l_star": math.log(1.9),
                    "p_vs_l_star": 0.01, "p_holm_vs_l_star": 0.03, "verdict_vs_l_star": verdict,
                    "pairs_vs_l_star": 60})
    x = inputs(full_training=full)
    text = _full_training_summary(x)
    assert ("On the half of the held-out sequences that did not choose the oracle and the worst "
            "layer, hybrid NLL is 3.100 at l*, 2.900 at the oracle and 3.500 at the worst "
            "layer.") in text
    pairs = role_pairs(x.full_training.trained())
    assert pairs == [{"pair": "geometry l* (layer 2) / oracle (layer 3)",
                      "Gen.PPL ratio [paired 95 %]": "1.500 [1.200, 1.900]",
                      "samples paired": 60, "p (Holm)": "0.03",
                      "verdict": {"below": "geometry l* lower", "above": "oracle lower"}.get(
                          verdict, "not distinguishable")}]
    sentence = role_pairs_sentence(pairs)
    assert ("Told apart: geometry l* (layer 2) / oracle (layer 3)" in sentence) == (
        verdict != "not distinguishable")
    md = build_report(x).markdown
    assert "| geometry l* (layer 2) / oracle (layer 3) | 1.500 [1.200, 1.900] | 60 | 0.03 |" in md
    old = [{k: v for k, v in r.items() if k != "hybrid_nll_judge" and "_vs_" not in k}
           for r in full]
    old_x = inputs(full_training=old)
    assert "chosen and judged on the same held-out sequences" in _full_training_summary(old_x)
    assert role_pairs_sentence(role_pairs(old_x.full_training.trained())).startswith(
        "No paired generation test")
