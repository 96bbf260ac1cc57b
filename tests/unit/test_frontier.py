"""The temperature frontier (issue 18): which points lie on it, the sentence that reads it each
way it can come out, a baseline's points (sampled once per temperature, the main and native
rows reused, one point for a deterministic recipe), and its section in the report."""

import math

import pytest

from dihal.compare.stage import baseline_frontier
from dihal.evaluate.frontier import (
    clearly_dominates,
    dominates,
    frontier_sentence,
    on_frontier,
    point,
)


def _p(model, role, t, ppl, div, **extra):
    return {**point(model, role, t, {"gen_ppl": ppl, "gen_ppl_low": ppl * 0.9,
                                     "gen_ppl_high": ppl * 1.1, "diversity": div,
                                     "diversity_spacy": div, "mean_judge_length": 20.0},
                    sampled=True), **extra}


def test_dominance_needs_lower_gen_ppl_at_equal_or_higher_diversity():
    a, b = _p("a", "x", 1.0, 10.0, 0.5), _p("b", "x", 1.0, 20.0, 0.5)
    assert dominates(a, b) and not dominates(b, a)
    assert not dominates(a, a)  # equal on both: neither dominates
    c = _p("c", "x", 1.0, 5.0, 0.2)  # lower Gen.PPL, but less diverse: both on the frontier
    assert on_frontier([a, c]) == [True, True]
    assert on_frontier([a, b, c]) == [True, False, True]
    nan = _p("n", "x", 1.0, math.nan, 0.9)
    assert on_frontier([a, nan]) == [True, False]  # no finite Gen.PPL: never on it


def test_clear_dominance_needs_the_intervals_apart():
    """Gen.PPL intervals +-10 %: 10 vs 20 are apart (11 < 18), 10 vs 11.5 overlap."""
    a, b = _p("a", "x", 1.0, 10.0, 0.5), _p("b", "x", 1.0, 20.0, 0.5)
    assert clearly_dominates(a, b) and not clearly_dominates(b, a)
    near = _p("n", "x", 1.0, 11.5, 0.5)
    assert dominates(a, near) and not clearly_dominates(a, near)
    assert on_frontier([a, near]) == [True, False]
    assert on_frontier([a, near], clearly=True) == [True, True]
    # the diversity side: apart upwards at an overlapping Gen.PPL
    up = {**_p("u", "x", 1.0, 11.0, 0.8), "diversity_low": 0.75, "diversity_high": 0.85}
    low = {**_p("l", "x", 1.0, 11.0, 0.5), "diversity_low": 0.45, "diversity_high": 0.55}
    assert clearly_dominates(up, low) and not clearly_dominates(low, up)
    # a lower Gen.PPL beyond the intervals does not dominate a clearly more diverse point
    assert not clearly_dominates(a, up)
    # no intervals: each point is its own interval
    bare = {k: v for k, v in a.items() if not k.endswith(("_low", "_high"))}
    assert clearly_dominates(bare, near)


# each way the sentence can come out
DIHAL_ON = [_p("DiHAL", "dihal", 0.7, 30.0, 0.4), _p("DiHAL", "dihal", 1.0, 60.0, 0.8),
            _p("backbone", "backbone", 0.7, 10.0, 0.3), _p("backbone", "backbone", 1.0, 20.0, 0.7),
            _p("sed", "baseline", None, 500.0, 0.5)]
DIHAL_OFF = [_p("DiHAL", "dihal", 0.7, 30.0, 0.4), _p("DiHAL", "dihal", 1.0, 60.0, 0.6),
             _p("backbone", "backbone", 0.7, 10.0, 0.5), _p("backbone", "backbone", 1.0, 20.0, 0.7)]


@pytest.mark.parametrize(("points", "says"), [
    (DIHAL_ON, ["At the temperatures measured (0.7, 1), 2 of the 3 models have a point on the "
                "frontier", "DiHAL (T = 1), backbone (T = 0.7, 1)",
                "; every point of sed is dominated", ". DiHAL lies on it at T = 1."]),
    (DIHAL_OFF, ["1 of the 2 models have a point", "backbone (T = 0.7, 1)",
                 "every point of DiHAL is dominated",
                 ". DiHAL does not: at each temperature measured another point has a lower "
                 "Gen.PPL at equal or higher diversity."]),
    (DIHAL_ON[:2] + [_p("backbone", "backbone", 0.7, 10.0, 0.3)],
     ["every one of the 2 models has a point on the frontier", "DiHAL lies on it at T = 0.7, 1."]),
    ([], ["No temperature frontier was measured"]),
    ([_p("DiHAL", "dihal", 1.0, math.nan, 0.5)], ["No frontier point has a finite Gen.PPL"]),
])
def test_frontier_sentence_each_way(points, says):
    text = frontier_sentence(points)
    for s in says:
        assert s in text, (s, text)
    # "is dominated" only where some model has no point on the frontier
    assert ("is dominated" in text) == any("is dominated" in s for s in says)


def test_a_baseline_samples_each_missing_temperature_once():
    """The common temperature's and the native one's points are those rows' (not sampled
    again); the others are sampled once each; a deterministic recipe gives one point."""
    row = {"gen_ppl": 40.0, "diversity": 0.6, "sample_nll": [1.0], "sample_seconds": 3.0}
    native = {"gen_ppl": 30.0, "diversity": 0.5, "sample_seconds": 3.0}
    asked = []

    def measure(t):
        asked.append(t)
        return {"gen_ppl": 35.0, "diversity": 0.55, "sample_seconds": 2.0}

    pts = baseline_frontier("codar", True, (0.7, 0.85, 1.0), {1.0: row, 0.7: native}, measure)
    assert asked == [0.85]
    assert [(p["temperature"], p["gen_ppl"], p["sampled"], p["sample_seconds"]) for p in pts] == [
        (0.7, 30.0, False, 0.0), (0.85, 35.0, True, 2.0), (1.0, 40.0, False, 0.0)]
    assert all("sample_nll" not in p for p in pts)  # lean: no per-sample lists
    sed = baseline_frontier("sed", False, (0.7, 0.85, 1.0), {None: row}, measure)
    assert asked == [0.85] and [(p["temperature"], p["sampled"]) for p in sed] == [(None, False)]
    assert baseline_frontier("sed", False, (), {None: row}, measure) == []


def test_report_section_plots_and_tabulates_the_frontier():
    from dihal.report.build import build_report
    from dihal.report.common import FRONTIER
    from tests.tiny import report_inputs

    x = report_inputs()
    with_points = type(x)(**{**x.__dict__, "comparison": {**x.comparison, "frontier": DIHAL_ON}})
    md = build_report(with_points).markdown
    section = md[md.index("3c. Gen.PPL against diversity across temperatures"):]
    assert "DiHAL lies on it at T = 1" in section and "data:image/png;base64," in section
    for column in ("| model | T | Gen.PPL [95 %] | diversity | diversity (spaCy) | mean length "
                   "(judge tokens) | on the frontier |", "none (deterministic rounding)"):
        assert column in section, column
    assert FRONTIER in build_report(with_points).html
    assert "No temperature frontier was measured" in build_report(x).markdown


def test_the_reports_opening_answers_read_the_frontier():
    """The sentence is among "What this run shows", linking to section 3c; without points it
    says none was measured."""
    from dihal.report.build import build_report
    from tests.tiny import report_inputs

    x = report_inputs()
    with_points = type(x)(**{**x.__dict__, "comparison": {**x.comparison, "frontier": DIHAL_ON}})
    for got, says in ((with_points, "DiHAL lies on it at T = 1"),
                      (x, "No temperature frontier was measured")):
        md = build_report(got).markdown
        answers = md[md.index("What this run shows"):md.index("3c. Gen.PPL against")]
        answers = answers[:answers.index("\n## ", 1)] if "\n## " in answers[1:] else answers
        assert says in answers and "#temperature-frontier" in answers, answers[:2000]


@pytest.mark.parametrize(("points", "says"), [
    # DiHAL off the frontier beyond the intervals at every temperature
    ([_p("DiHAL", "dihal", 1.0, 60.0, 0.5), _p("backbone", "backbone", 1.0, 20.0, 0.6)],
     ["1 of the 1 dominated points stay dominated: DiHAL (T = 1)",
      "DiHAL is off the frontier beyond the intervals at every temperature."]),
    # DiHAL off the frontier, but only within sampling noise
    ([_p("DiHAL", "dihal", 1.0, 22.0, 0.6), _p("backbone", "backbone", 1.0, 20.0, 0.6)],
     ["0 of the 1 dominated points stay dominated: every domination above is within sampling "
      "noise", "within the intervals DiHAL may lie on it (T = 1)."]),
    # DiHAL on it; another model off it beyond the intervals
    (DIHAL_ON, ["2 of the 2 dominated points stay dominated: DiHAL (T = 0.7), sed (T = none)."]),
    # nothing off the frontier
    ([_p("DiHAL", "dihal", 1.0, 60.0, 0.8), _p("backbone", "backbone", 1.0, 20.0, 0.6)],
     ["Read with the 95 % intervals, no point is off the frontier either."]),
])
def test_the_frontier_read_with_its_intervals_each_way(points, says):
    text = frontier_sentence(points)
    for s in says:
        assert s in text, (s, text)
    # DiHAL's own standing under the intervals is said only where it is off the frontier
    assert ("DiHAL is off the frontier beyond" in text or "DiHAL may lie on it" in text) == (
        "DiHAL does not" in text)
