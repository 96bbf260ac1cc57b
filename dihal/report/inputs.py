"""The report's inputs: one ReportInputs per backbone, gathering the typed artifacts that the
report reads, family by family (dihal.inputs: the backbones, Locate and Replace;
dihal.generation_inputs: Evaluate, Compare and full training; dihal.rows: the budget study's
rows). storage.report_inputs reads it from finished artifacts; dihal.report.build lays it
out. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dihal.generation_inputs import CompareInputs, EvaluateInputs, FullTrainingInputs
from dihal.inputs import (
    BackboneInfo,
    BackboneSummary,
    GeometryRow,
    LayerScoreSummary,
    LocateInputs,
    Plots,
    PredictorRow,
    ReplaceInputs,
    ScoreRow,
    StageConfigs,
)
from dihal.rows import BridgeMetrics, BudgetGenerationRow, BudgetPoint


@dataclass(frozen=True)
class ReportInputs:
    backbone: str
    backbone_info: BackboneInfo
    configs: StageConfigs
    locate: LocateInputs
    bridges: ReplaceInputs
    evaluate: EvaluateInputs
    comparison: CompareInputs
    full_training: FullTrainingInputs
    samples: dict[str, list[str]]  # model -> sample texts
    plots: Plots
    # one summary per materialised backbone, this one first (storage.backbone_summary)
    backbones: list[BackboneSummary] = field(default_factory=list)
    artifacts: str = ""
    fingerprints: dict[str, str] = field(default_factory=dict)  # input artifact -> fingerprint
    # the training-budget study's points (budget_<b>, every layer made on these hidden
    # states); empty where it has not been run
    budget: list[BudgetPoint] = field(default_factory=list)
    # DiHAL at l* and CoDAR generating at the study's lowest and highest budget
    # (budget_generation_<b>, made on these hidden states); empty where it has not been run
    budget_generation: list[BudgetGenerationRow] = field(default_factory=list)

    @classmethod
    def from_dicts(cls, *, backbone_info: dict[str, Any], configs: dict[str, dict],
                   plots: dict[str, bytes], geometry_rows: list[GeometryRow],
                   predictor_rows: list[PredictorRow], score_rows: list[ScoreRow],
                   score: dict[str, Any], bridgeability: dict[str, Any],
                   sweep_layers: list[BridgeMetrics], sweep_protocol: dict[str, Any],
                   evaluation: dict[str, Any], sampler_curve: dict[str, Any],
                   comparison: dict[str, Any], full_training: list[dict],
                   full_training_sampler: dict[str, Any] | None = None,
                   **rest: Any) -> ReportInputs:
        """The inputs from the tables and manifest infos as storage reads them: Backbone.info()
        as the dump recorded it, the stages' configs, the plots by name (proxies, score,
        scatter); the geometry, rival predictors' and score rows (typed, as storage reads them),
        LayerScoreResult.info(); BridgeabilityResult
        .info(), the BridgeMetrics of every swept layer, the sweep's config; EvalResult.info(),
        SamplerCurveResult.info(); ComparisonResult.info(); FullTrainingResult's rows and
        sampler; ...; `rest`: the fields taken as they are."""
        return cls(backbone_info=BackboneInfo.from_dict(backbone_info),
                   configs=StageConfigs.from_dict(configs), plots=Plots(**plots),
                   locate=LocateInputs(geometry_rows, predictor_rows, score_rows,
                                       LayerScoreSummary.from_dict(score)),
                   bridges=ReplaceInputs.from_dicts(bridgeability, sweep_layers, sweep_protocol),
                   evaluate=EvaluateInputs.from_dicts(evaluation, sampler_curve),
                   comparison=CompareInputs.from_dict(comparison),
                   full_training=FullTrainingInputs.from_dicts(full_training,
                                                               full_training_sampler),
                   **rest)
