"""The report's section on DiHAL against its control hybrids, and its answer."""

from __future__ import annotations

import math

from dihal.generation_rows import GenerationRow
from dihal.labels import CHOSEN_K, CONTROL, DIHAL
from dihal.report.common import CONTROLS
from dihal.report.document import Document
from dihal.report.generation import EMPTY, GEN_PPL, empty_text
from dihal.report.inputs import ReportInputs


def against_dihal(row: GenerationRow) -> tuple[float, float, float] | None:
    """Gen.PPL of DiHAL over `row`'s (exp of the paired log difference) with its paired 95 %
    interval; None where the row has no paired difference."""

    v = row.vs_dihal
    return None if None in (v.value, v.low, v.high) else (
        math.exp(v.value), math.exp(v.low), math.exp(v.high))


def _control_phrase(row: GenerationRow) -> str:
    """"the ridge (l=3)'s: 1.23x [1.05, 1.41], higher beyond the paired interval"."""
    got = against_dihal(row)
    if got is None:
        return f"{row.model}: no paired difference (fewer than 2 samples scored on both sides)"
    ratio, lo, hi = got
    verdict = {"below": "lower beyond the paired 95 % interval",
               "above": "higher beyond the paired 95 % interval"}.get(
        row.vs_dihal_verdict, "not distinguishable at the paired 95 % level")
    return f"{ratio:.2f}x {row.model}'s [{lo:.2f}, {hi:.2f}], {verdict}"


NO_CONTROLS = ("Whether DiHAL beats its control hybrids is not settled: the evaluation has no "
               "control rows (materialise eval and comparison again).")


def _standing(x: ReportInputs):
    """DiHAL's row, its controls' (and its own at the K chosen on validation), the row of the
    lowest Gen.PPL, and the controls DiHAL is below and above beyond the paired interval."""
    rows = x.comparison.rows
    dihal = next(r for r in rows if r.role == DIHAL)
    others = [r for r in rows if r.role in (CONTROL, CHOSEN_K)]
    best = min([dihal, *others], key=lambda r: math.nan if r.gen_ppl.value is None
               else r.gen_ppl.value)
    beaten = [r.model for r in others if r.vs_dihal_verdict == "below"]
    lost = [r.model for r in others if r.vs_dihal_verdict == "above"]
    return dihal, others, best, beaten, lost


def _head(dihal: GenerationRow, best: GenerationRow) -> str:
    return ("DiHAL has the lowest Gen.PPL of itself and its controls" if best is dihal else
            f"{best.model} has the lowest Gen.PPL of DiHAL and its controls")


def controls_sentence(x: ReportInputs) -> str:
    """DiHAL's Gen.PPL against its control hybrids' (regression, layer-drop, ridge) and its
    own at the K chosen on validation, each as a ratio with a paired interval; which wins."""
    if not any(r.role in (CONTROL, CHOSEN_K) for r in x.comparison.rows):
        return NO_CONTROLS
    dihal, others, best, beaten, lost = _standing(x)
    return (f"{_head(dihal, best)}: DiHAL's Gen.PPL is "
            + "; ".join(_control_phrase(r) for r in others)
            + f" (DiHAL lower beyond the paired interval than {len(beaten)}, higher than "
            f"{len(lost)} of {len(others)}).")


def answer_controls(x: ReportInputs) -> tuple[str, str]:
    """Which of DiHAL and its controls has the lowest Gen.PPL (DiHAL's ratio to it, with its
    paired interval), and against how many controls DiHAL is lower or higher beyond it; every
    ratio is the section's."""
    if not any(r.role in (CONTROL, CHOSEN_K) for r in x.comparison.rows):
        return NO_CONTROLS, CONTROLS
    dihal, others, best, beaten, lost = _standing(x)
    ratio = "" if best is dihal else f" (DiHAL's Gen.PPL is {_control_phrase(best)})"
    return (f"{_head(dihal, best)}{ratio}; DiHAL is lower beyond the paired 95 % interval than "
            f"{len(beaten)} of its {len(others)} controls, higher than {len(lost)}.", CONTROLS)


def controls_section(r: Document, x: ReportInputs) -> None:
    """DiHAL against its control hybrids and against itself at the K chosen on validation."""

    r.h2("3a. DiHAL against its control hybrids", CONTROLS)
    shown = [row for row in x.comparison.rows if row.role in (DIHAL, CHOSEN_K, CONTROL)]
    r.p(controls_sentence(x))
    notes = x.evaluate.controls
    r.p("Each control replaces layers 0..l-1 as DiHAL does and keeps the upper layers and the "
        "head: the regression hybrid (the regression control of that layer trained with the "
        "bridge's full budget: the bridge network trained at t = 1 only, with the bridge "
        "stage's protocol and one seed, sampled in one step; the sweep-budget controls are "
        "bridgeability's), the layer-drop hybrid (hs[0] "
        "straight into block l) and the ridge hybrid (a linear map hs[0] -> h_l fitted on the "
        "training pairs, its penalty chosen on held-out pairs). All are sampled with the same "
        "count, length, temperature and seeds as DiHAL and scored by the same judge; sample i "
        "of each is paired with DiHAL's sample i (the same uniforms), and the ratio of Gen.PPL "
        "(DiHAL over the row) has a paired percentile-bootstrap 95 % interval.")
    if notes.regression:
        r.p(f"Regression hybrid: {notes.regression}.")
    chosen = notes.chosen
    if chosen:
        r.p(f"The sampler-steps curve chose the {chosen.rule} rule with K = {chosen.sampler_steps} "
            f"(held-out hybrid NLL {chosen.hybrid_nll:.4f}) against the protocol's K = "
            f"{notes.protocol_sampler_steps}"
            + (": the same sampler, so DiHAL's row is that K's." if notes.chosen_is_protocol
               else "; DiHAL at that K has its own row."))

    def ratio(row: GenerationRow) -> str:
        got = against_dihal(row)
        return "" if got is None else f"{got[0]:.3f} [{got[1]:.3f}, {got[2]:.3f}]"


    r.table([{"model": row.model, "role": row.role, EMPTY: empty_text(row),
              GEN_PPL: row.gen_ppl.text(),
              "diversity [95 %]": row.diversity.text(".3f"),
              "MAUVE [95 %]": row.mauve.text(".3f"),
              "Gen.PPL DiHAL / this [paired 95 %]": ratio(row),
              "paired p": row.vs_dihal_p,
              "DiHAL is": row.vs_dihal_verdict} for row in shown],
            ["model", "role", EMPTY, GEN_PPL, "diversity [95 %]", "MAUVE [95 %]",
             "Gen.PPL DiHAL / this [paired 95 %]", "paired p", "DiHAL is"], ".3g")
