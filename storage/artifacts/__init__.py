"""One class per artifact kind, by stage family: the base protocol (base), Locate's kinds
(locate), Replace's (replace), Evaluate's (evaluate), Compare's (compare), Report's (report). Each owns its directory, its file names, its
manifest and its atomic write, and reads back typed values (dihal.results). Nobody else spells a
file name. The lineage queries are in storage.lineage, the report's inputs in
storage.report_inputs."""

from storage.artifacts.base import (
    DAMAGED,
    VERIFIED,
    Artifact,
    FileLink,
    Markdown,
    Plot,
    RowsArtifact,
    Table,
    WorkArtifact,
    preview,
)
from storage.artifacts.compare import BaselineRun, Comparison, FullTraining, FullTrainingBridge
from storage.artifacts.evaluate import Evaluation, FullRegressionControl, SamplerCurve
from storage.artifacts.locate import Corpus, Geometry, HiddenStates, LayerScore, Sequences
from storage.artifacts.replace import (
    Bridge,
    Bridgeability,
    BridgeRun,
    BudgetGeneration,
    BudgetStudy,
    RegressionControl,
    SweepBridge,
)
from storage.artifacts.report import Report

__all__ = [
    "DAMAGED", "VERIFIED", "Artifact", "BaselineRun", "Bridge", "BridgeRun", "Bridgeability",
    "BudgetGeneration", "BudgetStudy",
    "Comparison", "Corpus", "Evaluation", "FileLink", "FullRegressionControl", "FullTraining",
    "FullTrainingBridge",
    "Geometry", "HiddenStates", "LayerScore", "Markdown", "Plot", "RegressionControl", "Report",
    "RowsArtifact", "SamplerCurve", "Sequences", "SweepBridge", "Table", "WorkArtifact",
    "preview",
]
