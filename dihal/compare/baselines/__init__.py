"""Continuous-diffusion language-model baselines at DiHAL's budget (docs/method.md §5).

Each module exposes `build(embeddings, seq_len, target_params, seed, bos_id, eos_id)` returning
a model that follows `dihal.compare.baselines.base.Baseline`. The list of baselines, their modules and
recipe versions is dihal.registry.BASELINE_SPECS.
"""

from __future__ import annotations

import importlib

from dihal.registry import BASELINE_SPECS, BASELINES

# Bumped when a baseline's recipe changes its results: part of its artifact's fingerprint.
VERSIONS = {name: spec.version for name, spec in BASELINE_SPECS.items()}


def build_baseline(name: str, **kwargs):
    if name not in BASELINE_SPECS:
        raise KeyError(f"unknown baseline {name!r}: known are {list(BASELINES)}")
    return importlib.import_module(f"dihal.compare.baselines.{BASELINE_SPECS[name].module}").build(**kwargs)
