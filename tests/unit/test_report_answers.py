"""The report's opening answers: one bullet each, at most MAX_ANSWER_WORDS words (the verdict,
its key number, the link to its evidence), however crowded the run; the long readings are the
sections'. The budget study and the paper's claims have a bullet each."""

import math
import re
from dataclasses import replace

import pytest

from dihal.generation_rows import generation_rows
from dihal.report.build import ANSWERS, MAX_ANSWER_WORDS, answer_budget_study, build_report
from dihal.report.claims import CLAIMS, HOLDS, TALLY_WORDS, answer_claims, claim_rows
from dihal.rows import RegressionRow
from tests.tiny import budget_curve as curve
from tests.tiny import budget_study as study
from tests.tiny import frontier_point as _p
from tests.tiny import gen_row as _gen
from tests.tiny import report_inputs as inputs
from tests.tiny import report_inputs_with_cost

# DiHAL off the frontier beyond the intervals at both temperatures
DIHAL_OFF = [_p("DiHAL", "dihal", 0.7, 30.0, 0.4), _p("DiHAL", "dihal", 1.0, 60.0, 0.6),
             _p("backbone", "backbone", 0.7, 10.0, 0.5), _p("backbone", "backbone", 1.0, 20.0, 0.7)]


def _control(model, ppl, diff, verdict, role="control"):
    return _gen(model, role, ppl, ppl * 0.9, ppl * 1.1, dihal_log_ppl_diff=diff,
                dihal_log_ppl_diff_low=diff - 0.2, dihal_log_ppl_diff_high=diff + 0.2,
                dihal_log_ppl_diff_p=0.01, dihal_verdict=verdict, paired_samples=64)


def _crowded():
    """A run with everything to say: four baselines (one beaten only with more failures), three
    control hybrids and the chosen K, a partial regression verdict, a frontier DiHAL is off,
    and a budget study of three layers."""
    n = dict(n_samples=64, ppl_length=32)
    rows = [_gen("DiHAL (l=2)", "dihal", 50.0, 45.0, 55.0, denoiser_parameters=4_880_000,
                 train_tokens=65_536, sampler_steps=16, empty_samples=20, **n),
            _gen("backbone", "backbone", 30.0, 28.0, 32.0, empty_samples=0, **n),
            _gen("diffusion-lm", "baseline", 900.0, 800.0, 1000.0, empty_samples=0, **n),
            _gen("sed", "baseline", 700.0, 600.0, 800.0, empty_samples=0, **n),
            _gen("ld4lg", "baseline", 80.0, 70.0, 90.0, empty_samples=0, **n),
            _gen("codar", "baseline", 60.0, 40.0, 75.0, empty_samples=22, **n),
            _control("regression (l=2)", 20.0, math.log(2.5), "above"),
            _control("layer-drop (l=2)", 400.0, math.log(0.125), "below"),
            _control("ridge (l=2)", 45.0, math.log(50 / 45), "not distinguishable"),
            _control("DiHAL (l=2, K=2 marginal, chosen on validation)", 48.0, 0.04,
                     "not distinguishable", role="dihal (chosen K)")]
    regression = [RegressionRow(layer, 0.5, 0.6, b, c, 0.4, 0.3, 0.2).to_dict()
                  for layer, b, c in ((1, 5.0, 4.0), (2, 4.5, 4.6), (3, 6.0, 5.0))]
    x = inputs(comparison=rows, regression=regression)
    x = replace(x, comparison=replace(x.comparison, frontier=generation_rows(DIHAL_OFF)))
    return replace(x, budget=study({1: curve(6.0, 5.0, 4.4), 2: curve(5.5, 4.8, 4.1),
                                    3: curve(7.0, 6.5, 6.0)}, {1: 4.2, 2: 4.3, 3: 6.6}))


@pytest.mark.parametrize("make", [inputs, lambda: report_inputs_with_cost(15.0), _crowded],
                         ids=["bare", "with cost", "crowded"])
def test_every_answer_is_one_bullet_of_at_most_50_words(make):
    x = make()
    md = build_report(x).markdown
    section = md[md.index("## What this run shows"):md.index("\n## ", md.index("## What this"))]
    bullets = [line for line in section.splitlines() if line.startswith("- ")]
    assert len(bullets) == len(ANSWERS)
    for answer, bullet in zip(ANSWERS, bullets, strict=True):
        text, anchor = answer(x)
        assert bullet == f"- {text} ([evidence](#{anchor}))"
        words = len(re.findall(r"\S+", text))
        assert words <= MAX_ANSWER_WORDS, (answer.__name__, words, text)


def test_the_crowded_run_says_its_verdicts_in_short():
    x = _crowded()
    said = {a.__name__: a(x)[0] for a in ANSWERS}
    assert said["answer_bridge_vs_regression"].startswith(
        "Not everywhere: the diffusion bridge beats the ridge map (closed-form, a context-free "
        "linear lower bar) on hybrid NLL at 1 of 3 layers (2)")
    assert said["answer_bridge_vs_regression"].endswith("; at l* = 2, 4.500 against 4.600.")
    assert said["answer_generation"].endswith(
        "; over 44 of 64 samples (20 empty; a lower Gen.PPL on more failures does not count).")
    assert said["answer_controls"].startswith("regression (l=2) has the lowest Gen.PPL")
    assert said["answer_frontier"].startswith("DiHAL is off the Gen.PPL/diversity frontier")
    assert said["answer_budget_study"].startswith(
        "At l* the bridge crosses the ridge map at 2,048 steps (hybrid NLL at 2,048 steps "
        "4.100 against the ridge map's 4.300)")


def test_the_budget_bullet_gives_the_command_where_the_study_was_not_run():
    text, anchor = answer_budget_study(inputs())
    assert text == ("Not measured: the training-budget study was not run on these hidden "
                    "states (`python -m pipeline.budget --backbone tiny`).")
    assert anchor == "training-budget"


@pytest.mark.parametrize("make", [inputs, _crowded, lambda: report_inputs_with_cost(15.0)],
                         ids=["bare", "crowded", "with cost"])
def test_the_claims_bullet_counts_the_scorecards_verdicts(make):
    x = make()
    rows = claim_rows(x)
    text, anchor = answer_claims(x)
    assert anchor == CLAIMS and text.startswith(f"Of the paper's {len(rows)} claims")
    said = {verdict: int(n) for verdict, words in TALLY_WORDS.items() for form in set(words)
            for n in re.findall(rf"(\d+) {form}\b", text)}
    assert said == {v: n for v in TALLY_WORDS if (n := sum(r.verdict == v for r in rows))}
    held = [r.claim for r in rows if r.verdict == HOLDS]
    assert (f"(holding: {'; '.join(held)})" in text) is (0 < len(held) <= 2)
