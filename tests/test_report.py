"""The report's opening answers, each way each can come out, on hand-made inputs; and the
report built from hand-made inputs opens on them, with one proxy table per normalisation."""

import base64

import pytest

from dihal.report import (
    ANSWERS,
    BRIDGEABILITY,
    CONTROLS,
    COST,
    GENERATION,
    LOCATE,
    REGRESSION,
    answer_break_even,
    answer_bridge_vs_regression,
    answer_controls,
    answer_cost,
    answer_generation,
    answer_geometry_vs_depth,
    answer_l_star,
    build_report,
)
from dihal.results import ReportInputs
from dihal.rows import DEPTH, RegressionRow, Spearman, SpearmanRow

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


def _spearman(predictor, rho, low, high, vs=""):
    return SpearmanRow(predictor, {t: Spearman(rho, low, high, vs) for t in
                                   ("val_loss", "recon_error", "hybrid_nll")}).to_dict()


def _regression(layer, bridge_nll, control_nll):
    return RegressionRow(layer, 0.5, 0.6, bridge_nll, control_nll, 0.4, 0.3, 0.2).to_dict()


def _gen(model, role, ppl, low, high, **extra):
    return {"model": model, "role": role, "gen_ppl": ppl, "gen_ppl_low": low,
            "gen_ppl_high": high, "gen_ppl_mean": ppl, "diversity": 0.5, "mauve": 0.4,
            "repetition": 0.1, "mean_length": 8.0, **extra}


def inputs(*, spearman=None, regression=(), comparison=None, latency=2.0,
           stability=None) -> ReportInputs:
    spearman = spearman if spearman is not None else [
        _spearman("S_l (robust)", 0.9, 0.8, 1.0, "above"), _spearman(DEPTH, 0.1, -0.2, 0.4)]
    comparison = comparison or [
        _gen("dihal", "dihal", 50.0, 45.0, 55.0, denoiser_parameters=12345,
             train_tokens=65536, sampler_steps=4),
        _gen("backbone", "backbone", 30.0, 28.0, 32.0),
        _gen("sed", "baseline", 80.0, 70.0, 90.0), _gen("codar", "baseline", 52.0, 40.0, 60.0)]
    geometry = [{"layer": ll, "norm": n, "m_curv": 0.1 * ll, "m_mono": 0.2, "k_eff": 3.0}
                for n in ("none", "robust") for ll in range(4)]
    score = [{"layer": ll, "norm": n, "S": 0.5 * ll, "candidate": ll > 0}
             for n in ("none", "robust") for ll in range(4)]
    ev = [{"model": "dihal", "role": "dihal", "ms_per_token": 4.0, "latency_vs_backbone": latency},
          {"model": "backbone", "role": "backbone", "ms_per_token": 2.0,
           "latency_vs_backbone": 1.0}]
    return ReportInputs(
        backbone="tiny", backbone_info={"hf_id": "t/tiny", "architecture": "llama",
                                        "n_layers": 4, "hidden_size": 32, "revision": "abc"},
        configs={"layer_score": {"primary_norm": "robust"},
                 "geometry": {"n_tokens": 64, "n_anchors": 8, "k_neighbors": 4, "n_pairs": 10,
                              "n_resamples": 20},
                 "eval": {"n_samples": 4, "length": 6, "temperature": 1.0, "seed": 0}},
        geometry_rows=geometry, predictor_rows=[], score_rows=score,
        score={"l_star": 2, "selected": {"none": 1, "robust": 2},
               "spearman_vs_depth": {"none": 0.3, "robust": 0.2},
               "stability": stability if stability is not None else {}},
        bridgeability={"l_star": 2, "oracle": 3, "worst": 1, "swept_layers": [1, 2, 3],
                       "spearman": spearman, "regression": list(regression)},
        sweep_layers=[], sweep_protocol={"steps": 4},
        comparison={"rows": comparison, "missing": []},
        evaluation={"rows": ev, "judge": {"judge": "t/tiny"}},
        full_training=[],
        sampler_curve={"layer": 2, "rows": [
            {"steps": 1, "trained_steps": 4, "hybrid_nll": 3.0, "recon_error": 0.5,
             "backbone_nll": 2.5, "ms_per_token": 1.0, "top1_agreement": 0.5}]},
        samples={"dihal": ["a b c"]}, plots={"proxies": PNG, "score": PNG, "scatter": PNG},
        backbones=[], artifacts="/tmp/x", fingerprints={"geometry_tiny": "f" * 64})


def test_l_star_with_and_without_its_stability():
    text, anchor = answer_l_star(inputs())
    assert text == "Geometry selects l* = 2 (S_l under robust)." and anchor == LOCATE
    firm = {"robust": {"l_star": 2, "same": 0.95, "replicates": 20, "low": 2, "high": 3,
                       "picks": {2: 0.95}}}
    text, _ = answer_l_star(inputs(stability=firm))
    assert "95% of 20 bootstrap resamples of the tokens pick it again, 95 % range [2, 3]" in text


@pytest.mark.parametrize(("standing", "says"), [
    ("above", "geometry predicts how well a bridge learns better than depth does"),
    ("below", "depth predicts how well a bridge learns better than geometry does"),
    ("not distinguishable", "geometry and depth cannot be told apart at 3 swept layers"),
])
def test_geometry_against_depth_each_way(standing, says):
    x = inputs(spearman=[_spearman("S_l (robust)", 0.5, 0.2, 0.8, standing),
                         _spearman(DEPTH, 0.4, 0.1, 0.7)])
    text, anchor = answer_geometry_vs_depth(x)
    assert says in text and anchor == BRIDGEABILITY
    assert "S_l (robust) has Spearman 0.50 [0.20, 0.80] with -val loss and depth 0.40 [0.10, 0.70]" in text


def test_geometry_against_depth_names_rivals_above_depth_and_says_when_unsettled():
    x = inputs(spearman=[_spearman("S_l (robust)", 0.5, 0.2, 0.8, "not distinguishable"),
                         _spearman("-cond_distance", 0.9, 0.85, 0.95, "above"),
                         _spearman(DEPTH, 0.4, 0.1, 0.7)])
    assert "predictors above depth: -cond_distance." in answer_geometry_vs_depth(x)[0]
    text, _ = answer_geometry_vs_depth(inputs(spearman=[_spearman(DEPTH, 0.4, 0.1, 0.7)]))
    assert text.startswith("Whether geometry beats depth is not settled")


@pytest.mark.parametrize(("nlls", "says"), [
    ([(1, 2.0, 3.0), (2, 2.0, 3.0)], "The diffusion bridge beats its regression control at all 2 layers"),
    ([(1, 3.0, 2.0), (2, 3.0, 2.0)], "The regression control is at least as good as the diffusion "
                                     "bridge at all 2 layers"),
    ([(1, 2.0, 3.0), (2, 3.0, 2.0)], "beats its regression control at 1 of 2 layers (1), not everywhere"),
    ([], "Whether the diffusion bridge beats its regression control is not settled"),
])
def test_bridge_against_regression_each_way(nlls, says):
    text, anchor = answer_bridge_vs_regression(inputs(regression=[_regression(*n) for n in nlls]))
    assert says in text and anchor == REGRESSION


def text_of(comparison):
    return answer_generation(inputs(comparison=comparison))[0]


def test_generation_against_backbone_and_baselines_each_way():
    text, anchor = answer_generation(inputs())
    assert anchor == GENERATION
    assert "DiHAL's Gen.PPL is 50.0 [45.0, 55.0], higher than the backbone's 30.0 [28.0, 32.0] " \
           "(the intervals are separated)" in text
    assert "; at the matched budget it is lower than 2 of 2 baselines' (sed, codar), beyond " \
           "the intervals for 1 of them." in text
    worse = [_gen("dihal", "dihal", 90.0, 85.0, 95.0), _gen("backbone", "backbone", 30.0, 28.0, 32.0),
             _gen("sed", "baseline", 80.0, 70.0, 90.0)]
    assert text_of(worse).endswith("; at the matched budget it is lower than none of the 1 "
                                   "baselines'.")
    close = [_gen("dihal", "dihal", 29.0, 20.0, 40.0), _gen("backbone", "backbone", 30.0, 28.0, 32.0)]
    text, _ = answer_generation(inputs(comparison=close))
    assert "lower than the backbone's" in text and "(the intervals overlap)" in text
    assert "no baseline was compared" in text


@pytest.mark.parametrize(("ratio", "pace"), [(2.0, "slower"), (0.5, "faster"), (1.0, "as fast")])
def test_cost_each_way(ratio, pace):
    text, anchor = answer_cost(inputs(latency=ratio))
    assert f"({ratio:.2f}x the backbone's time per step: {pace})" in text and anchor == GENERATION
    assert "4.00 ms per token against the backbone's 2.00" in text
    assert "12,345 parameters, was trained on 65,536 tokens and samples in 4 step(s)" in text


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
    # DiHAL lower than the ridge beyond the paired interval, the layer-drop not distinguishable
    x = _with_controls(_control("ridge (l=2)", 80.0, math.log(0.625), -0.6, -0.3, "below"),
                       _control("layer-drop (l=2)", 52.0, -0.04, -0.2, 0.1, "not distinguishable"))
    text, _ = answer_controls(x)
    assert text.startswith("DiHAL has the lowest Gen.PPL of itself and its controls: ")
    assert "0.62x ridge (l=2)'s [0.55, 0.74], lower beyond the paired 95 % interval" in text
    assert "0.96x layer-drop (l=2)'s [0.82, 1.11], not distinguishable at the paired 95 % level" in text
    assert text.endswith("(DiHAL lower beyond the paired interval than 1, higher than 0 of 2).")
    # the regression hybrid wins beyond the interval; DiHAL at the chosen K is a row too
    x = _with_controls(_control("regression (l=2)", 20.0, math.log(2.5), 0.7, 1.1, "above"),
                       _control("DiHAL (l=2, K=2 marginal, chosen on validation)", 45.0,
                                math.log(50 / 45), 0.0, 0.2, "not distinguishable",
                                role="dihal (chosen K)"))
    text, _ = answer_controls(x)
    assert text.startswith("regression (l=2) has the lowest Gen.PPL of DiHAL and its controls: ")
    assert "2.50x regression (l=2)'s [2.01, 3.00], higher beyond the paired 95 % interval" in text
    assert text.endswith("(DiHAL lower beyond the paired interval than 0, higher than 1 of 2).")
    # a row with too few paired samples has no interval, and says so
    x = _with_controls(_control("ridge (l=2)", 80.0, float("nan"), float("nan"), float("nan"),
                                "not distinguishable"))
    assert "ridge (l=2): no paired difference" in answer_controls(x)[0]
    md = build_report(x).markdown
    assert "## 3a. DiHAL against its control hybrids" in md and "ridge (l=2)" in md


def _with_cost(step_mflops, timed=True):
    """The hand-made inputs with a cost table: 4 blocks of 10 MFLOPs, a head of 5, a denoising
    step of `step_mflops`; DiHAL at l* = 2 samples with K = 4, the sweep too."""
    from dataclasses import replace

    x = inputs()
    rows = [{"model": "backbone", "layer": None, "K": 0, "flops_per_token": 45e6,
             "ms_per_token": 2.0, "flops_vs_backbone": 1.0, "ms_vs_backbone": 1.0,
             "time_over_flops": 1.0}]
    if timed:
        f = 25e6 + 4 * step_mflops * 1e6
        rows.append({"model": "DiHAL (l=2, K=4)", "layer": 2, "K": 4, "flops_per_token": f,
                     "ms_per_token": 3.0, "flops_vs_backbone": f / 45e6, "ms_vs_backbone": 1.5,
                     "time_over_flops": 1.5 / (f / 45e6)})
    cost = {"flop_model": {"block_flops": [10e6] * 4, "head_flops": 5e6, "other_flops": 0.0,
                           "denoiser_step_flops": step_mflops * 1e6},
            "rows": rows, "n": 2, "length": 16, "repeats": 3, "note": "FLOPs counted"}
    sweep = [{"layer": ll, "hybrid_nll": 3.0 + ll, "backbone_nll": 2.5} for ll in (1, 2, 3)]
    return replace(x, evaluation={**x.evaluation, "cost": cost}, sweep_layers=sweep)


def test_break_even_each_way():
    # no cost table: not settled
    text, anchor = answer_break_even(inputs())
    assert anchor == COST and text.startswith("What the replacement costs per token is not settled")
    # a step of 15 MFLOPs: DiHAL at l* = 2, K = 4 costs (25 + 60) / 45 = 1.89x; cheaper at l*
    # only for K <= 1; at the sweep's K = 4 at no swept layer
    text, _ = answer_break_even(_with_cost(15.0))
    assert text == ("Per generated token the backbone costs 45 MFLOPs; DiHAL at l* = 2 with K = 4 "
                    "costs 1.89x that (1.50x in measured time), and at l* it is cheaper only for "
                    "K <= 1. At the sweep's K = 4 a hybrid is cheaper than the backbone at none "
                    "of the 3 swept layers.")
    # a step of 3 MFLOPs: cheaper at layers 2 and 3 (37 and 27 < 45), not at 1 (47)
    text, _ = answer_break_even(_with_cost(3.0, timed=False))
    assert "costs 0.82x that, and at l* it is cheaper only for K <= 6." in text
    assert text.endswith("cheaper than the backbone at 2 of 3 swept layers (2, 3).")
    # a step that costs more than the layers saved at l*: never cheaper there
    assert "cheaper only for K <= 0 (never)" in answer_break_even(_with_cost(30.0))[0]
    md = build_report(_with_cost(3.0)).markdown
    assert "## 3b. Cost per generated token" in md and "| l | max K cheaper |" in md
    assert "data:image/png;base64," in build_report(_with_cost(3.0)).html
