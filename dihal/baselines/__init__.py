"""Continuous-diffusion language-model baselines at DiHAL's budget (METHOD.md s.5).

Each module exposes `build(embeddings, seq_len, target_params, seed, bos_id, eos_id)` returning
a model that follows `dihal.baselines.base.Baseline`.
"""

from __future__ import annotations

import importlib

BASELINES = ("diffusion-lm", "sed", "ld4lg", "codar")
_MODULES = {"diffusion-lm": "diffusion_lm", "sed": "sed", "ld4lg": "ld4lg", "codar": "codar"}
# Bumped when a baseline's recipe changes its results: part of its artifact's fingerprint.
VERSIONS = {"diffusion-lm": "1", "sed": "1", "ld4lg": "2", "codar": "1"}


def build_baseline(name: str, **kwargs):
    if name not in _MODULES:
        raise KeyError(f"unknown baseline {name!r}: known are {list(BASELINES)}")
    return importlib.import_module(f"dihal.baselines.{_MODULES[name]}").build(**kwargs)
