"""The budget section: every sentence it can print, each way it can come out, from hand-made
points of the budget study."""

import math

import pytest

from dihal.report import budget as rb
from dihal.report.build import answer_budget
from dihal.report.document import Document
from tests.tiny import budget_curve as curve
from tests.tiny import budget_point as point
from tests.tiny import budget_study as study


def sentence(bridge_curve: dict[int, float], ridge: float | None = 4.2, l_star: int = 1) -> str:
    index = rb.index_points(study({3: bridge_curve}, None if ridge is None else {3: ridge}))
    (c,) = rb.crossings(index)
    return rb.crossing_sentence(c, l_star)


# ---------------------------------------------------------------- the points


def test_unknown_model_and_repeated_point_are_refused():
    with pytest.raises(ValueError, match="unknown model 'lasso'"):
        rb.index_points([point("lasso", 1, 128, 4.0)])
    with pytest.raises(ValueError, match="two bridge points at layer 1, 128 steps"):
        rb.index_points([point("bridge", 1, 128, 4.0), point("bridge", 1, 128, 4.1)])
    with pytest.raises(ValueError, match="hybrid NLL nan"):
        rb.index_points([point("bridge", 1, 128, math.nan)])


# ---------------------------------------------------------------- crossing the ridge map


def test_crosses_at_a_budget():
    text = sentence(curve(5.0, 4.5, 4.0))
    assert "crosses the ridge map at 2,048 steps: at or above it at 128, 512 steps" in text
    assert "-0.200 nats at 2,048 steps" in text and "Extrapolation" not in text


def test_below_at_every_budget():
    text = sentence(curve(4.1, 4.0, 3.9))
    assert "below the ridge map at every budget measured, from the smallest (128 steps) on" in text
    assert "(by 0.100 to 0.300 nats)" in text


def test_below_then_above_again():
    text = sentence(curve(4.0, 4.5, 4.1))
    assert "below the ridge map at 128, 2,048 steps but at or above it again at 512" in text


def test_not_crossed_extrapolated_to_cross():
    # -0.1 nats per doubling (5.0 at 2^7 steps: 5.7 - 0.1 log2): 4.2, the ridge map, at 2^15
    text = sentence(curve(5.0, 4.8, 4.6))
    assert "stays at or above the ridge map at every budget measured (128, 512, 2,048 steps" in text
    assert ("Extrapolation, not measured: the line through the last two budgets, hybrid NLL = "
            "5.700 - 0.332 log10(steps) (through 2 budgets, exact)") in text
    assert "at about 33,000 steps, 16x the largest budget measured" in text
    assert ("The curve does not flatten (-0.332 nats per tenfold budget over the first two "
            "budgets, -0.332 over the last two).") in text


def test_not_crossed_and_the_fit_never_reaches():
    text = sentence(curve(5.0, 5.0, 5.1))
    assert "does not fall with steps, so it never reaches the ridge map's 4.200" in text


def test_a_flattening_curve_is_extrapolated_from_its_last_two_budgets():
    """A line over all three budgets would carry the steep start past the end (it crosses the
    ridge map inside the range, where no point does); the line through the last two is the
    local slope where the measurement ends, and the sentence says the curve flattens."""
    c = rb.crossing(1, curve(5.0, 4.0, 3.99), {s: 3.95 for s in (128, 512, 2048)})
    assert (c.outcome, c.fit.n) == ("extrapolated", 2)
    assert c.fit.at(2048) == pytest.approx(3.99) and c.fit.at(512) == pytest.approx(4.0)
    assert 10 ** c.needed_log10 == pytest.approx(2048 * 4 ** 4)  # -0.01 nats a fourfold
    text = sentence(curve(5.0, 4.0, 3.99), ridge=3.95)
    assert "reaches the ridge map's 3.950 (its NLL at 2,048 steps) at about 520,000 steps, 260x" in text
    assert ("The curve flattens (-1.661 nats per tenfold budget over the first two budgets, "
            "-0.017 over the last two): if it keeps flattening, it reaches the ridge map later "
            "than that, or never.") in text


def test_not_crossed_with_two_budgets_and_with_one():
    text = sentence({128: 5.0, 512: 4.8})
    assert "through 2 budgets, exact" in text and "at about 33,000 steps, 64x" in text
    assert "One budget only: no fit to extrapolate from." in sentence({128: 5.0})


def test_without_a_ridge_map_the_crossing_is_unmeasured():
    text = sentence(curve(5.0, 4.5, 4.0), ridge=None, l_star=3)
    assert text.startswith("Layer 3 (l*): no budget has both the bridge and the ridge map")


def test_extrapolated_budgets_are_rounded_to_two_figures():
    assert [rb.rounded(v) for v in (970850.0, 32768.0, 16.0, 4.7, 1234.0)] == [
        "970,000", "33,000", "16", "4.7", "1,200"]
    assert rb.power_text(12.3) == "10^12.3"


def test_fit_is_least_squares_in_log_steps():
    fit = rb.fit_log_steps({100: 3.0, 1000: 2.0, 10000: 1.5})
    assert fit.slope == pytest.approx(-0.75) and fit.n == 3
    assert fit.at(1000) == pytest.approx(fit.intercept - 0.75 * 3)
    assert fit.intercept == pytest.approx(6.5 / 3 + 0.75 * 3)
    assert 0 < fit.r2 < 1
    assert rb.fit_log_steps({128: 4.0}) is None


# ---------------------------------------------------------------- the layer ranking


def ranking(curves: dict[int, dict[int, float]]) -> str:
    return rb.ranking_sentence(rb.index_points(study(curves)))


def test_ranking_the_same_at_every_budget():
    text = ranking({1: curve(4.0, 3.8, 3.6), 2: curve(4.5, 4.3, 4.1), 3: curve(5.0, 4.9, 4.8)})
    assert text == ("The layer ranking by the bridge's hybrid NLL is the same at every budget "
                    "measured (1 < 2 < 3, best first): it does not move between 128 and 2,048 "
                    "steps.")


def test_ranking_settles():
    text = ranking({1: curve(4.6, 3.8, 3.6), 2: curve(4.5, 4.3, 4.1), 3: curve(5.0, 4.9, 4.8)})
    assert "moves up to 512 steps and is the same from there on (1 < 2 < 3, best first)" in text
    assert "verdicts are read at 512 steps or more" in text


def test_ranking_unsettled():
    text = ranking({1: curve(4.0, 3.8, 4.2), 2: curve(4.5, 4.3, 4.1), 3: curve(5.0, 4.9, 4.8)})
    assert ("still moves between the two largest budgets (1 < 2 < 3 at 512 steps, 2 < 1 < 3 at "
            "2,048): unsettled in the range measured") in text


def test_ranking_with_one_budget_and_with_a_layer_left_out():
    assert ranking({1: {128: 4.0}, 2: {128: 4.5}}).startswith("One budget only (128 steps)")
    text = ranking({1: curve(4.0, 3.8), 2: curve(4.5, 4.3), 3: {128: 5.0}})
    assert "Layers 3 are left out of the rankings: not measured at every budget." in text
    assert "Fewer than 2 layers" in ranking({1: curve(4.0, 3.8)})


def test_spearman_between_budgets():
    index = rb.index_points(study({1: curve(4.0, 4.9, 3.6), 2: curve(4.5, 4.3, 4.1),
                                   3: curve(5.0, 3.9, 4.8)}))
    rows = {r["budgets (steps)"]: r for r in rb.ranking_pairs(index)}
    assert list(rows) == ["128 vs 512", "128 vs 2,048", "512 vs 2,048"]
    assert rows["128 vs 2,048"]["same order"] == "yes"
    assert rows["128 vs 2,048"]["Spearman of the ranking [95 %]"].startswith("1.00 [")
    assert rows["128 vs 512"]["same order"] == "no"
    assert rows["128 vs 512"]["Spearman of the ranking [95 %]"].startswith("-1.00 [")
    two = rb.index_points(study({1: curve(4.0, 3.8), 2: curve(4.5, 4.3)}))
    assert rb.ranking_pairs(two)[0]["Spearman of the ranking [95 %]"] == "n/a (fewer than 3 layers)"


# ---------------------------------------------------------------- geometry vs depth

SCORES = {1: 0.0, 2: 2.0, 3: 1.0}  # S_l orders the layers 2, 3, 1


def geometry(curves, scores=SCORES) -> str:
    return rb.geometry_sentence(rb.index_points(study(curves)), scores, l_star=2)


def test_geometry_vs_depth_reads_the_same_at_every_budget():
    text = geometry({1: curve(4.0, 3.8, 3.6), 2: curve(4.5, 4.3, 4.1), 3: curve(5.0, 4.9, 4.8)})
    assert text == ("Geometry vs depth reads the same at every budget on these 3 layers: depth "
                    "ranks them closer to the bridge's hybrid NLL than S_l does at each (128, "
                    "512, 2,048 steps).")
    text = geometry({1: curve(5.0, 4.8, 4.6), 2: curve(4.0, 3.8, 3.6), 3: curve(4.5, 4.3, 4.1)})
    assert "S_l ranks them closer to the bridge's hybrid NLL than depth does at each" in text


def test_geometry_vs_depth_reads_differently_with_the_budget():
    text = geometry({1: curve(4.0, 4.0, 5.0), 2: curve(4.5, 4.5, 3.0), 3: curve(5.0, 5.0, 4.0)})
    assert text == ("Geometry vs depth reads differently with the budget on these 3 layers: "
                    "depth closer at 128, 512 steps; S_l closer at 2,048 steps. A verdict read "
                    "at one budget does not hold at another.")
    rows = rb.geometry_rows(rb.index_points(study({1: curve(4.0, 4.0, 5.0),
                                                   2: curve(4.5, 4.5, 3.0),
                                                   3: curve(5.0, 5.0, 4.0)})), SCORES, 2)
    assert [r["closer"] for r in rows] == ["depth", "depth", "S_l"]
    assert rows[2]["layers by hybrid NLL (best first)"] == "2 (l*) < 3 < 1"
    assert rows[2]["Spearman with S_l [95 %]"].startswith("1.00 [")
    assert rows[2]["Spearman with depth (-l) [95 %]"].startswith("-0.50 [")


def test_geometry_that_orders_as_depth_cannot_be_told_apart():
    text = geometry({1: curve(4.0, 3.8, 3.6), 2: curve(4.5, 4.3, 4.1), 3: curve(5.0, 4.9, 4.8)},
                    scores={1: 3.0, 2: 2.0, 3: 1.0})
    assert "S_l and depth rank them equally close to the bridge's hybrid NLL at each" in text
    assert "S_l orders these layers as depth does (1 < 2 < 3), so on them the two cannot be told" in text


def test_geometry_without_scores_or_with_too_few_layers():
    curves = {1: curve(4.0, 3.8, 3.6), 2: curve(4.5, 4.3, 4.1), 3: curve(5.0, 4.9, 4.8)}
    assert geometry(curves, scores=None).startswith("The layer scores S_l were not given")
    assert geometry({1: curve(4.0, 3.8), 2: curve(4.5, 4.3)}).startswith(
        "With fewer than 3 layers measured at every budget")


# ---------------------------------------------------------------- our variant


def variant(residual) -> str:
    return rb.variant_sentence(rb.index_points(study(
        {1: curve(4.5, 4.4, 4.3), 2: curve(4.6, 4.5, 4.4)}, {1: 4.2, 2: 4.3}, residual)))


def test_the_variant_each_way():
    assert variant(None) == "The ridge-started bridge (our variant, not the paper's) was not run in this study."
    assert ("below the ridge map, its starting point, at every layer and budget measured (4 "
            "points, by 0.050 to 0.200 nats)") in variant({1: {128: 4.15, 2048: 4.0},
                                                           2: {128: 4.2, 2048: 4.1}})
    assert "at or above the ridge map, its starting point, at every layer and budget measured (2" \
        in variant({1: {128: 4.2, 2048: 4.3}})
    assert ("below the ridge map, its starting point, at 1 of 2 (layer, budget) points (layer 1 "
            "at 2,048 steps (-0.100)) and at or above it at the others") in variant(
        {1: {128: 4.25, 2048: 4.1}})
    assert "has no point with a ridge map" in variant({5: {128: 4.0}})


def test_the_variant_is_never_in_the_papers_rows():
    pts = study({1: curve(4.5, 4.4, 4.3)}, {1: 4.2}, {1: curve(4.123, 4.111, 4.101)})
    index = rb.index_points(pts)
    paper = rb.paper_rows(pts, index, l_star=1)
    assert len(paper) == 3 and not any("residual" in k for k in paper[0])
    assert {r["bridge NLL"] for r in paper} == {4.5, 4.4, 4.3}
    assert paper[0]["ridge NLL"] == 4.2 and paper[0]["network NLL"] == 4.5
    assert paper[0]["backbone NLL"] == 3.0 and paper[0]["layer"] == "1 (l*)"
    assert paper[0]["bridge - ridge"] == pytest.approx(0.3) and paper[0]["repeats"] == 1.0
    assert paper[2]["repeats"] == 4.0  # 2,048 x 64 tokens over 32,768 distinct
    rows = rb.variant_rows(pts, index, l_star=1)
    assert [r["residual NLL (our variant, not the paper's)"] for r in rows] == [4.123, 4.111, 4.101]
    md = _section(pts).markdown()
    paper_part, variant_part = md.split("### The ridge-started bridge: our variant, not the paper's")
    assert "4.123" not in paper_part and "4.123" in variant_part


# ---------------------------------------------------------------- the section and the figure


def _section(points, scores=None, l_star=1) -> Document:
    doc = Document("t")
    rb.budget_section(doc, points, l_star=l_star, scores=scores, backbone="tiny")
    return doc


def test_the_section_renders_every_part():
    pts = study({1: curve(4.6, 4.3, 4.0), 2: curve(4.5, 4.4, 4.3), 3: curve(5.0, 4.9, 4.8)},
                {1: 4.2, 2: 4.25, 3: 4.5}, {1: curve(4.15, 4.1, 4.0)})
    doc = _section(pts, scores={1: 1.0, 2: 2.0, 3: 0.0})
    md = doc.markdown(lambda n: f"figure-{n}.png")
    assert '<a id="training-budget"></a>' in md
    assert "## How the answers move with the training budget" in md
    assert "![Held-out hybrid NLL against optimiser steps" in md and "figure-1.png" in md
    assert "Bridges trained for 128, 512, 2,048 optimiser steps at layers 1, 2, 3" in md
    alone = _section(study({1: curve(4.6, 4.3, 4.0)}, {1: 4.2})).markdown()
    assert "optimiser steps at layer 1, under the sweep's protocol" in alone
    # one layer: the sentences say there is no ranking, and no table of n/a rows follows
    assert "there is no layer ranking to follow" in alone and "n/a (fewer than 3" not in alone
    assert "| budgets (steps) |" in md and "| steps | layers by hybrid NLL" in md
    assert "each training token is seen 4.0 times on average at 2,048 steps" in md
    assert "Layer 1 (l*): the bridge crosses the ridge map at 2,048 steps" in md
    assert "Layer 2: the bridge stays at or above the ridge map" in md
    assert "moves up to 512 steps" in md and "| 128 vs 512 |" in md
    assert "Geometry vs depth" in md and "Spearman with S_l [95 %]" in md
    assert "Layer 1 (l*): the ridge-started bridge is below the ridge map at every budget" in md
    assert doc.html().count("<table>") == 4


def test_the_section_without_points_or_with_scores_missing_a_layer():
    md = _section([]).markdown()
    assert "The budget study has no bridge points: nothing to show." in md
    pts = study({1: curve(4.0, 3.8), 2: curve(4.5, 4.3), 3: curve(5.0, 4.9)}, {1: 4.2})
    md = _section(pts, scores={1: 1.0, 2: 0.5}).markdown()
    assert "S_l was not given for layers 3: the geometry columns are left out." in md
    assert "Spearman with S_l" not in md


def test_the_answer_each_way():
    crosses = study({1: curve(4.6, 4.3, 4.0), 2: curve(4.7, 4.5, 4.3), 3: curve(5.0, 4.9, 4.8)},
                    {1: 4.2})
    assert answer_budget(crosses, l_star=1) == (
        "At l* the bridge crosses the ridge map at 2,048 steps (hybrid NLL at 2,048 steps 4.000 "
        "against the ridge map's 4.200); the layer ranking is the same at every budget.",
        "training-budget")
    above = study({1: curve(4.6, 4.5, 4.6), 2: curve(4.7, 4.4, 4.7)}, {1: 4.2})
    assert answer_budget(above, l_star=1)[0] == (
        "At l* the bridge stays at or above the ridge map at every budget measured (hybrid NLL at "
        "2,048 steps 4.600 against the ridge map's 4.200); the layer ranking is unsettled in the "
        "range measured.")
    assert answer_budget(above, l_star=7)[0].startswith("The budget study has no bridge at l* = 7")


@pytest.mark.parametrize("bridge,ridge,head", [
    (curve(4.1, 4.0, 3.9), {1: 4.2}, "At l* the bridge is below the ridge map from the smallest "
     "budget on (hybrid NLL at 2,048 steps 3.900 against the ridge map's 4.200)"),
    (curve(4.0, 4.5, 4.1), {1: 4.2}, "At l* the bridge goes below the ridge map and back to or "
     "above it (hybrid NLL at 2,048 steps 4.100 against the ridge map's 4.200)"),
    (curve(4.1, 4.0, 3.9), None, "At l* the bridge has no ridge map to compare with"),
])
def test_the_answer_on_the_other_crossings(bridge, ridge, head):
    text, _ = answer_budget(study({1: bridge, 2: curve(5.0, 4.9, 4.8)}, ridge), l_star=1)
    assert text == head + "; the layer ranking is the same at every budget."


def test_the_answer_on_the_other_rankings():
    settles = study({1: curve(5.0, 4.0, 3.9), 2: curve(4.7, 4.5, 4.3)}, {1: 4.2})
    assert answer_budget(settles, l_star=1)[0].endswith(
        "; the layer ranking settles from 512 steps.")
    one = study({1: {128: 4.0}, 2: {128: 4.5}}, {1: 4.2})
    assert answer_budget(one, l_star=1)[0] == (
        "At l* the bridge is below the ridge map from the smallest budget on (hybrid NLL at 128 "
        "steps 4.000 against the ridge map's 4.200); one budget only, so the layer ranking's "
        "movement is not read.")
    alone = study({1: curve(4.6, 4.3, 4.0)}, {1: 4.2})
    assert answer_budget(alone, l_star=1)[0].endswith(
        "; fewer than 2 layers were measured at every budget, so there is no ranking.")


def test_the_figure_is_a_deterministic_png():
    pts = study({1: curve(4.6, 4.3, 4.0), 2: curve(4.5, 4.4, 4.3)}, {1: 4.2, 2: 4.25},
                {1: curve(4.15, 4.1, 4.0)})
    index = rb.index_points(pts)
    png = rb.plot_budget(index, 1, "t")
    assert png.startswith(b"\x89PNG") and png == rb.plot_budget(index, 1, "t")
    assert png != rb.plot_budget(rb.index_points(pts[:-3]), 1, "t")  # the variant's line shows


# ---------------------------------------------------------------- in the report


def test_the_report_says_the_study_was_not_run_and_how_to_run_it():
    from dihal.report.build import build_report
    from tests.tiny import report_inputs

    md = build_report(report_inputs()).markdown
    section = md[md.index("## How the answers move with the training budget"):]
    section = section[: section.index("\n## ", 1)]
    assert "was not run on these hidden states" in section
    assert "`python -m pipeline.budget --backbone tiny`" in section
    assert "![" not in section  # no figure of points that do not exist


def test_the_report_shows_the_studys_points_with_the_layer_scores():
    from dataclasses import replace

    from dihal.report.build import build_report
    from tests.tiny import report_inputs

    x = report_inputs()
    x = replace(x, budget=study({1: curve(5.0, 4.6, 4.1), 3: curve(5.5, 5.2, 4.9)},
                                ridge={1: 4.3, 3: 4.8}))
    md = build_report(x).markdown
    section = md[md.index("## How the answers move with the training budget"):]
    section = section[: section.index("\n## ", 1)]
    assert "was not run on these hidden states" not in section
    assert "Does the bridge cross the ridge map?" in section
    assert "Geometry vs depth at each budget" in section
    assert "S_l was not given" not in section  # the layer score's S_l of layers 1 and 3
