"""A Dagster code location over a tiny world, for the browser test (tests/test_ui_browser.py):
the tiny model, shard and artifact root come from DIHAL_UI_MODEL, DIHAL_UI_SHARD and
DIHAL_UI_ROOT. `dagster dev -m tests.ui_location` serves it."""

import os

from pipeline.definitions import build_definitions
from resources import BackboneResource, ComputeResource, JudgeResource, StorageResource

_model = os.environ["DIHAL_UI_MODEL"]
defs = build_definitions(("llama",), n_layers={"llama": 4}, resources={
    "storage": StorageResource(root=os.environ["DIHAL_UI_ROOT"]),
    "backbones": BackboneResource(paths={"llama": _model}),
    "compute": ComputeResource(device="cpu", threads=1),
    "judge": JudgeResource(name=_model),
})
