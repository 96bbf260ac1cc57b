"""The driver's code location: loaded in the driver's own process under the environment the
driver set for it (pipeline.main.set_location_environment), refused where its config defaults
were read under another (stale_defaults), named as `dagster dev` and `dg dev` name it, and the
source of every run's config spelled out in full (full_run_config)."""

from __future__ import annotations

import json
import os
import sys

from pipeline.daemon import location_name


def full_run_config(job) -> dict:
    """Every op's and resource's config of a remote job, each field spelled out with the value
    this code location gives it (loaded in the driver, under the driver's profile:
    pipeline.launch.launcher): the run then executes these values wherever it runs (a daemon,
    `dagster dev` or a Dask worker started under another profile or environment uses none of
    its own defaults)."""
    snap = job.config_schema_snapshot
    shapes = ("STRICT_SHAPE", "PERMISSIVE_SHAPE")

    def values(type_key: str) -> dict:
        out = {}
        for f in snap.get_config_snap(type_key).fields or []:
            if f.default_provided:
                out[f.name] = json.loads(f.default_value_as_json_str)
            elif snap.get_config_snap(f.type_key).kind.value in shapes and (
                    sub := values(f.type_key)):
                out[f.name] = sub
        return out

    root = snap.get_config_snap(job.job_snapshot.mode_def_snaps[0].root_config_key)
    return {f.name: tree for f in root.fields if f.name in ("ops", "resources")
            and (tree := {k: v for k, v in values(f.type_key).items() if v.get("config")})}


def merged(base: dict, over: dict) -> dict:
    """`base` with `over` merged in, key by key (nested dicts merged, other values replaced)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def only_location(workspace):
    """The one code location of the driver's workspace (the one it started), or a clear error
    where it failed to load."""
    (name,) = workspace.code_location_names
    if workspace.has_code_location_error(name):
        raise RuntimeError(f"code location {name} failed to load: "
                           f"{workspace.get_code_location_error(name)}")
    return workspace.get_code_location(name)


def stale_defaults() -> list[str]:
    """The code location's config defaults that its modules read from the environment when they
    were imported (the resources', the preset of the stages' configs) and that are other now,
    one line each: a location loaded in this process would submit runs with those."""
    from dihal.run.profiles import resolve_preset

    out = []
    if (res := sys.modules.get("resources")) is not None:
        now = res.environment_defaults()
        out += [f"{name}.{key}: {was!r} when it was imported, {now[name][key]!r} now"
                for name, fields in res.IMPORTED_DEFAULTS.items()
                for key, was in fields.items() if now[name][key] != was]
    if (configs := sys.modules.get("assets.configs")) is not None and (
            now_label := resolve_preset().label) != configs.PRESET.label:
        out.append(f"the stages' preset: {configs.PRESET.label!r} when it was imported, "
                   f"{now_label!r} now")
    return out


def location_target(module: str):
    """Dagster's load target of the code location `module` in this process, named as
    location_name says."""
    from dagster._core.remote_origin import InProcessCodeLocationOrigin
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
    from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget

    return InProcessWorkspaceLoadTarget([InProcessCodeLocationOrigin(
        LoadableTargetOrigin(executable_path=sys.executable, module_name=module,
                             working_directory=os.getcwd()),
        location_name=location_name(module))])
