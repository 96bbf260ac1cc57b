"""The sizing of the bridgeability measurement (dihal.replace.sizing) on hand-made numbers:
the settings and their order, the sweep's own setting, the verdicts derived as the
bridgeability stage derives them, what moves a verdict, and the adoption rule with its
threshold."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from dihal.errors import DihalError
from dihal.replace.sizing import (
    AGREEMENT_MIN_LAYERS,
    DEFAULT_AGREEMENT,
    Measured,
    Setting,
    SizingRow,
    adopted,
    agreement_threshold,
    compare,
    derive,
    full_setting,
    seed_agreement,
    settings_grid,
)
from dihal.rows import BridgeMetrics
from tests.tiny import score_row

LAYERS = list(range(1, 9))


def metrics(layer: int, nll: float, select: float | None = None) -> BridgeMetrics:
    return BridgeMetrics(layer=layer, val_loss=0.1 * layer, recon_error=0.5 + 0.01 * layer,
                         hybrid_nll=nll, backbone_nll=3.0, top1_agreement=0.5,
                         hybrid_ppl=math.exp(nll), backbone_ppl=math.exp(3.0),
                         init_val_loss=1.0, train_loss=0.2, train_steps=4, train_tokens=64,
                         seconds=1.0, resumed_from_step=0, denoiser_parameters=10,
                         t1_loss=0.3, hybrid_nll_select=nll if select is None else select,
                         hybrid_nll_judge=nll)


SCORE = [score_row(ll, -float(ll) + 3 * math.sin(ll))
         for ll in LAYERS] + [score_row(0, 0.0, candidate=False)]


def measured(nll: dict[int, float], control: dict[int, float], setting=None) -> Measured:
    return Measured(setting, tuple(metrics(ll, v) for ll, v in sorted(nll.items())),
                    tuple(metrics(ll, v) for ll, v in sorted(control.items())), 1.0)


FULL_NLL = {ll: 4.0 + 0.1 * ll for ll in LAYERS}
CONTROL = {ll: 4.35 for ll in LAYERS}  # the bridge wins at layers 1, 2, 3


def test_settings_are_whole_numbers_ordered_from_the_largest():
    for bad in (0, -1, True, 2.0):
        with pytest.raises(ValueError, match="integer >= 1"):
            Setting(bad, 4)
    grid = settings_grid([8, 32, 16, 8], [8, 16])
    # by sequences x K, then by sequences (at one product, fewer upper-layer passes)
    assert [(s.sequences, s.sampler_steps) for s in grid] == [
        (32, 16), (32, 8), (16, 16), (16, 8), (8, 16), (8, 8)]


def test_the_full_setting_is_the_sweeps_one_or_refused():
    protocols = [{"eval_sequences": 32, "sampler_steps": 16, "seeds": s} for s in (1, 2)]
    assert full_setting(protocols) == Setting(32, 16)
    with pytest.raises(DihalError, match=r"\(16, 16\), \(32, 16\)"):
        full_setting([*protocols, {"eval_sequences": 16, "sampler_steps": 16}])


def test_the_verdicts_are_the_bridgeability_stages():
    """derive reads the stage's own functions: its primary test, oracle and worst (on the
    selection half) equal the stage's over the same numbers."""
    from dihal.replace.bridgeability import bridgeability

    m = measured(FULL_NLL, CONTROL)
    m = replace(m, bridges=tuple(replace(b, hybrid_nll_select=b.hybrid_nll + (
        0.5 if b.layer == 1 else 0.0)) for b in m.bridges))  # the selection half: 2 is best
    v = derive(m, SCORE, l_star=1, primary_norm="none")
    stage = bridgeability(list(m.bridges), SCORE, 1, backbone="t", regression=list(m.controls))
    b = stage.summary
    assert (v.oracle, v.worst, v.oracle_by) == (b.oracle, b.worst, "hybrid_nll_select")
    assert (v.oracle, v.worst) == (2, 8)
    assert v.primary == b.primary
    assert v.bridge_wins == tuple(r.layer for r in b.regression if r.bridge_better_nll)
    assert v.bridge_wins == (1, 2, 3)


def test_a_setting_that_moves_a_verdict_is_not_adopted_however_well_it_ranks():
    full = derive(measured(FULL_NLL, CONTROL), SCORE, 1, "none")
    same = compare(full, measured(FULL_NLL, CONTROL, Setting(16, 8)),
                   derive(measured(FULL_NLL, CONTROL), SCORE, 1, "none"))
    assert same.spearman == pytest.approx(1.0) and same.same
    # every layer's NLL shifted alike: the ranking is the same, the control now wins everywhere
    shifted = {ll: v + 1.0 for ll, v in FULL_NLL.items()}
    moved = compare(full, measured(shifted, CONTROL, Setting(8, 8)),
                    derive(measured(shifted, CONTROL), SCORE, 1, "none"))
    assert moved.spearman == pytest.approx(1.0)
    assert moved.changed == ("bridge beats its ridge control at layers [] (full: [1, 2, 3])",)
    # the two deepest layers swapped: the worst layer moves and the ranking agrees less
    swapped = {**FULL_NLL, 7: FULL_NLL[8], 8: FULL_NLL[7]}
    worse = compare(full, measured(swapped, CONTROL, Setting(8, 16)),
                    derive(measured(swapped, CONTROL), SCORE, 1, "none"))
    assert worse.spearman == pytest.approx(1 - 6 * 2 / (8 * 63))
    assert "worst 7 (full: 8)" in worse.changed
    assert adopted([same, moved, worse], 0.9) is same
    assert adopted([moved, worse], 0.9) is None
    assert adopted([worse], 0.9) is None and not worse.meets(-1.0)


def test_the_smallest_setting_that_meets_the_rule_is_adopted():
    v = derive(measured(FULL_NLL, CONTROL), SCORE, 1, "none")
    rows = [SizingRow(Setting(n, k), rho, v, 1.0, ()) for n, k, rho in (
        (32, 16, 1.0), (16, 16, 0.97), (32, 8, 0.99), (8, 16, 0.95), (16, 8, float("nan")))]
    assert adopted(rows, 0.964).setting == Setting(16, 16)
    assert adopted(rows, 0.98).setting == Setting(32, 8)
    assert adopted(rows, 1.0).setting == Setting(32, 16)
    assert SizingRow(None, 1.0, v, None, ()).meets(0.0) is False  # the reference row


def test_the_threshold_is_given_or_the_runs_own_over_enough_layers_or_the_default():
    assert agreement_threshold(0.9, 0.5, 29) == (0.9, "given")
    rho, source = agreement_threshold(None, 0.93, AGREEMENT_MIN_LAYERS)
    assert rho == 0.93 and f"over {AGREEMENT_MIN_LAYERS} layers" in source
    assert agreement_threshold(None, 0.5, 4)[0] == DEFAULT_AGREEMENT == 0.964
    assert agreement_threshold(None, None, 0)[0] == DEFAULT_AGREEMENT
    assert agreement_threshold(None, float("nan"), 29)[0] == DEFAULT_AGREEMENT


def test_the_runs_seed_agreement_needs_three_layers_with_a_replicate():
    assert seed_agreement({1: (4.0, 4.1), 2: (4.2, 4.3)}) is None
    pairs = {1: (4.0, 4.1), 5: (4.2, 4.0), 9: (4.4, 4.5), 13: (4.6, 4.7)}
    assert seed_agreement(pairs) == pytest.approx(0.8)  # one swap of neighbours among four


@pytest.mark.parametrize("seeds", [False, True])
def test_the_bridgeability_summary_reads_back_as_its_stage_wrote_it(seeds):
    """One type for bridgeability's answer: what the stage returns, written to the manifest
    (JSON) and read back by the report is equal, every key kept (the seeds' per-layer picks
    and l*'s standing included)."""
    import json

    from dihal.inputs import BridgeabilitySummary
    from dihal.replace.bridgeability import bridgeability
    from storage.manifest import canonical

    m = measured(FULL_NLL, CONTROL)
    replicas = ({ll: [replace(metrics(ll, v + 0.05), seconds=2.0)] for ll, v in FULL_NLL.items()
                 if ll <= 4} if seeds else None)
    stage = bridgeability(list(m.bridges), SCORE, 2, backbone="t", regression=list(m.controls),
                          seed_metrics=replicas)
    stored = json.loads(json.dumps(canonical(stage.info())))
    back = BridgeabilitySummary.from_dict(stored)
    assert json.loads(json.dumps(canonical(back.to_dict()))) == stored
    assert back.primary == stage.summary.primary and back.spearman == stage.summary.spearman
    assert (back.seeds is not None) == seeds
    if seeds:
        assert back.seeds.oracle.picks and back.seeds.oracle.l_star_rank is not None
        assert back.seeds.counts() == {ll: 2 if ll <= 4 else 1 for ll in LAYERS}
