"""The report's temperature-frontier section and its answer."""

from __future__ import annotations

from dihal.evaluate.frontier import (
    ANCHOR_ROLE,
    frontier_answer,
    frontier_sentence,
    measured_temperatures,
    on_frontier,
)
from dihal.generation_rows import GenerationRow
from dihal.plots import plot_frontier
from dihal.report.common import FRONTIER
from dihal.report.document import Document
from dihal.report.generation import temperature
from dihal.report.inputs import ReportInputs
from dihal.rows import number
from dihal.run.profiles import PROFILES, WHOLE_FRONTIER_PRESET


def whole_frontier_command(x: ReportInputs) -> str:
    """Where the frontier read has one temperature (the default's, the main table's): the
    temperatures of the whole frontier and the driver's command that draws them (the preset
    dihal.run.profiles.WHOLE_FRONTIER_PRESET); "" where it has more, or none."""
    temps = measured_temperatures(x.comparison.frontier_points())
    if len(temps) != 1:
        return ""
    preset = PROFILES[WHOLE_FRONTIER_PRESET]
    whole = preset["eval"]["frontier_temperatures"]
    return (f"The whole frontier (T = {', '.join(f'{t:g}' for t in whole)}) is drawn by the "
            f"{WHOLE_FRONTIER_PRESET} preset, with its larger samples ({preset['eval']['n_samples']} "
            f"per model): `python -m pipeline.main --backbone {x.backbone} --profile "
            f"{WHOLE_FRONTIER_PRESET}`.")


def answer_frontier(x: ReportInputs) -> tuple[str, str]:
    """Whether DiHAL lies on the Gen.PPL/diversity frontier across the decoding temperatures
    measured, and how many models do (dihal.evaluate.frontier.frontier_answer); the whole
    reading and the command for more temperatures are the section's."""
    return frontier_answer(x.comparison.frontier_points()), FRONTIER


def frontier_table(points: list[GenerationRow]) -> list[dict]:
    """One line per frontier point: model, T, Gen.PPL with its interval, diversity (ours and
    spaCy's), mean length in judge tokens, whether it lies on the frontier, and whether another
    point dominates it beyond both intervals (dihal.evaluate.frontier.clearly_dominates)."""

    stored = [p.to_dict() for p in points]
    return [{"model": p.model, "T": "n/a (real text)" if p.role == ANCHOR_ROLE
             else temperature(p), "Gen.PPL [95 %]": p.gen_ppl.text(),
             "diversity": p.diversity.value, "diversity (spaCy)": number(p.diversity_spacy),
             "mean length (judge tokens)": p.mean_judge_length,
             "on the frontier": "yes" if on else "no",
             "dominated beyond the 95 % intervals": "no" if clear else "yes"}
            for p, on, clear in zip(points, on_frontier(stored),
                                    on_frontier(stored, clearly=True), strict=True)]


ANCHOR_TEXT = ("Held-out corpus text, cut like the samples, as many texts as samples, scored "
               "by the same judge and metric code, is the anchor: diversity above real text's "
               "is degenerate, so on the frontier a point's diversity counts only up to the "
               "anchor's")


def _how_measured(temps: list[float]) -> str:
    """How the points were drawn: at several temperatures, or at the main table's one."""
    if len(temps) == 1:
        return (f"At one temperature (T = {temps[0]:g}) no model is sampled again: each "
                "point is its main-table row (DiHAL at its protocol's K, the backbone and each "
                "baseline with a temperature; SED and Diffusion-LM round to tokens "
                "deterministically: one point each, at no temperature), with its count, length, "
                f"seed and judge. {ANCHOR_TEXT}. A point marked dominated beyond the intervals "
                "is dominated by a point that also dominates it without them.")
    return ("A lower temperature can buy a lower Gen.PPL with less diverse samples, so one "
            "temperature's Gen.PPL alone can favour the less diverse model. DiHAL (at its "
            "protocol's K), the backbone and each baseline with a temperature are sampled at "
            "each temperature with the main table's count, length, seed and judge (no MAUVE); "
            "the point at the main table's temperature, and CoDAR's at its own, are those rows. "
            "SED and Diffusion-LM round to tokens deterministically: one point each, at no "
            f"temperature. {ANCHOR_TEXT}, and each model's Gen.PPL is read at the anchor's "
            "diversity. A point marked dominated beyond the intervals is dominated by a point "
            "that also dominates it without them.")


def frontier_section(r: Document, x: ReportInputs) -> None:
    """Gen.PPL against diversity of every model at each decoding temperature measured; at
    one temperature, what that shows and the command for the whole frontier."""

    points = x.comparison.frontier_points()
    r.h2("3c. Gen.PPL against diversity across temperatures", FRONTIER)
    r.p(frontier_sentence(points))
    if not points:
        return
    temps = measured_temperatures(points)
    r.p(_how_measured(temps))
    if command := whole_frontier_command(x):
        r.p(command)
    at = (f"at T = {temps[0]:g}" if len(temps) == 1 else "across temperatures")
    r.image(plot_frontier(points, f"{x.backbone}: Gen.PPL vs diversity {at}"),
            f"Gen.PPL against diversity {at}")
    table = frontier_table(x.comparison.frontier)
    r.table(table, list(table[0]), ".4g")
