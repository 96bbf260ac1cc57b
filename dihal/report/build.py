"""The report stage: lay out the finished results of one backbone as a results section (rendered
by dihal.report.document). Each section opens with one sentence saying what its numbers show; those
sentences are computed from the numbers. The inputs are gathered by the caller (the Dagster
layer reads them through storage)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dihal.report.bridgeability import (
    answer_bridge_vs_regression,
    answer_geometry_vs_depth,
    bridgeability_section,
    regression_section,
)
from dihal.report.budget import (
    BRIDGE,
    BUDGET,
    RIDGE,
    budget_section,
    crossing,
    index_points,
    rankings,
    settled,
)
from dihal.report.budget_generation import budget_generation_section
from dihal.report.claims import answer_claims, claims_section
from dihal.report.common import CONFIG
from dihal.report.controls import answer_controls, controls_section
from dihal.report.cost import answer_cost, cost_section
from dihal.report.cross_backbone import cross_backbone_section
from dihal.report.document import Document
from dihal.report.frontier import answer_frontier, frontier_section
from dihal.report.full_training import full_training_section
from dihal.report.generation import (
    answer_generation,
    generation_section,
    sampler_section,
    samples_section,
)
from dihal.report.inputs import ReportInputs
from dihal.report.locate import answer_l_star, locate_section
from dihal.results import ReportResult
from dihal.rows import BudgetPoint

STUDY_COMMAND = "python -m pipeline.budget --backbone {backbone}"


def answer_budget(points: Sequence[BudgetPoint], l_star: int) -> tuple[str, str]:
    """The one-line answer (sentence, anchor): does the bridge at l* cross the ridge map, and
    does the layer ranking settle within the budgets measured."""
    index = index_points(points)
    head = f"The budget study has no bridge at l* = {l_star}"
    if (BRIDGE, l_star) in index:
        bridge, ridge = index[(BRIDGE, l_star)], index.get((RIDGE, l_star), {})
        c = crossing(l_star, bridge, ridge)
        head = "At l* the bridge " + (
            f"crosses the ridge map at {c.at:,} steps" if c.kind == "crosses" else {
                "unmeasured": "has no ridge map to compare with",
                "below throughout": "is below the ridge map from the smallest budget on",
                "mixed": "goes below the ridge map and back to or above it",
                "not crossed": "stays at or above the ridge map at every budget measured"}[c.kind])
        if shared := sorted(set(bridge) & set(ridge)):
            top = shared[-1]
            head += (f" (hybrid NLL at {top:,} steps {bridge[top]:.3f} against the ridge "
                     f"map's {ridge[top]:.3f})")
    layers, orders = rankings(index)
    kind, at = settled(orders) if len(layers) > 1 else ("one layer", None)
    tail = (f"the layer ranking settles from {at:,} steps" if kind == "settles" else {
        "one budget": "one budget only, so the layer ranking's movement is not read",
        "one layer": "fewer than 2 layers were measured at every budget, so there is no ranking",
        "stable": "the layer ranking is the same at every budget",
        "unsettled": "the layer ranking is unsettled in the range measured"}[kind])
    return f"{head}; {tail}.", BUDGET


def answer_budget_study(x: ReportInputs) -> tuple[str, str]:
    """How the answers move with the training budget (the study's answer at l*), or that the
    study was not run, with its command."""
    if not x.budget:
        return ("Not measured: the training-budget study was not run on these hidden states "
                f"(`{STUDY_COMMAND.format(backbone=x.backbone)}`).", BUDGET)
    return answer_budget(x.budget, x.locate.score.l_star)


ANSWERS = (answer_l_star, answer_geometry_vs_depth, answer_bridge_vs_regression,
           answer_budget_study, answer_generation, answer_frontier, answer_cost,
           answer_controls, answer_claims)
MAX_ANSWER_WORDS = 50  # each answer: its verdict, its key number, the link to its evidence


def _answers_section(r: Document, x: ReportInputs) -> None:
    r.h2("What this run shows", "answers")
    r.links([answer(x) for answer in ANSWERS])


# ---------------------------------------------------------------------------- the sections
def _intro(r: Document, x: ReportInputs) -> None:
    bb = x.backbone_info
    r.p(f"Backbone {bb.hf_id} ({bb.architecture}, {bb.n_layers} layers, hidden "
        f"{bb.hidden_size}), weights {bb.revision}. Every number below was measured by the "
        "pipeline from the artifacts listed at the end; nothing is copied from the paper.")


def _configuration_section(r: Document, x: ReportInputs) -> None:
    r.h2("7. Configuration and inputs", CONFIG)
    r.p(f"Artifacts under {x.artifacts}. The configuration of each stage:")
    r.table([{"stage": stage, "setting": k, "value": v} for stage, cfg in x.configs.stages.items()
             for k, v in sorted(cfg.items())], ["stage", "setting", "value"])
    r.p("The artifacts this report was built from, by fingerprint:")
    r.table([{"artifact": name, "fingerprint": fp[:16]} for name, fp in x.fingerprints.items()],
            ["artifact", "fingerprint"])


def _budget_section(r: Document, x: ReportInputs) -> None:
    """The budget section of the report: the study's points where it was run on these hidden
    states (S_l under the primary normalisation beside them), else what it would show and the
    command that runs it; then generation at the budget's ends (DiHAL at l* against CoDAR),
    or the command that makes it."""
    if not x.budget:
        r.h2("How the answers move with the training budget", BUDGET)
        r.p("The training-budget study was not run on these hidden states: every bridge here "
            "had one budget, so nothing in this report says how its answers move with more "
            "training. It trains the bridge, its controls and our ridge-started variant at "
            "several budgets per layer, on fresh corpus tokens where the corpus holds them "
            f"(`{STUDY_COMMAND.format(backbone=x.backbone)}`; it states its time and disk "
            "before it starts); the report made after it shows this section.")
    else:
        primary = x.configs.primary_norm
        scores = {s.layer: s.S for s in x.locate.scores if s.norm == primary and s.S is not None}
        budget_section(r, x.budget, l_star=x.locate.score.l_star, scores=scores,
                       backbone=x.backbone)
    budget_generation_section(r, x.budget_generation, backbone=x.backbone)


SECTIONS = (_answers_section, claims_section, locate_section, bridgeability_section,
            regression_section, sampler_section, generation_section, controls_section,
            cost_section, frontier_section,
            full_training_section, _budget_section, cross_backbone_section, samples_section,
            _configuration_section)


def build_report(x: ReportInputs, figure_name: Callable[[int], str] | None = None) -> ReportResult:
    """The report: it opens on its answers (each linking to its evidence), then one section
    per question, wide tables last in each. The HTML embeds its plots; the Markdown links its
    n-th plot to the file `figure_name(n)` (written beside it from `figures`), or embeds it
    where no `figure_name` is given."""
    r = Document(f"DiHAL on {x.backbone_info.hf_id} ({x.backbone})")
    _intro(r, x)
    for section in SECTIONS:
        section(r, x)
    return ReportResult(html=r.html(), markdown=r.markdown(figure_name),
                        figures=r.figures() if figure_name else [])
