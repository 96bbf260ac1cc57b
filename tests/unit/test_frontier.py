"""The temperature frontier: which points lie on it, the sentence that reads it each
way it can come out, a baseline's points (sampled once per temperature, the main and native
rows reused, one point for a deterministic recipe), and its section in the report."""

import math
from dataclasses import replace

import pytest

from dihal.compare.stage import baseline_frontier
from dihal.evaluate.frontier import (
    clearly_dominates,
    dominates,
    frontier_answer,
    frontier_sentence,
    on_frontier,
)
from dihal.generation_rows import BASELINE_ROW, GenerationRow, generation_rows
from dihal.rows import Estimate
from tests.tiny import frontier_point as _p
from tests.tiny import frontier_point_with_intervals as _ci


def _metrics(**columns) -> GenerationRow:
    """A baseline's metrics at one temperature (dihal.compare.stage._samples_and_metrics)."""
    return GenerationRow.from_dict(columns, BASELINE_ROW)


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
    row = _metrics(gen_ppl=40.0, diversity=0.6, sample_nll=[1.0], sample_seconds=3.0)
    native = _metrics(gen_ppl=30.0, diversity=0.5, sample_seconds=3.0)
    asked = []

    def measure(t):
        asked.append(t)
        return _metrics(gen_ppl=35.0, diversity=0.55, sample_seconds=2.0)

    pts = [p.to_dict() for p in baseline_frontier("codar", True, (0.7, 0.85, 1.0),
                                                  {1.0: row, 0.7: native}, measure)]
    assert asked == [0.85]
    assert [(p["temperature"], p["gen_ppl"], p["sampled"], p["sample_seconds"]) for p in pts] == [
        (0.7, 30.0, False, 0.0), (0.85, 35.0, True, 2.0), (1.0, 40.0, False, 0.0)]
    assert all("sample_nll" not in p for p in pts)  # lean: no per-sample lists
    sed = baseline_frontier("sed", False, (0.7, 0.85, 1.0), {None: row}, measure)
    assert asked == [0.85] and [(p.temperature, p.sampled) for p in sed] == [(None, False)]
    assert baseline_frontier("sed", False, (), {None: row}, measure) == []


def test_report_section_plots_and_tabulates_the_frontier():
    from dihal.report.build import build_report
    from dihal.report.common import FRONTIER
    from tests.tiny import report_inputs

    x = report_inputs()
    with_points = replace(x, comparison=replace(x.comparison, frontier=generation_rows(DIHAL_ON)))
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
    with_points = replace(x, comparison=replace(x.comparison, frontier=generation_rows(DIHAL_ON)))
    for got, says in ((with_points, "DiHAL lies on the Gen.PPL/diversity frontier at T = 1"),
                      (x, "No temperature frontier was measured")):
        md = build_report(got).markdown
        answers = md[md.index("What this run shows"):md.index("3c. Gen.PPL against")]
        answers = answers[:answers.index("\n## ", 1)] if "\n## " in answers[1:] else answers
        assert says in answers and "#temperature-frontier" in answers, answers[:2000]


@pytest.mark.parametrize(("points", "says"), [
    # DiHAL off the frontier beyond the intervals at every temperature
    ([_p("DiHAL", "dihal", 1.0, 60.0, 0.5), _p("backbone", "backbone", 1.0, 20.0, 0.6)],
     ["1 of the 1 dominated points stay dominated: DiHAL (T = 1)",
      "DiHAL is off the frontier beyond the intervals at the one temperature measured."]),
    ([_p("DiHAL", "dihal", 0.7, 30.0, 0.3), *DIHAL_OFF[1:]],
     ["DiHAL is off the frontier beyond the intervals at every temperature."]),
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


@pytest.mark.parametrize(("points", "says"), [
    (DIHAL_ON, "DiHAL lies on the Gen.PPL/diversity frontier at T = 1; 2 of 3 models lie on it "
               "(DiHAL, backbone)."),
    (DIHAL_OFF, "DiHAL is off the Gen.PPL/diversity frontier beyond the 95 % intervals at every "
                "temperature measured; 1 of 2 models lie on it (backbone)."),
    ([_p("DiHAL", "dihal", 1.0, 60.0, 0.5), _p("backbone", "backbone", 1.0, 20.0, 0.6)],
     "DiHAL is off the Gen.PPL/diversity frontier beyond the 95 % intervals at the one "
     "temperature measured; 1 of 2 models lie on it (backbone)."),
    ([_p("DiHAL", "dihal", 1.0, 22.0, 0.6), _p("backbone", "backbone", 1.0, 20.0, 0.6)],
     "DiHAL is off the Gen.PPL/diversity frontier, but within the 95 % intervals it may lie on "
     "it (T = 1); 1 of 2 models lie on it (backbone)."),
    (DIHAL_ON[2:], "1 of 2 models lie on the Gen.PPL/diversity frontier (backbone); no dihal "
                   "point was measured."),
    # the held-out text dominates every model's point
    ([_p("DiHAL", "dihal", 1.0, 60.0, 0.5), _p("backbone", "backbone", 1.0, 20.0, 0.6),
      _p("held-out text", "reference", None, 10.0, 0.7)],
     "DiHAL is off the Gen.PPL/diversity frontier beyond the 95 % intervals at the one "
     "temperature measured; no model lies on it: the held-out text dominates every point."),
    ([], "No temperature frontier was measured (frontier_temperatures is empty)."),
])
def test_the_frontier_answer_each_way(points, says):
    """The opening answer in short: it agrees with the long reading's standing of DiHAL."""
    assert frontier_answer(points) == says
    long = frontier_sentence(points)
    assert ("DiHAL lies on it" in long) is says.startswith("DiHAL lies on")
    assert ("may lie on it" in long) is ("may lie on it" in says)


def test_a_less_diverse_point_never_clearly_dominates_and_one_dominator_serves_both_tests():
    """The backbone at T = 1 is on the frontier (nothing has a lower Gen.PPL at its diversity);
    a point with a far lower Gen.PPL but a lower diversity (its interval overlapping) must not
    mark it "dominated beyond the 95 % intervals" as well."""
    from dihal.report.frontier import frontier_table

    backbone = _ci("backbone", "backbone", 1.0, 114.0, 92.0, 143.0, 0.82, 0.80, 0.84)
    colder = _ci("backbone", "backbone", 0.7, 40.0, 35.0, 46.0, 0.78, 0.74, 0.83)
    assert not dominates(colder, backbone) and not clearly_dominates(colder, backbone)
    assert on_frontier([backbone, colder]) == [True, True]
    assert on_frontier([backbone, colder], clearly=True) == [True, True]
    rows = frontier_table(generation_rows([backbone, colder]))
    assert all(not (r["on the frontier"] == "yes" and
                    r["dominated beyond the 95 % intervals"] == "yes") for r in rows)
    # the clear test is the point test's dominator with its intervals apart
    worse = _ci("DiHAL", "dihal", 1.0, 780.0, 580.0, 1030.0, 0.80, 0.78, 0.82)
    assert dominates(backbone, worse) and clearly_dominates(backbone, worse)
    assert not clearly_dominates(colder, worse)  # lower diversity: never its dominator


def test_held_out_text_anchors_the_frontier_and_degenerate_diversity_earns_nothing():
    """A point more diverse than real text (a degenerate sampler) is on the plain frontier by
    that alone; with the held-out text's point as anchor its excess diversity counts for
    nothing, so the held-out text (lower Gen.PPL, equal capped diversity) dominates it."""
    from dihal.evaluate.frontier import anchor_point, at_matched_diversity

    text = anchor_point({"gen_ppl": 30.0, "gen_ppl_low": 27.0, "gen_ppl_high": 33.0,
                         "diversity": 0.85, "diversity_low": 0.83, "diversity_high": 0.87},
                        64).to_dict()
    assert text["role"] == "reference" and text["temperature"] is None
    salad = _ci("DiHAL", "dihal", 1.0, 800.0, 600.0, 1000.0, 0.97, 0.96, 0.98)
    cold = _ci("DiHAL", "dihal", 0.7, 300.0, 250.0, 350.0, 0.75, 0.72, 0.78)
    bb = [_ci("backbone", "backbone", 0.7, 20.0, 18.0, 22.0, 0.70, 0.68, 0.72),
          _ci("backbone", "backbone", 1.0, 60.0, 54.0, 66.0, 0.90, 0.88, 0.92)]
    assert on_frontier([salad, cold, *bb]) == [True, False, True, True]  # no anchor
    assert on_frontier([salad, cold, *bb, text]) == [False, False, True, False, True]
    assert on_frontier([salad, cold, *bb, text], clearly=True)[0] is False
    # Gen.PPL at the held-out text's diversity, interpolated in log between temperatures
    got = {g["model"]: g for g in at_matched_diversity([salad, cold, *bb, text], 0.85)}
    assert got["DiHAL"]["gen_ppl"] == pytest.approx(math.exp(
        math.log(300) + (math.log(800) - math.log(300)) * (0.85 - 0.75) / (0.97 - 0.75)))
    assert got["backbone"]["gen_ppl"] == pytest.approx(math.exp(
        math.log(20) + (math.log(60) - math.log(20)) * 0.75))
    assert "held-out text" not in got
    only_cold = at_matched_diversity([cold, text], 0.85)
    assert only_cold == [{"model": "DiHAL", "gen_ppl": None, "low": 0.75, "high": 0.75}]
    sentence = frontier_sentence([salad, cold, *bb, text])
    for says in ("Held-out text, cut and scored like the samples, has Gen.PPL 30.0 at diversity "
                 "0.850: the anchor; diversity beyond it counts as no better (2 points exceed "
                 "it: DiHAL (T = 1), backbone (T = 1))",
                 "1 of the 2 models have a point on the frontier",
                 "diversity counted up to the held-out text's", "every point of DiHAL is dominated",
                 "At the held-out text's diversity (0.850; Gen.PPL interpolated in log between "
                 "each model's temperatures), DiHAL has Gen.PPL 468.5; backbone has Gen.PPL 45.6"):
        assert says in sentence, (says, sentence)
    assert "No held-out text was scored" in frontier_sentence([salad, cold, *bb])
    assert "the held-out text dominates every one" in frontier_sentence([salad, text])
    from dihal.report.frontier import frontier_table

    table = frontier_table(generation_rows([salad, text]))
    assert [(r["T"], r["on the frontier"]) for r in table] == [("1", "no"), ("n/a (real text)",
                                                                           "yes")]


# the default's frontier: one temperature, the main rows', and the held-out text
ONE_T = [_p("DiHAL", "dihal", 1.0, 60.0, 0.8), _p("backbone", "backbone", 1.0, 20.0, 0.9),
         _p("sed", "baseline", None, 500.0, 0.5)]


def _text(diversity=0.85):
    from dihal.evaluate.frontier import anchor_point

    return anchor_point({"gen_ppl": 30.0, "gen_ppl_low": 27.0, "gen_ppl_high": 33.0,
                         "diversity": diversity, "diversity_low": diversity - 0.02,
                         "diversity_high": diversity + 0.02}, 64).to_dict()


def test_the_frontier_at_one_temperature_says_what_it_shows_and_what_it_cannot():
    """At one temperature no model's Gen.PPL can be read at the held-out text's diversity (a
    model needs two points around it): the sentence says so, and reads each model's diversity
    against the held-out text's instead; the other readings stay."""
    from dihal.evaluate.frontier import at_matched_diversity, measured_temperatures

    points = [*ONE_T, _text()]
    assert measured_temperatures(points) == [1.0]
    assert all(g["gen_ppl"] is None for g in at_matched_diversity(points, 0.85))
    text = frontier_sentence(points)
    for says in ("At the one temperature measured (T = 1), 1 of the 3 models have a point on "
                 "the frontier", "Measured at one temperature, each point is a main-table row",
                 "need two or more temperatures. Less diverse than the held-out text (0.850): "
                 "DiHAL (0.800), sed (0.500); as diverse or more: backbone (0.900). ",
                 "Read with the 95 % intervals"):
        assert says in text, (says, text)
    assert "interpolated" not in text and "At the temperatures measured" not in text
    everyone_above = frontier_sentence([*ONE_T, _text(0.4)])
    assert "need two or more temperatures. As diverse or more: DiHAL (0.800)" in everyone_above
    assert "Less diverse" not in everyone_above
    bare = frontier_sentence(ONE_T)  # no anchor: no diversity to read against
    assert "need two or more temperatures. " in bare and "held-out text (" not in bare
    off = frontier_sentence([_p("DiHAL", "dihal", 1.0, 60.0, 0.5),
                             _p("backbone", "backbone", 1.0, 20.0, 0.6)])
    assert "DiHAL does not: at the one temperature measured another point has" in off
    # two temperatures: the interpolation, not the one-temperature reading
    assert "Measured at one temperature" not in frontier_sentence(DIHAL_ON + [_text()])


def test_the_default_frontier_samples_nothing_again():
    """The default's frontier is the main temperature alone: DiHAL's, the backbone's and each
    baseline's point is its main row (CoDAR's native row is not a frontier point there), so
    no model is sampled again; the study preset's whole frontier samples the others."""
    from dihal.config import BaselineRunConfig, EvalConfig
    from dihal.evaluate.frontier import points_at
    from dihal.run.profiles import PROFILES

    cfg, base = EvalConfig(), BaselineRunConfig()
    row = _metrics(gen_ppl=40.0, diversity=0.6, sample_seconds=3.0)
    asked = []

    def measure(t):
        asked.append(t)
        return _metrics(gen_ppl=35.0, diversity=0.55, sample_seconds=2.0)

    pts = points_at(cfg.frontier_temperatures, {cfg.temperature: row}, measure,
                    lambda t, m, sampled: (t, m.gen_ppl.value, sampled))
    assert pts == [(1.0, 40.0, False)] and asked == []
    codar = baseline_frontier("codar", True, base.frontier_temperatures,
                              {base.temperature: row, 0.7: replace(row, gen_ppl=Estimate(30.0))},
                              measure)
    assert [(p.temperature, p.sampled) for p in codar] == [(1.0, False)] and asked == []
    whole = EvalConfig(frontier_temperatures=tuple(PROFILES["study"]["eval"]["frontier_temperatures"]))
    points_at(whole.frontier_temperatures, {whole.temperature: row}, measure,
              lambda t, m, sampled: t)
    assert asked == [0.7, 0.85]


def test_the_report_at_one_temperature_gives_the_command_for_the_whole_frontier():
    """The default report's frontier section says what one temperature shows and names the
    driver's command that draws the whole frontier (the answer stays one short sentence and
    links to it). With several temperatures it does not."""
    from dihal.report.build import build_report
    from tests.tiny import report_inputs

    x = report_inputs()
    command = f"`python -m pipeline.main --backbone {x.backbone} --profile study`"

    def section_and_answers(points):
        md = build_report(replace(x, comparison=replace(
            x.comparison, frontier=generation_rows(points)))).markdown
        start = md.index("3c. Gen.PPL against diversity across temperatures")
        end = md.index("\n## ", start)
        answers = md[md.index("What this run shows"):md.index("\n## ", md.index("What this run shows"))]
        return md[start:end], answers

    section, answers = section_and_answers([*ONE_T, _text()])
    for says in ("At the one temperature measured (T = 1)",
                 "At one temperature (T = 1) no model is sampled again: each point is its "
                 "main-table row", "The whole frontier (T = 0.7, 0.85, 1) is drawn by the study "
                 "preset, with its larger samples (128 per model): " + command,
                 "Gen.PPL against diversity at T = 1", "| on the frontier |"):
        assert says in section, (says, section[:3000])
    assert command not in answers and "#temperature-frontier" in answers
    section, answers = section_and_answers(DIHAL_ON)
    assert "--profile study" not in section and "--profile study" not in answers
    assert "A lower temperature can buy a lower Gen.PPL" in section
