"""The report's section on the paper's claims: the paper's figures come from the data file and
agree with what the docs quote; each claim's verdict comes out each way it is written (holds,
does not hold, the design cannot decide, not measured), on hand-made inputs."""

import json
import math
import pathlib
import re
from dataclasses import replace

import pytest

from dihal.generation_inputs import CostRow, CostTable, OrderInK
from dihal.generation_rows import GenerationRow
from dihal.inputs import SequenceStability
from dihal.registry import BASELINES
from dihal.report.build import build_report
from dihal.report.claims import (
    COLUMNS,
    FAILS,
    HOLDS,
    MISSING,
    UNDECIDED,
    GenerationEvidence,
    Part,
    claim_full_training,
    claim_generation,
    claim_l_star,
    claim_latency,
    claim_spearman,
    combine,
    diversity_part,
    gen_ppl_part,
)
from dihal.report.paper import PAPER_CLAIMS, PaperClaimsError, load_paper_claims
from dihal.rows import DEPTH
from tests.tiny import gen_row, spearman_row
from tests.tiny import report_inputs as inputs

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAPER = load_paper_claims()


# ------------------------------------------------------------------------- the data file


def test_every_figure_of_the_data_file_is_the_one_the_docs_quote():
    """The paper's figures live in data/paper_claims.json; each is the figure docs/method.md
    quotes, each backbone's layers its published config's, its parameters docs/capacity.md's,
    and the baselines are the comparison's."""
    method = (ROOT / "docs" / "method.md").read_text()
    capacity = (ROOT / "docs" / "capacity.md").read_text()
    assert "arXiv 2605.14368" in PAPER.source and "arXiv 2605.14368" in method
    quoted = " ".join(method.split())  # the docs wrap lines
    assert (f"Gen.PPL CoDAR {PAPER.gen_ppl['codar']:g} -> DiHAL {PAPER.gen_ppl['dihal']:g}"
            in quoted)
    assert f"{PAPER.diversity['codar']:g} -> {PAPER.diversity['dihal']:g}" in quoted
    assert f"{PAPER.spearman_low:g}-{PAPER.spearman_high:g} on 8B backbones" in quoted
    llama, qwen = PAPER.backbones["llama"], PAPER.backbones["qwen"]
    assert f"l* = {llama.l_star} on {llama.name}, {qwen.l_star} on {qwen.name}" in quoted
    configs = {"llama": "llama-3.1-8b.json", "qwen": "qwen3-8b.json"}
    for key, b in PAPER.backbones.items():
        cfg = json.loads((ROOT / "data" / "model_configs" / configs[key]).read_text())
        assert cfg["num_hidden_layers"] == b.n_layers
        assert f"| {b.n_parameters:,} |" in capacity
    assert sorted(PAPER.baselines.values()) == sorted(BASELINES)
    # the paper's full text was not available: its training budget is not filled in
    assert PAPER.train_tokens is None and PAPER.train_steps is None


@pytest.mark.parametrize(("edit", "says"), [
    (lambda d: d["generation"].pop("codar"), "'generation.codar'"),
    (lambda d: d["spearman"].update(low=-0.9), "spearman.low is -0.9, not a positive number"),
    (lambda d: d["backbones"]["qwen"].update(l_star="two"), "backbones.qwen.l_star is 'two'"),
    (lambda d: d["generation"].update(backbone="mistral"), "['mistral'] not under backbones"),
    (lambda d: d["spearman"].update(target="loss"), "spearman.target is 'loss', not a "
                                                    "bridgeability target"),
])
def test_a_malformed_claims_file_is_refused_naming_the_key(tmp_path, edit, says):
    d = json.loads(PAPER_CLAIMS.read_text())
    edit(d)
    path = tmp_path / "claims.json"
    path.write_text(json.dumps(d))
    with pytest.raises(PaperClaimsError, match=re.escape(str(path)) + ".*" + re.escape(says)):
        load_paper_claims(path)
    path.write_text("{not json")
    with pytest.raises(PaperClaimsError, match="cannot read the paper's figures"):
        load_paper_claims(path)


# ------------------------------------------------------------------------------ claim 1


def _picks(low, high):
    return {"l_star": 2, "same": 0.8, "low": low, "high": high, "replicates": 20,
            "picks": {2: 0.8}}


@pytest.mark.parametrize(("low", "high", "verdict"), [
    (1, 3, HOLDS), (2, 5, UNDECIDED), (4, 6, FAILS)])
def test_l_star_near_the_embedding_each_way(low, high, verdict):
    """On a 32-layer backbone the paper's deepest l* (3 of 32) bounds near: a range within it
    holds, one beyond it does not, one across it cannot decide."""
    x = _n_layers(inputs(stability={"robust": _picks(low, high)}), 32)
    row = claim_l_star(x, PAPER)
    assert row.verdict == verdict
    assert f"95 % range [{low}, {high}] over 20 resamples of the tokens" in row.run
    assert "here layers 1..3" in row.why


def test_l_star_prefers_the_sequence_resamples_and_without_any_range_l_star_decides():
    seq = {"norm": "robust", "bootstrap": _picks(4, 6), "split_half": None, "sequences": 8,
           "seconds": 1.0}
    x = _n_layers(inputs(stability={"robust": _picks(1, 3)}), 32)
    x = replace(x, locate=replace(x.locate, score=replace(
        x.locate.score, sequence_stability=SequenceStability.from_dict(seq))))
    row = claim_l_star(x, PAPER)
    assert row.verdict == FAILS and "resamples of whole sequences" in row.run
    bare = claim_l_star(_n_layers(inputs(), 32), PAPER)  # l* = 2 of 32, no range
    assert bare.verdict == HOLDS and "no resample range recorded: l* alone decides" in bare.run
    assert claim_l_star(inputs(), PAPER).verdict == FAILS  # 2 of 4 layers is half the depth


def _n_layers(x, n):
    return replace(x, backbone_info=replace(x.backbone_info, n_layers=n))


# ------------------------------------------------------------------------------ claim 2


@pytest.mark.parametrize(("rho", "low", "high", "verdict"), [
    (0.96, 0.92, 0.99, HOLDS), (0.5, 0.2, 0.8, FAILS), (0.9, 0.6, 1.0, UNDECIDED),
    (float("nan"), float("nan"), float("nan"), MISSING)])
def test_spearman_each_way(rho, low, high, verdict):
    x = inputs(spearman=[spearman_row("S_l (robust)", rho, low, high),
                         spearman_row(DEPTH, 0.1, -0.2, 0.4)])
    row = claim_spearman(x, PAPER)
    assert row.verdict == verdict
    if verdict == UNDECIDED:
        assert "its width 0.40 over 3 swept layers is the floor" in row.why
    if verdict != MISSING:
        assert row.run.startswith(f"{rho:.2f} [{low:.2f}, {high:.2f}] over 3 swept layers")


def test_spearman_without_the_primary_score_says_what_is_missing():
    row = claim_spearman(inputs(spearman=[spearman_row(DEPTH, 0.1, -0.2, 0.4)]), PAPER)
    assert row.verdict == MISSING and "no Spearman of S_l (robust) with -val_loss" in row.run


# ------------------------------------------------------------------------------ claim 3


def _row(model, role, ppl, div, ppl_w=1.1, div_w=1.05, **extra):
    """A generation row with Gen.PPL in [ppl / ppl_w, ppl * ppl_w] and diversity likewise."""
    return gen_row(model, role, ppl, ppl / ppl_w, ppl * ppl_w, diversity=div,
                   diversity_low=div / div_w, diversity_high=div * div_w, **extra)


def _dihal(ppl=50.0, div=0.6, **kw):
    return _row("dihal", "dihal", ppl, div, denoiser_parameters=1000, train_tokens=4096,
                sampler_steps=4, **kw)


def _scored(model, role, log_ppl, spread, n, seed, **extra):
    """A row that kept its per-sample judge scores: n samples of 10 judge tokens."""
    import numpy as np

    lp = log_ppl + spread * np.random.default_rng(seed).standard_normal(n)
    nll = [float(10 * v) for v in lp]
    ppl = math.exp(sum(nll) / (10 * n))
    return _row(model, role, ppl, 0.5, sample_nll=nll, sample_tokens=[10] * n, **extra)


def _evidence(rows):
    return GenerationEvidence.of(inputs(comparison=rows))


BACKBONE_ROW = _row("backbone", "backbone", 30.0, 0.6)


@pytest.mark.parametrize(("shift", "spread", "n", "verdict"), [
    (-1.0, 0.3, 16, HOLDS),  # DiHAL's log Gen.PPL lower by 1: told apart
    (1.0, 0.3, 16, FAILS),  # higher: told apart
    (0.0, 0.01, 64, FAILS),  # the same samples, and enough of them to see the paper's gap
    (0.0, 0.5, 4, UNDECIDED),  # the same samples, far too few to see it
])
def test_gen_ppl_by_the_generation_sections_test_each_way(shift, spread, n, verdict):
    rows = [_scored("dihal", "dihal", 4.0 + shift, spread, n, 1, denoiser_parameters=1,
                    train_tokens=1, sampler_steps=1),
            _scored("backbone", "backbone", 3.0, spread, n, 2),
            _scored("codar", "baseline", 4.0, spread, n, 1 if shift == 0 else 3)]
    part = gen_ppl_part(_evidence(rows), "codar", PAPER.gen_ppl_ratio)
    assert part.outcome == verdict and "p (Holm)" in part.run
    assert "samples (the rest empty)" not in part.run  # these rows record no empty count
    if shift == 0:
        assert "samples per model give 80 % power at the paper's gap 1.065x" in part.why
        assert f"the run has {n}" in part.why


@pytest.mark.parametrize(("ppl", "width", "verdict"), [
    (80.0, 1.1, HOLDS), (30.0, 1.1, FAILS),
    (50.0, PAPER.gen_ppl_ratio ** 0.25, FAILS),  # intervals narrower than the paper's gap
    (50.0, PAPER.gen_ppl_ratio, UNDECIDED)])  # wider: a gap that large could hide in them
def test_gen_ppl_by_the_intervals_each_way(ppl, width, verdict):
    rows = [_dihal(ppl_w=width), BACKBONE_ROW, _row("codar", "baseline", ppl, 0.5, ppl_w=width)]
    assert gen_ppl_part(_evidence(rows), "codar", PAPER.gen_ppl_ratio).outcome == verdict


def test_a_lower_gen_ppl_with_more_failures_does_not_hold_and_a_missing_baseline_is_named():
    rows = [_dihal(n_samples=100, empty_samples=50), BACKBONE_ROW,
            _row("codar", "baseline", 80.0, 0.5, n_samples=100, empty_samples=0)]
    part = gen_ppl_part(_evidence(rows), "codar", PAPER.gen_ppl_ratio)
    assert part.outcome == FAILS and "more empty samples" in part.why
    assert part.run.endswith("; over 50 of 100 and 100 of 100 samples (the rest empty)")
    full = [_dihal(n_samples=100, empty_samples=0), BACKBONE_ROW,
            _row("codar", "baseline", 80.0, 0.5, n_samples=100, empty_samples=0)]
    assert "samples" not in gen_ppl_part(_evidence(full), "codar", PAPER.gen_ppl_ratio).run
    part = gen_ppl_part(_evidence(rows), "sed", PAPER.gen_ppl_ratio)
    assert part.outcome == MISSING and part.run == "sed was not run"


@pytest.mark.parametrize(("div", "width", "verdict"), [
    (0.4, 1.05, HOLDS), (0.8, 1.05, FAILS),
    (0.6, PAPER.diversity_ratio ** 0.25, FAILS), (0.6, PAPER.diversity_ratio, UNDECIDED),
    (None, 1.05, MISSING)])
def test_diversity_each_way(div, width, verdict):
    dihal = GenerationRow.from_dict(_dihal(div=0.6, div_w=width))
    other = GenerationRow.from_dict(
        _row("codar", "baseline", 80.0, div or 0.5, div_w=width) if div is not None
        else {**_row("codar", "baseline", 80.0, 0.5), "diversity": None})
    assert diversity_part(dihal, other, "codar", PAPER.diversity_ratio).outcome == verdict
    assert diversity_part(dihal, None, "codar", PAPER.diversity_ratio).outcome == MISSING


def _all_baselines(ppl=80.0, div=0.4):
    return [_dihal(), BACKBONE_ROW, *(_row(b, "baseline", ppl, div) for b in BASELINES)]


@pytest.mark.parametrize(("rows", "missing", "verdict"), [
    (_all_baselines(), (), HOLDS),
    (_all_baselines()[:-1], ("codar",), MISSING),  # one baseline not run
    ([*_all_baselines()[:-2], _row("ld4lg", "baseline", 30.0, 0.4)], ("codar",), FAILS),
    (_all_baselines(ppl=50.0), (), UNDECIDED),  # DiHAL's own Gen.PPL: intervals overlap
])
def test_the_baselines_claim_each_way(rows, missing, verdict):
    x = inputs(comparison=rows)
    x = replace(x, comparison=replace(x.comparison, missing=list(missing)))
    row = claim_generation(x, PAPER, GenerationEvidence.of(x))
    assert row.verdict == verdict and len(row.parts) == 2 * len(BASELINES)
    assert ("not run: codar" in row.why) == bool(missing)
    assert "Gen.PPL 136.02 vs CoDAR's 144.83, diversity 0.5913 vs 0.4777" in row.paper


def test_combine_takes_the_first_outcome_of_its_precedence():
    def parts(*outcomes):
        return [Part("p", "", o, "") for o in outcomes]

    assert combine(parts(HOLDS, UNDECIDED, MISSING, FAILS)) == FAILS
    assert combine(parts(HOLDS, UNDECIDED, MISSING)) == MISSING
    assert combine(parts(HOLDS, UNDECIDED)) == UNDECIDED
    assert combine(parts(HOLDS, HOLDS)) == HOLDS
    assert combine([]) == MISSING


# ------------------------------------------------------------------------------ claim 4


def _full(oracle_verdict="not distinguishable", worst_verdict="below", layers=(2, 3, 1),
          paired=True):
    rows = []
    for role, ll, verdict in zip(("geometry l*", "oracle", "worst"), layers,
                                 (None, oracle_verdict, worst_verdict), strict=True):
        row = {"role": role, "layer": ll, "sampler": "protocol", "gen_ppl": 40.0,
               "val_loss": 0.5, "hybrid_nll": 3.0, "train_tokens": 8192, "train_steps": 512}
        if verdict and paired:  # l*'s Gen.PPL over this role's, as its verdict has it
            ratio, low, high, p = {"below": (0.8, 0.7, 0.9, 0.02), "above": (1.25, 1.1, 1.4, 0.02),
                                   "not distinguishable": (1.0, 0.8, 1.25, 0.9)}[verdict]
            row.update({"log_ppl_diff_vs_l_star": math.log(ratio), "log_ppl_diff_low_vs_l_star":
                        math.log(low), "log_ppl_diff_high_vs_l_star": math.log(high),
                        "p_vs_l_star": p, "p_holm_vs_l_star": p,
                        "verdict_vs_l_star": verdict, "pairs_vs_l_star": 16})
        rows.append(row)
    return rows


CODAR_BEATEN = [_dihal(), BACKBONE_ROW, _row("codar", "baseline", 80.0, 0.4)]


@pytest.mark.parametrize(("full", "comparison", "verdict", "says"), [
    (_full(), CODAR_BEATEN, HOLDS, "competitive: not told apart"),
    (_full(oracle_verdict="above"), CODAR_BEATEN, FAILS, "l*'s Gen.PPL higher than the oracle's"),
    (_full(worst_verdict="above"), CODAR_BEATEN, FAILS, "l*'s Gen.PPL higher than the worst's"),
    (_full(layers=(1, 3, 1)), CODAR_BEATEN, FAILS, "l* is the worst layer (1)"),
    (_full(layers=(3, 3, 1)), CODAR_BEATEN, HOLDS, "l* is the oracle layer (3)"),
    (_full(worst_verdict="not distinguishable"), CODAR_BEATEN, UNDECIDED,
     "not told apart: the paired interval spans 0.80-1.25x"),
    (_full(), [_dihal(), BACKBONE_ROW, _row("codar", "baseline", 30.0, 0.4)], FAILS,
     "DiHAL's Gen.PPL higher beyond the 95 % level"),
    (_full(), [_dihal(), BACKBONE_ROW], MISSING, "the comparison has no row for it"),
    (_full(paired=False), CODAR_BEATEN, MISSING, "no paired test of the roles"),
    ([], CODAR_BEATEN, MISSING, "materialise full_training"),
])
def test_the_full_training_claim_each_way(full, comparison, verdict, says):
    x = inputs(full_training=full, comparison=comparison)
    row = claim_full_training(x, PAPER, GenerationEvidence.of(x))
    assert row.verdict == verdict and says in row.why


# ------------------------------------------------------------------------------ claim 5


def _timed(x, dihal_ms, backbone_ms, spread=True):
    """`x` with a cost table timing DiHAL (l* = 2, K = 4) and the backbone: (median, fastest,
    slowest) each, the rounds' spread left out with `spread` False."""
    def row(model, k, layer, ms):
        med, lo, hi = ms
        return CostRow(model, k, layer, "flop model", 1e6, med, 1.5, med / backbone_ms[0], 1.0,
                       lo if spread else None, hi if spread else None)

    table = CostTable({}, [row("backbone", 0, None, backbone_ms),
                           row("DiHAL (l=2, K=4)", 4, 2, dihal_ms)], 2, 16, 3, "", 16,
                      OrderInK([4], True), "one timing")
    return replace(x, evaluate=replace(x.evaluate, cost=table))


@pytest.mark.parametrize(("dihal_ms", "spread", "verdict"), [
    ((3.0, 2.8, 3.2), True, HOLDS), ((1.0, 0.9, 1.1), True, FAILS),
    ((2.2, 1.9, 2.5), True, UNDECIDED), ((2.2, 1.9, 2.5), False, HOLDS),
    ((1.0, 0.9, 1.1), False, FAILS), ((2.0, 1.9, 2.1), False, UNDECIDED)])
def test_latency_each_way(dihal_ms, spread, verdict):
    row = claim_latency(_timed(inputs(), dihal_ms, (2.0, 1.8, 2.1), spread), PAPER)
    assert row.verdict == verdict
    assert ("no spread of the rounds recorded" in row.why) == (not spread)
    assert f"{dihal_ms[0]:.3g} ms per token against 2" in row.run


def test_latency_without_a_cost_table_is_not_measured():
    row = claim_latency(inputs(), PAPER)
    assert row.verdict == MISSING and "not in the cost table" in row.run


# ---------------------------------------------------------------------------- the section


def test_the_section_follows_the_answers_with_both_scales():
    x = _n_layers(inputs(full_training=_full(), comparison=CODAR_BEATEN), 32)
    md = build_report(x).markdown
    section = md[md.index("## The paper's claims at this run's scale"):md.index("## 1. Locate")]
    assert md.index("## What this run shows") < md.index("## The paper's claims")
    assert "| " + " | ".join(COLUMNS) + " |" in section
    assert "| claim | part | this run | outcome | why |" in section
    assert ("| parameters | 8,030,261,248 | 8,190,735,360 | 123,456 |"
            in section)
    assert "| decoder layers | 32 | 36 | 32 |" in section
    assert "| bridge training tokens | not stated in what we have of the paper" in section
    assert "4,096 (the bridge at l*, full budget); 8,192 per full-training bridge" in section
    # the steps of the full-training bridges as full training recorded them
    assert "; 512 per full-training bridge |" in section
    assert ("8,192 training tokens per full-training bridge in 512 optimiser steps; the oracle"
            in section)
    # one row per claim, each with a verdict from the four
    rows = [line for line in section.splitlines() if line.startswith("| ")
            and line.count(" | ") == len(COLUMNS) - 1][1:6]
    assert len(rows) == 5 and all(any(f"| {v} |" in r for v in (HOLDS, FAILS, UNDECIDED,
                                                                  MISSING)) for r in rows)


@pytest.mark.parametrize("steps, full, says", [
    (512, True, "; 512 for the bridge at l* (full budget); 512 per full-training bridge"),
    (512, False, "; 512 for the bridge at l* (full budget)"),
    (None, True, "; the full budget's steps not recorded; 512 per full-training bridge"),
    (None, False, "; the full budget's steps not recorded"),
])
def test_the_scale_table_gives_the_full_bridges_steps_where_the_comparison_recorded_them(
        steps, full, says):
    from dihal.report.claims import scale_table

    comparison = [_dihal(train_steps=steps), *CODAR_BEATEN[1:]]
    rows = _full() if full else [{k: v for k, v in r.items() if k != "train_steps"}
                                 for r in _full()]
    x = _n_layers(inputs(full_training=rows, comparison=comparison), 32)
    (row,) = [r for r in scale_table(x, load_paper_claims()) if r["scale"] == "bridge training steps"]
    assert row["this run"].endswith(says), row["this run"]
