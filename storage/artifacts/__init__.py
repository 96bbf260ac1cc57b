"""One class per artifact kind, by stage family: the base protocol (base), Locate's kinds
(locate), Replace's (replace), Compare's (compare). Each owns its directory, its file names, its
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
    Table,
    WorkArtifact,
    _by_model,
    _preview,
)
from storage.artifacts.compare import BaselineRun, Comparison, FullTraining, Report
from storage.artifacts.locate import Corpus, Geometry, HiddenStates, LayerScore, Sequences
from storage.artifacts.replace import (
    Bridge,
    Bridgeability,
    BridgeRun,
    Evaluation,
    FullRegressionControl,
    FullTrainingBridge,
    RegressionControl,
    RowsArtifact,
    SamplerCurve,
    SweepBridge,
)

__all__ = [
    "DAMAGED", "VERIFIED", "Artifact", "BaselineRun", "Bridge", "BridgeRun", "Bridgeability",
    "Comparison", "Corpus", "Evaluation", "FileLink", "FullRegressionControl", "FullTraining",
    "FullTrainingBridge",
    "Geometry", "HiddenStates", "LayerScore", "Markdown", "Plot", "RegressionControl", "Report",
    "RowsArtifact", "SamplerCurve", "Sequences", "SweepBridge", "Table", "WorkArtifact",
    "_by_model", "_preview",
]
