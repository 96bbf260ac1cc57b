"""The Dagster code location: the only place that wires assets, resources, jobs together."""

from __future__ import annotations

import dagster as dg

from assets.checks import science_checks
from assets.compare import compare_assets
from assets.locate import corpus, locate_assets
from assets.replace import replace_assets
from dihal.registry import BACKBONES, get_spec
from resources import BackboneResource, ComputeResource, JudgeResource, StorageResource


def build_definitions(
    backbones: tuple[str, ...] = tuple(BACKBONES), resources: dict | None = None,
    n_layers: dict[str, int] | None = None,
) -> dg.Definitions:
    """All asset families. ``n_layers`` overrides the layer count per backbone (tests use
    tiny models); by default it comes from dihal.registry.BACKBONES."""
    assets: list = [corpus]
    checks: list = []
    jobs: list = []
    schedules: list = []
    for name in backbones:
        layers = (n_layers or {}).get(name) or get_spec(name).n_layers
        for d in (locate_assets(name) + replace_assets(name, layers) + compare_assets(name)
                  + science_checks(name, layers)):
            if isinstance(d, dg.AssetChecksDefinition):
                checks.append(d)
            elif isinstance(d, dg.ScheduleDefinition):
                schedules.append(d)
            elif isinstance(d, dg.AssetsDefinition):
                assets.append(d)
            else:
                jobs.append(d)
        jobs.append(dg.define_asset_job(
            f"locate_{name}", selection=dg.AssetSelection.assets(f"layer_score_{name}").upstream(),
            description=f"corpus -> hidden states -> geometry -> layer score for {name}",
        ))
    return dg.Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=jobs,
        schedules=schedules,
        resources=resources or {
            "storage": StorageResource(),
            "backbones": BackboneResource(),
            "compute": ComputeResource(),
            "judge": JudgeResource(),
        },
    )


defs = build_definitions()
