"""The typed rows serialise to exactly the columns their artifacts have always had, and read
them back."""

import math

from dihal.generation_rows import COMPARISON_ROW, GenerationRow
from dihal.rows import ABSENT, BridgeMetrics, Estimate, RegressionRow, SpearmanRow, number


def _metrics(layer, nll, recon):
    return BridgeMetrics(layer=layer, val_loss=0.3, recon_error=recon, hybrid_nll=nll,
                         backbone_nll=2.0, top1_agreement=0.7, hybrid_ppl=9.0, backbone_ppl=7.0,
                         init_val_loss=1.0, train_loss=0.2, train_steps=4, train_tokens=64, seconds=1.0,
                         resumed_from_step=0, denoiser_parameters=100)


def test_regression_row_columns_and_verdicts():
    row = RegressionRow.of(_metrics(2, 3.0, 0.5), _metrics(2, 3.5, 0.4))
    d = row.to_dict()
    assert list(d) == ["layer", "bridge_recon_error", "regression_recon_error",
                       "bridge_hybrid_nll", "regression_hybrid_nll", "bridge_top1",
                       "regression_top1", "regression_mse", "bridge_better_nll",
                       "bridge_better_recon"]
    assert d["bridge_better_nll"] is True and d["bridge_better_recon"] is False
    assert RegressionRow.from_dict(d) == row
    # NaN never counts as better (as the dict comparison it replaces)
    assert RegressionRow.of(_metrics(1, math.nan, 0.5), _metrics(1, 3.0, 0.5)).bridge_better_nll is False


def test_spearman_row_reads_a_row_without_intervals():
    row = SpearmanRow.from_dict({"predictor": "S_l (none)", "spearman_vs_-val_loss": 0.5})
    assert row.of().interval() == (0.5, None, None) and row.of().vs_depth == ""
    assert row.of("hybrid_nll") is None
    # a row written before the paired test (bridgeability 2) has none of its columns
    assert row.of().difference() == (None, None, None) and row.of().p_holm is None
    assert row.of().partial_interval() == (None, None, None)


def test_spearman_row_round_trips_the_paired_test_and_reads_nan_as_undefined():
    from dihal.rows import Spearman

    s = Spearman(0.9, 0.7, 1.0, "above", 0.4, 0.1, 0.6, 0.002, 0.012, 0.5, 0.2, 0.8)
    row = SpearmanRow("S_l (none)", {"val_loss": s})
    d = row.to_dict()
    assert d["diff_vs_depth_-val_loss"] == 0.4 and d["p_holm_vs_depth_-val_loss"] == 0.012
    assert d["partial_low_given_depth_-val_loss"] == 0.2
    assert SpearmanRow.from_dict(d) == row
    undefined = SpearmanRow.from_dict({**d, "partial_given_depth_-val_loss": math.nan})
    assert undefined.of().partial_interval() == (None, 0.2, 0.8)


def test_generation_row_keeps_its_columns_and_reads_intervals():
    d = {"model": "dihal", "role": "dihal", "gen_ppl": 50.0, "gen_ppl_low": 45.0,
         "gen_ppl_high": 55.0, "mauve": math.nan, "seq_len": 16}
    row = GenerationRow.from_dict(d)
    assert row.kind == COMPARISON_ROW and list(row.to_dict().items()) == list(d.items())
    assert row.gen_ppl.text() == "50.0 [45.0, 55.0]" and row.mauve.text() == "n/a"
    assert row.gen_ppl.separated_from(Estimate(60.0, 56.0, 70.0))
    assert not row.gen_ppl.separated_from(Estimate(60.0, 54.0, 70.0))
    assert not row.gen_ppl.separated_from(Estimate(60.0))  # no interval: cannot tell
    assert GenerationRow.from_dict({"role": "oracle", "layer": 3}).name == "oracle"


def test_the_drivers_bridgeability_lines_read_the_typed_rows():
    """The driver prints the primary test first, with the design's floor, then each
    predictor's Spearman from the typed row (no composed column name spelt in the driver)."""
    from dihal.rows import DEPTH, PrimaryTest, Spearman, SpearmanRow
    from pipeline.main import bridgeability_lines

    s_l = SpearmanRow("S_l (none)", {t: Spearman(0.7, 0.05, 0.95, "not distinguishable", -0.07,
                                                 -0.35, 0.0, 0.4, 1.0)
                                     for t in ("val_loss", "recon_error", "hybrid_nll")})
    depth = SpearmanRow(DEPTH, {t: Spearman(0.77, 0.11, 1.0) for t in ("val_loss",)})
    primary = PrimaryTest("S_l (none)", "hybrid_nll", 0.6, 0.7, -0.1, -0.3, 0.71, 0.43, 0.43,
                          0.0, 10000, 10, 0.05, "design cannot decide")
    info = {"spearman": [s_l.to_dict(), depth.to_dict()], "primary": primary.to_dict()}
    lines = bridgeability_lines(info)
    assert lines[0] == ("  primary test: S_l (none) vs depth on -hybrid_nll, Spearman +0.600 "
                        "against +0.700, one-sided p 0.71 (the design's floor 0.43 at 10 "
                        "layers): design cannot decide")
    assert lines[1] == ("  S_l (none): Spearman vs -val loss 0.700 [0.050, 0.950], not "
                        "distinguishable from depth (exploratory: paired difference -0.070, "
                        "Holm p 1)")
    assert lines[2] == "  depth (-l): Spearman vs -val loss 0.770 [0.110, 1.000]"
    assert bridgeability_lines({"spearman": [depth.to_dict()]}) == [lines[2]]


def test_generation_row_reads_what_the_report_shows_and_a_row_without_a_column():
    d = {"model": "ridge (l=2)", "role": "control", "gen_ppl": math.nan, "temperature": None,
         "empty_samples": 2, "n_samples": 8, "ppl_length": 12, "diversity_spacy": math.nan,
         "dihal_log_ppl_diff": -0.2, "dihal_log_ppl_diff_low": -0.4,
         "dihal_log_ppl_diff_high": -0.1, "dihal_verdict": "below", "sample_nll": [1.0, 2.0],
         "sample_tokens": [3, 4], "mauve_diagnostic": False, "sampler_steps": 4}
    row = GenerationRow.from_dict(d)
    assert row.temperature_recorded and row.temperature is None
    assert (row.empty_samples, row.n_samples, row.ppl_length) == (2, 8, 12)
    assert math.isnan(row.diversity_spacy) and number(row.diversity_spacy) is None
    assert not row.mauve_diagnostic and row.sampler_steps == 4
    assert row.vs_dihal == Estimate(-0.2, -0.4, -0.1) and row.vs_dihal_verdict == "below"
    assert row.sample_nll == [1.0, 2.0] and row.to_dict()["sampler_steps"] == 4
    # a NaN Gen.PPL prints and compares as the stored NaN did, and is given back as stored
    assert row.gen_ppl.formatted(".1f") == "nan" and not row.gen_ppl.below(Estimate(5.0))
    assert math.isnan(row.to_dict()["gen_ppl"])
    assert Estimate(4.0).below(Estimate(5.0)) and not Estimate(5.0).below(Estimate(None))
    # a column the row has not: ABSENT (read as missing), left out of to_dict
    bare = GenerationRow.from_dict({"model": "sed", "role": "baseline", "gen_ppl": 80.0})
    assert not bare.temperature_recorded and bare.n_samples is ABSENT and not bare.n_samples
    assert (bare.vs_dihal_verdict, bare.vs_dihal_p, bare.vs_dihal.value) == ("", None, None)
    assert bare.gen_ppl_at_length.text() == "n/a" and "seq_len" not in bare.to_dict()
