# Note: no `from __future__ import annotations`: Dagster reads the config annotations.
"""Report, as an asset: report_<b>, from every upstream table, with a cross-backbone section."""

import dagster as dg

from assets._stage import StageRun, stage_asset
from dihal.run.stages import asset_key
from storage import (
    Bridgeability,
    Comparison,
    FullTraining,
    Geometry,
    LayerScore,
    Report,
    SamplerCurve,
    cross_backbone_artifacts,
    current_budget_generation,
    current_budget_studies,
    report_inputs,
)


def report_assets(backbone: str) -> list:
    def key(stage: str) -> str:  # the asset key of this backbone's stage
        return asset_key(stage, backbone)

    @stage_asset(backbone, "report", [key("comparison"), key("full_training"),
                                      key("bridgeability"), key("layer_score"),
                                      key("geometry"), key("sampler_steps")],
                 kinds={"html"})
    def report(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        """The report: HTML with its plots embedded, and Markdown with its plots beside it."""
        from dihal.report.build import build_report

        run = StageRun(context, backbone)
        parts = [run.art(k) for k in (Geometry, LayerScore, Bridgeability, Comparison, FullTraining,
                                      SamplerCurve)]
        parts += cross_backbone_artifacts(run.layout, backbone)  # the other backbones' table lines
        parts += current_budget_studies(run.layout, backbone)  # the budget study, where run
        generated = current_budget_generation(run.layout, backbone)  # its ends' generation
        parts += [generated] if generated is not None else []
        return run.produce(run.art(Report), {}, parts,
                           lambda: build_report(report_inputs(run.layout, backbone),
                                                figure_name=Report.figure_name))

    return [report]
