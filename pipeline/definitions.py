"""The Dagster code location: the only place that wires assets, resources, jobs together."""

from __future__ import annotations

import dagster as dg

from assets.locate import corpus, locate_assets
from resources import BackboneResource, ComputeResource, StorageResource

BACKBONES = ("smollm2", "llama", "qwen")


def build_definitions(
    backbones: tuple[str, ...] = BACKBONES, resources: dict | None = None
) -> dg.Definitions:
    assets: list = [corpus]
    checks: list = []
    jobs = []
    for name in backbones:
        for d in locate_assets(name):
            (checks if isinstance(d, dg.AssetChecksDefinition) else assets).append(d)
        jobs.append(dg.define_asset_job(
            f"locate_{name}", selection=dg.AssetSelection.assets(f"layer_score_{name}").upstream(),
            description=f"corpus -> hidden states -> geometry -> layer score for {name}",
        ))
    return dg.Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=jobs,
        resources=resources or {
            "storage": StorageResource(),
            "backbones": BackboneResource(),
            "compute": ComputeResource(),
        },
    )


defs = build_definitions()
