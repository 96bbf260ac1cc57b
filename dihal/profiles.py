"""Named settings of the whole chain: `cpu` (the defaults of dihal.config: minutes on a laptop)
and `gpu` (the paper's scale on one GPU). A profile overrides the defaults of stages' configs;
DIHAL_PROFILE (a name, or a JSON file of the same shape) selects one for every entry point: the
driver's --profile, `dagster dev`, `dagster asset materialize`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dihal import config as dc
from dihal.stages import STAGES

# stage -> the config dataclass its run config mirrors (dihal.stages)
STAGE_CONFIGS = {name: getattr(dc, s.config) for name, s in STAGES.items() if s.config}

_GPU_PROTOCOL = {
    # a larger denoiser (5.48M parameters at d = 576; the default has 4.88M), bigger batches
    "d_model": 272, "n_layers": 4, "n_heads": 4, "batch_size": 32, "eval_sequences": 128,
}
PROFILES: dict[str, dict[str, dict]] = {
    "cpu": {},
    "gpu": {
        # 8192 x 128 = 1,048,576 training tokens; 576 held-out sequences hold 73,152 positions
        # after position 0, of which geometry samples 16,384, and give MAUVE its reference of
        # held-out texts: at least 512 a side (issue 18), with room for the few empty ones. The
        # embedded corpus (1,910 documents) fills 8,192 training sequences only with up to 768
        # tokens a document (at 256: 3,506; at 768: 10,317 train, 1,062 held-out, with
        # SmolLM2's tokenizer)
        "sequences": {"n_train": 8192, "n_val": 576, "max_tokens_per_doc": 768},
        # bounded storage: the training split's states are computed by each bridge, not stored
        "hidden_states": {"batch_size": 64, "store_train": False},
        "geometry": {"n_tokens": 16384},
        "layer_score": {"sequence_resamples": 20, "split_halves": 3},
        "bridge_sweep": {**_GPU_PROTOCOL, "seeds": 3},
        # the full-training bridges (l*, oracle, worst) under 3 training seeds each: their
        # spread is reported per role (dihal.compare.stage.full_training); gpu-smollm2 inherits it
        "bridge": {**_GPU_PROTOCOL, "epochs": 2.0, "seeds": 3},
        # 544 samples: MAUVE compares equal counts of non-empty samples and held-out texts, and
        # is a result (not a diagnostic) only at 512 or more a side; a few samples of a hybrid
        # may be empty (EOS first)
        "eval": {"n_samples": 544, "length": 128, "batch_size": 128},
        "baseline": {"n_samples": 544, "length": 128},
    },
}
# SmolLM2's whole chain in one 10-minute command on one H200 (issue 19, item 8): half the
# training tokens (4,096 x 128 = 524,288), the driver's default sweep of 10 candidate layers
# (not all 29), 256 samples per evaluated system; the held-out split and geometry as `gpu`.
# Estimated from OFFLINE.md's 130,000 tokens/s forward and an assumed ~10 s of process start-up
# and model load per Dagster run (17 runs): about 9 minutes. benchmarks/gpu_check.py's
# extrapolation measures the stage times of both GPU profiles on the machine it runs on.
PROFILES["gpu-smollm2"] = {
    **PROFILES["gpu"],
    "sequences": {**PROFILES["gpu"]["sequences"], "n_train": 4096},
    "eval": {**PROFILES["gpu"]["eval"], "n_samples": 256},
    "baseline": {**PROFILES["gpu"]["baseline"], "n_samples": 256},
}
# What the default (cpu) run cannot decide, on the CPU at a few times its cost: replicate
# training seeds on every swept layer (where the seed spread is larger than the gaps between
# layers, the per-layer means need more than one seed; 3 as the gpu profile), and twice the
# held-out sequences (128: the sweep measures each bridge on 64 of them, the eval and the
# baselines sample 128 each), with every candidate layer swept. The protocol (network, budget,
# K) is the default's, so its layer ranking is comparable with the default run's. Cost,
# extrapolated from the default run's per-step seconds (docs/configuration.md, "Presets").
PROFILES["study"] = {
    "sequences": {"n_val": 128},
    "bridge_sweep": {"seeds": 3, "eval_sequences": 64},
    "eval": {"n_samples": 128},
    "baseline": {"n_samples": 128},
}
# Profiles whose sweep covers every candidate layer unless the driver is given --layers: every
# profile (with fewer swept layers the paired test against depth has a floor on its p-value
# that no bridge measurement can lower: over SmolLM2's default 10 layers S_l and depth ranked
# them alike in 43 % of layer resamples)
ALL_LAYERS = {"cpu", "gpu", "study"}
# Profiles whose driver trains replicate seeds on a subset of the swept layers: (seeds, layers).
# On the cpu profile a second seed on every swept layer would add a second sweep's training to
# the SmolLM2 run (benchmarks/RESULTS.md); 2 seeds on 4 of them fit. The
# driver picks the layers evenly over the sorted swept layers, first and last included
# (dihal.replace.stage.default_seed_layers); --seeds / --seed-layers choose others. Elsewhere the
# profile's bridge_sweep seeds (gpu: 3) train every swept layer.
SEED_SUBSET = {"cpu": (2, 4)}


def load_profile(name: str | None = None) -> tuple[str, dict[str, dict]]:
    """(label, stage -> overrides) for a profile name or a JSON file path; default: the
    DIHAL_PROFILE variable, else "cpu". Every override is checked by building its stage's
    config with it (a ValueError names the field)."""
    name = name or os.environ.get("DIHAL_PROFILE") or "cpu"
    if name in PROFILES:
        profile = PROFILES[name]
    elif name.endswith(".json"):
        try:
            profile = json.loads(Path(name).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"profile file {name}: {exc}") from None
    else:
        raise ValueError(f"unknown profile {name!r}: give one of {sorted(PROFILES)} or a .json "
                         "file of stage -> {field: value}")
    unknown = sorted(set(profile) - set(STAGE_CONFIGS))
    if unknown:
        raise ValueError(f"profile {name}: unknown stages {unknown}; the stages are "
                         f"{sorted(STAGE_CONFIGS)}")
    for stage, overrides in profile.items():
        fields = STAGE_CONFIGS[stage].__dataclass_fields__
        bad = sorted(set(overrides) - set(fields))
        if bad:
            raise ValueError(f"profile {name}: {stage} has no fields {bad}")
        STAGE_CONFIGS[stage](**{k: tuple(v) if isinstance(v, list) else v
                                for k, v in overrides.items()})
    return name, profile
