"""A Dagster code location over a tiny world, for tests that go through a real instance and
separate processes (the browser test, the driver through the daemon, the Dask engine): the
tiny model from DIHAL_TINY_MODEL, the artifact root from DIHAL_ARTIFACTS, and the tiny configs
from DIHAL_PROFILE (a JSON profile, see tests.tiny.tiny_profile). `dagster dev -m
tests.tiny_location` serves it. Not a test module: it only defines `defs`."""

import os

from pipeline.definitions import build_definitions
from resources import BackboneResource, ComputeResource, JudgeResource, StorageResource

if "DIHAL_TINY_MODEL" in os.environ:
    _model = os.environ["DIHAL_TINY_MODEL"]
    defs = build_definitions(("llama",), n_layers={"llama": 4}, resources={
        "storage": StorageResource(),  # DIHAL_ARTIFACTS
        "backbones": BackboneResource(paths={"llama": _model}),
        "compute": ComputeResource(device="cpu", threads=1),
        "judge": JudgeResource(name=_model),
    })
