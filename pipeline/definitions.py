"""The Dagster code location: the only place that wires assets, resources, jobs together.

Jobs per backbone b (the Jobs page of the web UI; `python -m pipeline.main` launches exactly
these): locate_b; sweep_b, partitioned by candidate layer and run as asset backfills;
bridge_eval_b (bridgeability, the bridge at l*, its evaluation); baselines_b, partitioned by
baseline; compare_b (comparison, full training, report); outside the main job,
budget_study_b (the training-budget study of the asset budget_b, partitioned by layer) and
budget_generate_b (budget_generation_b: DiHAL at l* and CoDAR generating at the study's lowest
and highest budget).

Steps run in the run's own process, or on a Dask cluster when DIHAL_DASK_SCHEDULER names its
scheduler (README: "Scaling out").
"""

from __future__ import annotations

import warnings

import dagster as dg

from assets.budget import budget_assets
from assets.checks import science_checks
from assets.compare import compare_assets
from assets.evaluate import evaluate_assets
from assets.locate import corpus, locate_assets
from assets.replace import replace_assets
from assets.report import report_assets
from dihal import heap
from dihal.environment import dask_scheduler
from dihal.registry import all_backbones, declaration_problems, get_spec
from dihal.run.stages import JOBS, STUDY_JOBS, job_keys, job_name
from dihal.versions import check_dependencies
from resources import (
    BackboneResource,
    ComputeResource,
    JudgeResource,
    PresetResource,
    StorageResource,
)


def build_definitions(
    backbones: tuple[str, ...] | None = None, resources: dict | None = None,
    n_layers: dict[str, int] | None = None,
) -> dg.Definitions:
    """All asset families: of ``backbones``, by default every built-in and declared one
    (dihal.registry.all_backbones: dihal.toml's [backbones], the driver's --backbone).
    ``n_layers`` overrides the layer count per backbone (tests use tiny models); by default it
    comes from the registry (a declared backbone's from its config.json). A pinned package
    installed outside its supported releases is refused, or warned about, first
    (dihal.versions.check_dependencies: every door loads the code location through here)."""
    for msg in check_dependencies():
        warnings.warn(msg, stacklevel=2)
    if backbones is None:
        backbones = tuple(all_backbones())
        for exc in declaration_problems().values():  # the others stay in the location
            warnings.warn(f"left out of the code location: {exc}", stacklevel=2)
    assets: list = [corpus]
    checks: list = []
    jobs: list = []
    schedules: list = []
    for name in backbones:
        layers = (n_layers or {}).get(name) or get_spec(name).n_layers
        for d in (locate_assets(name) + replace_assets(name, layers)
                  + evaluate_assets(name, layers) + compare_assets(name)
                  + report_assets(name) + budget_assets(name, layers)
                  + science_checks(name, layers)):
            if isinstance(d, dg.AssetChecksDefinition):
                checks.append(d)
            elif isinstance(d, dg.ScheduleDefinition):
                schedules.append(d)
            elif isinstance(d, dg.AssetsDefinition):
                assets.append(d)
            else:
                jobs.append(d)
        jobs += stage_jobs(name)
    return dg.Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=jobs,
        schedules=schedules,
        executor=executor(),
        resources={**default_resources(), **(resources or {})},
    )


def default_resources() -> dict:
    """The resources of a code location that names none (a test names its own, the preset
    then from here)."""
    return {"storage": StorageResource(), "backbones": BackboneResource(),
            "compute": ComputeResource(), "judge": JudgeResource(), "preset": PresetResource()}


def stage_jobs(b: str) -> list:
    """The named jobs of backbone b (dihal.run.stages.JOBS), in the order the main job runs them,
    then its studies outside the main job (STUDY_JOBS)."""
    jobs = []
    for job in (*JOBS, *STUDY_JOBS):
        sel = dg.AssetSelection.assets(*job_keys(job, b))
        jobs.append(dg.define_asset_job(
            job_name(job.name, b), selection=sel.upstream() if job.upstream else sel,
            description=job.description.format(backbone=b),
            tags={"dihal/backbone": b}))
    return jobs


def executor():
    """In the run's process; on the Dask scheduler DIHAL_DASK_SCHEDULER when it is set."""
    address = dask_scheduler()
    if not address:
        return dg.in_process_executor
    from pipeline.dask_engine import dask_executor

    return dask_executor.configured({"address": address}, name="dask")


defs = build_definitions()
# Every process that loads the code location (code servers, run workers, the dagster and dg
# commands) uses dihal's garbage-collector settings; the definitions and the
# modules imported so far live as long as the process (dihal.heap)
heap.use_in_this_process()
heap.settle()
