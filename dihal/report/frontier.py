"""The report's temperature-frontier section and its answer."""

from __future__ import annotations

from dihal.evaluate.frontier import ANCHOR_ROLE, frontier_sentence, on_frontier
from dihal.plots import plot_frontier
from dihal.report.common import FRONTIER
from dihal.report.document import Document
from dihal.report.generation import temperature
from dihal.results import ReportInputs
from dihal.rows import GenerationRow


def answer_frontier(x: ReportInputs) -> tuple[str, str]:
    """Who lies on the Gen.PPL/diversity frontier across the decoding temperatures measured
    (dihal.evaluate.frontier.frontier_sentence over the comparison's frontier points)."""

    return frontier_sentence(x.comparison.frontier_points()), FRONTIER


def frontier_table(points: list[GenerationRow]) -> list[dict]:
    """One line per frontier point: model, T, Gen.PPL with its interval, diversity (ours and
    spaCy's), mean length in judge tokens, whether it lies on the frontier, and whether another
    point dominates it beyond both intervals (dihal.evaluate.frontier.clearly_dominates)."""

    stored = [p.to_dict() for p in points]
    return [{"model": p.model, "T": "n/a (real text)" if p.role == ANCHOR_ROLE
             else temperature(p), "Gen.PPL [95 %]": p.gen_ppl.text(),
             "diversity": p.diversity.value, "diversity (spaCy)": p.diversity_spacy,
             "mean length (judge tokens)": p.mean_judge_length,
             "on the frontier": "yes" if on else "no",
             "dominated beyond the 95 % intervals": "no" if clear else "yes"}
            for p, on, clear in zip(points, on_frontier(stored),
                                    on_frontier(stored, clearly=True), strict=True)]


def frontier_section(r: Document, x: ReportInputs) -> None:
    """Gen.PPL against diversity of every model at each decoding temperature measured."""

    points = x.comparison.frontier_points()
    r.h2("3c. Gen.PPL against diversity across temperatures", FRONTIER)
    r.p(frontier_sentence(points))
    if not points:
        return
    r.p("A lower temperature can buy a lower Gen.PPL with less diverse samples, so one "
        "temperature's Gen.PPL alone can favour the less diverse model. DiHAL (at its "
        "protocol's K), the backbone and each baseline with a temperature are sampled at each "
        "temperature with the main table's count, length, seed and judge (no MAUVE); the point "
        "at the main table's temperature, and CoDAR's at its own, are those rows. SED and "
        "Diffusion-LM round to tokens deterministically: one point each, at no temperature. "
        "Held-out corpus text, cut like the samples, as many texts as samples, scored by the "
        "same judge and metric code, is the anchor: diversity above real text's is degenerate, "
        "so on the frontier a point's diversity counts only up to the anchor's, and each "
        "model's Gen.PPL is read at the anchor's diversity. A point marked dominated beyond "
        "the intervals is dominated by a point that also dominates it without them.")
    r.image(plot_frontier(points, f"{x.backbone}: Gen.PPL vs diversity across temperatures"),
            "Gen.PPL against diversity across temperatures")
    table = frontier_table(x.comparison.frontier)
    r.table(table, list(table[0]), ".4g")
