"""Sentences of the report that must say no more than the code computes: what the ridge
control is and what losing to it means, the primary test read before the exploratory
standings, and the frontier's interval rule as clearly_dominates applies it."""

import pytest

from dihal.evaluate.frontier import CLEAR_RULE, clearly_dominates, dominates, frontier_sentence
from dihal.report.bridgeability import LOSING_TO_THE_BAR, RIDGE_BAR, _regression_summary
from dihal.report.build import build_report
from dihal.rows import RegressionRow
from tests.tiny import frontier_point_with_intervals as _ci
from tests.tiny import report_inputs as inputs


def _regression(layer, bridge_nll, control_nll):
    return RegressionRow(layer, 0.5, 0.6, bridge_nll, control_nll, 0.4, 0.3, 0.2)


def _section(md: str, start: str, end: str) -> str:
    return md[md.index(start):md.index(end, md.index(start))]


def test_the_ridge_control_is_called_a_context_free_lower_bar_not_the_best_a_denoiser_can_do():
    md = build_report(inputs(regression=[_regression(1, 3.0, 2.0).to_dict()])).markdown
    section = _section(md, "## 2a. The bridge against a regression control", "\n## 3")
    assert RIDGE_BAR in section and "positionwise linear map" in section
    assert "blind to the prefix" in section
    assert "where h_l is a function of hs[0]" not in md


@pytest.mark.parametrize(("nlls", "undertrained"), [
    ([(1, 2.0, 3.0), (2, 2.0, 3.0)], False),  # the bridge beats the map everywhere
    ([(1, 3.0, 2.0), (2, 2.0, 3.0)], True),   # it loses at one layer
    ([(1, 3.0, 2.0), (2, 3.0, 2.0)], True),   # at every layer
])
def test_losing_to_the_ridge_map_is_read_as_undertrained_or_too_small_only_where_it_happens(
        nlls, undertrained):
    text = _regression_summary([_regression(*n) for n in nlls], [1, 2])
    assert (LOSING_TO_THE_BAR in text) is undertrained
    assert ("undertrained or too small" in text) is undertrained


def test_the_primary_test_comes_before_the_exploratory_standings_which_say_so_where_they_start():
    md = build_report(inputs()).markdown
    section = _section(md, "## 2. Does the score predict bridgeability?", "\n## 2a.")
    primary = section.index("The primary test, fixed before any bridge was trained")
    explored = section.index("Exploratory, not the primary test")
    assert primary < explored
    # the exploratory winner is named only after the label
    assert "The highest Spearman against -val loss is" in section
    assert section.index("The highest Spearman against -val loss is") > explored
    opening = section[:primary]
    assert "Spearman" not in opening and "Exploratory" not in opening


def test_the_printed_interval_rule_requires_point_domination_as_the_code_does():
    """A point whose Gen.PPL interval lies wholly below another's but which is less diverse
    does not dominate it, with or without the intervals; the sentence says so."""
    backbone = _ci("backbone", "backbone", 1.0, 114.0, 92.0, 143.0, 0.82, 0.80, 0.84)
    colder = _ci("backbone", "backbone", 0.7, 40.0, 35.0, 46.0, 0.78, 0.74, 0.83)
    worse = _ci("DiHAL", "dihal", 1.0, 780.0, 580.0, 1030.0, 0.80, 0.78, 0.82)
    assert not dominates(colder, backbone) and not clearly_dominates(colder, backbone)
    assert clearly_dominates(backbone, worse) and not clearly_dominates(colder, worse)
    text = frontier_sentence([backbone, colder, worse])
    assert CLEAR_RULE in text and "dominates it as points" in text
    assert "a diversity interval not wholly below" not in text
    assert "1 of the 1 dominated points stay dominated: DiHAL (T = 1)" in text
