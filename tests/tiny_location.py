"""A Dagster code location over a tiny world, for tests that go through a real instance and
separate processes (the browser test, the driver through the daemon, the Dask engine): the
tiny model from DIHAL_TINY_MODEL, the artifact root from DIHAL_ARTIFACTS, and the tiny configs
from DIHAL_PROFILE (a JSON profile, see tiny_profile). `dagster dev -m tests.tiny_location`
serves it."""

import json
import os
from pathlib import Path

from dihal.profiles import PROFILES
from pipeline.definitions import build_definitions
from resources import BackboneResource, ComputeResource, JudgeResource, StorageResource

# Every stage small enough for seconds on a CPU: the public tiny preset (dihal.profiles)
TINY = PROFILES["tiny"]
PROTOCOL = TINY["bridge_sweep"]


def tiny_profile(path: Path, shard: Path, **stages: dict) -> Path:
    """Write the tiny profile (with `stages` replacing those stages' settings), reading the
    corpus from `shard`; its path (for DIHAL_PROFILE)."""
    path.write_text(json.dumps({**TINY, "corpus": {"paths": [str(shard)]}, **stages}))
    return path


if "DIHAL_TINY_MODEL" in os.environ:
    _model = os.environ["DIHAL_TINY_MODEL"]
    defs = build_definitions(("llama",), n_layers={"llama": 4}, resources={
        "storage": StorageResource(),  # DIHAL_ARTIFACTS
        "backbones": BackboneResource(paths={"llama": _model}),
        "compute": ComputeResource(device="cpu", threads=1),
        "judge": JudgeResource(name=_model),
    })
