"""What the report of a backbone is built from, read from its finished artifacts
(dihal.report.build lays it out)."""

from __future__ import annotations

from dihal.generation_rows import texts_by_model
from dihal.inputs import BackboneSummary
from dihal.report.inputs import ReportInputs
from storage.artifacts import (
    BaselineRun,
    Bridge,
    Bridgeability,
    Comparison,
    Evaluation,
    FullTraining,
    Geometry,
    HiddenStates,
    LayerScore,
    SamplerCurve,
    Sequences,
    SweepBridge,
)
from storage.layout import ArtifactLayout
from storage.lineage import current_budget_generation, current_budget_studies, other_backbones


def backbone_summary(layout: ArtifactLayout, backbone: str) -> BackboneSummary:
    """One backbone's line of the cross-backbone table, from its checked artifacts: l* per
    normalisation, bridgeability (oracle, worst, Spearman rows), and its evaluation's rows and
    judge where it has been evaluated."""
    score, bness = LayerScore(layout, backbone).require(), Bridgeability(layout, backbone).require()
    ev = Evaluation(layout, backbone)
    em = ev.require() if ev.manifest() is not None else None
    return BackboneSummary.from_dict({
        "backbone": backbone, "selected": score.info["selected"], "bridgeability": bness.info,
        "eval_rows": em.info["rows"] if em else None,
        "judge": em.info["judge"]["judge"] if em else None})


def report_inputs(layout: ArtifactLayout, backbone: str) -> ReportInputs:
    """Everything the report of one backbone shows, read from its finished artifacts."""
    arts = {a.stage: a for a in (cls(layout, backbone) for cls in (
        Sequences, HiddenStates, Geometry, LayerScore, Bridgeability, Bridge, Evaluation,
        SamplerCurve, Comparison, FullTraining))}
    m = {stage: a.require() for stage, a in arts.items()}
    bness, cmp_ = m["bridgeability"].info, m["comparison"].info
    samples = texts_by_model(arts["eval"].samples())
    studies = current_budget_studies(layout, backbone)
    generated = current_budget_generation(layout, backbone)
    made = [*studies, *([generated] if generated is not None else [])]
    for row in cmp_["rows"]:
        if row.get("role") == "baseline" and (b := BaselineRun(layout, backbone, row["model"])).manifest():
            samples[row["model"]] = b.manifest().info["samples"]
    return ReportInputs.from_dicts(
        backbone=backbone, backbone_info=m["hidden_states"].info["backbone"],
        configs={"sequences": m["sequences"].config, "hidden_states": m["hidden_states"].config,
                 "geometry": m["geometry"].config, "layer_score": m["layer_score"].config,
                 "bridge (full)": m["bridge"].config, "eval": m["eval"].config},
        geometry_rows=arts["geometry"].rows(), predictor_rows=arts["geometry"].predictor_rows(),
        score_rows=arts["layer_score"].rows(),
        score=m["layer_score"].info, bridgeability=bness,
        sweep_layers=arts["bridgeability"].layers(),
        sweep_protocol=SweepBridge(layout, backbone, bness["oracle"]).require().config,
        comparison=cmp_, evaluation=m["eval"].info, full_training=m["full_training"].info["rows"],
        full_training_sampler=m["full_training"].info.get("sampler", {}),
        sampler_curve=m["sampler_steps"].info,
        samples=samples, plots={"proxies": arts["geometry"].plot(), "score": arts["layer_score"].plot(),
                                "scatter": arts["bridgeability"].plot()},
        backbones=[backbone_summary(layout, b) for b in (backbone, *other_backbones(layout, backbone))],
        artifacts=str(layout.root / backbone),
        budget=[p for a in studies for p in a.points()],
        budget_generation=generated.rows() if generated is not None else [],
        fingerprints={**{a.name: m[stage].fingerprint for stage, a in arts.items()},
                      **{a.name: a.manifest().fingerprint for a in made}})
