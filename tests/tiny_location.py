"""A Dagster code location over a tiny world, for tests that go through a real instance and
separate processes (the browser test, the driver through the daemon, the Dask engine): the
tiny model from DIHAL_TINY_MODEL, the artifact root from DIHAL_ARTIFACTS, and the tiny configs
from DIHAL_PROFILE (a JSON profile, see tiny_profile). `dagster dev -m tests.tiny_location`
serves it."""

import json
import os
from pathlib import Path

from pipeline.definitions import build_definitions
from resources import BackboneResource, ComputeResource, JudgeResource, StorageResource

# Every stage small enough for seconds on a CPU (the fault suite's world, plus the later stages)
PROTOCOL = {"d_model": 32, "n_layers": 1, "n_heads": 2, "batch_size": 2, "eval_sequences": 4,
            "steps": 4, "checkpoint_every": 2}
TINY = {
    "sequences": {"seq_len": 16, "n_train": 8, "n_val": 6, "val_fraction": 0.3,
                  "max_tokens_per_doc": 40},
    "hidden_states": {"batch_size": 4},
    "geometry": {"n_tokens": 64, "n_anchors": 24, "k_neighbors": 6, "n_pairs": 100},
    "bridge_sweep": PROTOCOL,
    "bridge": {**PROTOCOL, "epochs": 2.0},
    "eval": {"n_samples": 4, "length": 6, "batch_size": 2},
    "sampler_steps": {"steps": [1, 2, 4], "n_samples": 2, "length": 4},
    "baseline": {"n_samples": 4, "length": 8},
}


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
