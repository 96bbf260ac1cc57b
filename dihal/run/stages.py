"""The one table of the pipeline's stages. Each stage is named once, here, with its code
version, the config dataclass its run config mirrors, and the storage class of its artifact;
from it are derived the code versions of the fingerprints and the Dagster code_version
(assets._stage.CODE_VERSIONS), the stages a preset may override (dihal.run.profiles.STAGE_CONFIGS),
the Dagster run-config classes (assets.configs), each artifact kind's manifest `stage`
(storage.artifacts), the asset keys (`asset_key`), the named jobs (JOBS, which
pipeline.definitions builds) and the driver's stages (DRIVER_STAGES, its --stop-after). A new
stage is one entry; what each code version changed is in CHANGELOG.md.

Standard library only: storage imports it (the config classes are named, not imported).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Stage:
    """One stage. `name` is the manifest's stage, the profile's key and the asset key's prefix
    (`<name>_<backbone>`, or `<name>` for the shared corpus)."""

    name: str
    # bumped when the stage's code changes its output; part of every fingerprint and of the
    # Dagster code_version, so the UI marks downstream assets stale. What each version changed:
    # CHANGELOG.md
    code_version: str
    kind: str  # the storage.artifacts class of its artifact
    config: str | None = None  # the dihal.config dataclass its run config mirrors
    run_config: str | None = None  # the Dagster run-config class's name
    run_defaults: dict[str, Any] = field(default_factory=dict)  # its defaults other than config's
    run_doc: str | None = None  # the run config's docstring, where not the dataclass's


STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("corpus", "1", "Corpus", "CorpusConfig", "CorpusRunConfig"),
    Stage("sequences", "1", "Sequences", "SequenceConfig", "SequencesRunConfig"),
    Stage("hidden_states", "2", "HiddenStates", "ExtractConfig", "ExtractRunConfig"),
    Stage("geometry", "3", "Geometry", "GeometryConfig", "GeometryRunConfig"),
    Stage("layer_score", "3", "LayerScore", "LayerScoreConfig", "LayerScoreRunConfig"),
    Stage("bridge_sweep", "6", "SweepBridge", "BridgeProtocol", "BridgeProtocolRunConfig"),
    Stage("bridgeability", "6", "Bridgeability"),
    Stage("bridge", "7", "Bridge", "BridgeProtocol", "FullBridgeRunConfig", {"epochs": 2.0},
          "The bridge at l* with the full budget: the sweep protocol with more passes."),
    Stage("eval", "13", "Evaluation", "EvalConfig", "EvalRunConfig"),
    Stage("regression_sweep", "5", "RegressionControl"),
    Stage("sampler_steps", "8", "SamplerCurve", "SamplerCurveConfig", "SamplerCurveRunConfig"),
    Stage("baseline", "6", "BaselineRun", "BaselineRunConfig", "BaselineRunConfig"),
    Stage("comparison", "8", "Comparison"),
    Stage("full_training", "10", "FullTraining"),
    Stage("report", "21", "Report"),
    Stage("budget", "2", "BudgetStudy", "BudgetConfig", "BudgetRunConfig"),
    Stage("budget_generation", "3", "BudgetGeneration", "BudgetGenerationConfig",
          "BudgetGenerationRunConfig"),
)}

CODE_VERSIONS = {name: s.code_version for name, s in STAGES.items()}


def stage_of_kind(kind: str) -> str | None:
    """The stage whose artifact is the storage class named `kind`, None if none is."""
    return next((name for name, s in STAGES.items() if s.kind == kind), None)


def asset_key(stage: str, backbone: str | None = None) -> str:
    """The Dagster asset (without partition) that makes `stage` for `backbone`."""
    if stage not in STAGES:
        raise KeyError(f"unknown stage {stage!r}; the stages are {sorted(STAGES)} (dihal.run.stages)")
    return f"{stage}_{backbone}" if backbone else stage


@dataclass(frozen=True)
class Job:
    """One named job of a backbone, `<name>_<backbone>` (the Jobs page of the web UI; the
    driver launches exactly these, in this order): the assets of `stages`, with everything
    upstream of them where `upstream`; `partitioned` jobs run as one backfill. `driver`: the
    driver's --stop-after values it completes (empty: it runs with the next one's). The
    description may name {backbone}."""

    name: str
    stages: tuple[str, ...]
    description: str
    upstream: bool = False
    partitioned: bool = False
    driver: tuple[str, ...] = ()


JOBS: tuple[Job, ...] = (
    Job("locate", ("layer_score",), "corpus -> hidden states -> geometry -> layer score for "
        "{backbone}",
        upstream=True, driver=("locate",)),
    Job("sweep", ("bridge_sweep", "regression_sweep"), "a bridge per candidate layer under one "
        "protocol, and its regression control; one partition per layer, launched as one "
        "backfill", partitioned=True, driver=("sweep",)),
    Job("bridge_eval", ("bridgeability", "bridge", "eval", "sampler_steps"), "does the score "
        "predict bridgeability; the bridge at l* with the full budget; its samples, Gen.PPL and "
        "diversity; what the sampler's steps buy", driver=("bridge", "eval")),
    Job("baselines", ("baseline",), "the continuous-diffusion baselines at DiHAL's budget; one "
        "partition per baseline, launched as one backfill", partitioned=True),
    Job("compare", ("comparison", "full_training", "report"), "DiHAL against the baselines; "
        "geometry-selected, oracle and worst layer under full training; the report",
        driver=("report",)),
)
# Jobs outside the main job: the driver never launches them (`python -m pipeline.budget`, the
# web UI or `dagster job backfill` do). A job may not share its name with an asset of the code
# location (Dagster refuses the location): budget_study_<b> materialises the asset budget_<b>,
# budget_generate_<b> the asset budget_generation_<b>
STUDY_JOBS: tuple[Job, ...] = (
    Job("budget_study", ("budget",), "how the answers move with the bridge's training budget, for "
        "{backbone}: the bridge, its ridge and network controls and our ridge-started variant "
        "at several budgets per layer; one partition per layer", partitioned=True),
    Job("budget_generate", ("budget_generation",), "DiHAL at l* and CoDAR trained at the "
        "lowest and the highest budget of the study, for {backbone}, each sampled and scored "
        "as the eval samples: Gen.PPL and diversity against the budget"),
)
# The driver's --stop-after values, in order (bridge and eval: one job, bridge_eval)
DRIVER_STAGES: tuple[str, ...] = tuple(step for job in JOBS for step in job.driver)


def job_name(job: str, backbone: str) -> str:
    """The Dagster job `job` of `backbone`."""
    if job not in {j.name for j in (*JOBS, *STUDY_JOBS)}:
        raise KeyError(f"unknown job {job!r}; the jobs are "
                       f"{[j.name for j in (*JOBS, *STUDY_JOBS)]} (dihal.run.stages.JOBS, STUDY_JOBS)")
    return f"{job}_{backbone}"


def job_keys(job: Job, backbone: str) -> list[str]:
    """The asset keys a job of `backbone` selects (before its upstream)."""
    return [asset_key(stage, backbone) for stage in job.stages]
