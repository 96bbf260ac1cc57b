"""The report's typed inputs (dihal.inputs): each family reads what storage reads back, older
artifacts' tables and infos included (a column or key added later is optional)."""

from dihal.inputs import GeometryRow, LayerScoreInfo, LocateInputs, Picks, ScoreRow
from dihal.report.build import build_report
from tests.tiny import report_inputs, report_raw


def test_layer_score_info_of_an_artifact_before_the_stability_checks():
    old = {"l_star": 2, "selected": {"none": 1, "robust": 2},
           "spearman_vs_depth": {"none": 0.3, "robust": None}}
    info = LayerScoreInfo.from_dict(old)
    assert (info.l_star, info.selected, info.stability) == (2, {"none": 1, "robust": 2}, {})
    seq = info.sequence_stability
    assert (seq.bootstrap, seq.split_half, seq.seconds) == (None, None, None)
    md = build_report(report_inputs(score=old)).markdown
    assert "l*'s stability over resampled sequences was not computed" in md


def test_layer_score_info_reads_the_stability_checks():
    info = LayerScoreInfo.from_dict({
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
    seq = info.sequence_stability
    assert seq.bootstrap is None and seq.split_half.splits == [(2, 3)]
    assert (seq.sequences, seq.seconds, seq.split_half.agreement) == (8, 1.5, 0.0)


def test_locate_inputs_from_the_tables():
    raw = report_raw()
    raw["score_rows"][0].pop("S")  # layer 0 of an older table: no score column
    loc = LocateInputs.from_dicts(raw["geometry_rows"], [{"layer": 1, "cond_cka": 0.5}],
                                  raw["score_rows"], raw["score"])
    assert loc.geometry[1] == GeometryRow(1, "none", {"m_curv": 0.1, "m_mono": 0.2, "k_eff": 3.0})
    assert loc.scores[0] == ScoreRow(0, "none", None) and loc.scores[2].S == 1.0
    assert loc.predictors == [{"layer": 1, "cond_cka": 0.5}]
    assert loc.score.selected == {"none": 1, "robust": 2}
