"""Artifact layout and IO: one class per artifact kind (storage.artifacts, by stage family),
the lineage queries (storage.lineage), the report's inputs (storage.report_inputs), manifests,
Parquet tables, Zarr hidden states.

Imports only the standard library and dihal's stdlib-only leaves (atomic, errors, results) at
module level; numpy, pyarrow, zarr and safetensors are imported inside the functions that need
them, so the Dagster layer can import this package cheaply.
"""

from storage.artifacts import (
    Artifact,
    BaselineRun,
    Bridge,
    Bridgeability,
    BridgeRun,
    BudgetGeneration,
    BudgetStudy,
    Comparison,
    Corpus,
    Evaluation,
    FileLink,
    FullRegressionControl,
    FullTraining,
    FullTrainingBridge,
    Geometry,
    HiddenStates,
    LayerScore,
    Markdown,
    Plot,
    RegressionControl,
    Report,
    SamplerCurve,
    Sequences,
    SweepBridge,
    Table,
    WorkArtifact,
)
from storage.layout import ArtifactLayout
from storage.lineage import (
    bridgeability_inputs,
    cross_backbone_artifacts,
    current_baselines,
    current_budget_generation,
    current_budget_studies,
    eval_inputs,
    regression_controls,
    swept_bridges,
)
from storage.manifest import Manifest, fingerprint, read_manifest
from storage.report_inputs import backbone_summary, report_inputs

__all__ = [
    "Artifact", "ArtifactLayout", "BaselineRun", "Bridge", "BridgeRun", "Bridgeability",
    "BudgetGeneration", "BudgetStudy",
    "Comparison", "Corpus", "Evaluation", "FileLink", "FullRegressionControl", "FullTraining",
    "FullTrainingBridge",
    "Geometry", "HiddenStates", "LayerScore", "Manifest", "Markdown", "Plot", "RegressionControl",
    "Report", "SamplerCurve", "Sequences", "SweepBridge", "Table", "WorkArtifact",
    "backbone_summary", "bridgeability_inputs", "cross_backbone_artifacts", "current_baselines",
    "current_budget_generation", "current_budget_studies",
    "eval_inputs", "fingerprint", "read_manifest",
    "regression_controls", "report_inputs", "swept_bridges",
]
