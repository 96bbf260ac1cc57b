"""Named presets of the whole chain, resolved the same way by every door (the driver, the web
UI's launchpad, `dagster asset materialize`, `dg launch`, the schedules): `cpu` (the defaults of
dihal.config: minutes on a laptop), `gpu` (the paper's scale on one GPU), `gpu-smollm2`
(SmolLM2's chain in about ten minutes on one H200), `tiny` (every stage in seconds on a CPU: a
check of the plumbing, on a tiny model or a real one), or a JSON file of stage -> {field:
value}. A preset overrides the defaults of the stages' configs.

Which preset: `resolve_preset` is the one function every door calls. It takes the name given
(the driver's --profile), else $DIHAL_PROFILE, else the instance's choice (the file
`dihal-preset` in $DAGSTER_HOME, written by `python -m pipeline.preset NAME`), else the
project's (`preset = "..."` at the top of dihal.toml), else `cpu`. The preset's label is
recorded in every artifact's manifest, fingerprint and materialization metadata.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from dihal import config as dc
from dihal.environment import env_text
from dihal.registry import config_file, project_config
from dihal.run.stages import STAGES

# stage -> the config dataclass its run config mirrors (dihal.run.stages)
STAGE_CONFIGS = {name: getattr(dc, s.config) for name, s in STAGES.items() if s.config}

_GPU_PROTOCOL = {
    # a larger denoiser (5.48M parameters at d = 576; the default has 4.88M), bigger batches
    "d_model": 272, "n_layers": 4, "n_heads": 4, "batch_size": 32, "eval_sequences": 128,
}
PROFILES: dict[str, dict[str, dict]] = {
    # The sweep measures each bridge and ridge control on 8 held-out sequences with the sampler
    # at K = 8: the smallest setting whose layer ranking agrees with the full (32, 16) one at
    # least as well as two training seeds agree, with every verdict unchanged, measured on the
    # 29 bridges of a SmolLM2 sweep (benchmarks/measure_sizing.py, dihal.replace.sizing;
    # benchmarks/RESULTS.md). The budget study keeps the full measurement, and its generation
    # the bridge's K, apart from the sweep's sizing.
    "cpu": {
        "bridge_sweep": {"eval_sequences": 8, "sampler_steps": 8},
        "budget": {"eval_sequences": 32, "sampler_steps": 16},
        "budget_generation": {"sampler_steps": 16},
    },
    "gpu": {
        # 8192 x 128 = 1,048,576 training tokens; 576 held-out sequences hold 73,152 positions
        # after position 0, of which geometry samples 16,384, and give MAUVE its reference of
        # held-out texts: at least 512 a side, with room for the few empty ones. The
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
        # and the whole temperature frontier (dihal.config.FRONTIER_TEMPERATURES; the cpu
        # default draws the main temperature alone)
        "eval": {"n_samples": 544, "length": 128, "batch_size": 128,
                 "frontier_temperatures": list(dc.FRONTIER_TEMPERATURES)},
        "baseline": {"n_samples": 544, "length": 128,
                     "frontier_temperatures": list(dc.FRONTIER_TEMPERATURES)},
        # the budget study's GPU variant adds 8,192 steps (where the corpus holds fewer
        # training tokens, the study's rows say how often each repeats)
        "budget": {"budgets": [128, 512, 2048, 8192]},
        # DiHAL at l* and CoDAR at that study's ends (128 and 8,192 steps), sampled as the eval
        "budget_generation": {"budgets": [128, 512, 2048, 8192], "n_samples": 544,
                              "length": 128, "batch_size": 128},
    },
}
# SmolLM2's whole chain in one 10-minute command on one H200: half the training tokens
# (4,096 x 128 = 524,288), the driver's default sweep of 10 candidate layers (not all 29), 256
# samples per evaluated system; the held-out split and geometry as `gpu`. Estimated from a
# float32 forward of SmolLM2 with all hidden states measured at about 130,000 tokens/s on an
# H200 and an assumed ~10 s of process start-up and model load per Dagster run (17 runs):
# about 9 minutes. benchmarks/gpu_check.py's
# extrapolation measures the stage times of both GPU profiles on the machine it runs on.
PROFILES["gpu-smollm2"] = {
    **PROFILES["gpu"],
    "sequences": {**PROFILES["gpu"]["sequences"], "n_train": 4096},
    "eval": {**PROFILES["gpu"]["eval"], "n_samples": 256},
    "baseline": {**PROFILES["gpu"]["baseline"], "n_samples": 256},
    "budget_generation": {**PROFILES["gpu"]["budget_generation"], "n_samples": 256},
}
# What the default (cpu) run cannot decide, on the CPU at a few times its cost: replicate
# training seeds on every swept layer (where the seed spread is larger than the gaps between
# layers, the per-layer means need more than one seed; 3 as the gpu profile), twice the
# held-out sequences (128: the sweep measures each bridge on 64 of them at K = 16, the
# default's sweep on 8 at K = 8; the eval and the baselines sample 128 each), with every
# candidate layer swept, and the whole temperature frontier (the default draws the main
# temperature alone: what a lower temperature buys in Gen.PPL for diversity, and each model's
# Gen.PPL at the held-out text's diversity, need two or more). What is trained (network,
# budget, data) is the default's, so its layer ranking is comparable with the default run's. Cost, extrapolated from the default run's per-step
# seconds (docs/configuration.md, "Presets").
PROFILES["study"] = {
    "sequences": {"n_val": 128},
    "bridge_sweep": {"seeds": 3, "eval_sequences": 64},
    "eval": {"n_samples": 128, "frontier_temperatures": list(dc.FRONTIER_TEMPERATURES)},
    "baseline": {"n_samples": 128, "frontier_temperatures": list(dc.FRONTIER_TEMPERATURES)},
    "budget_generation": {"n_samples": 128},
}
# The preset whose run draws the whole temperature frontier for a CPU run: the report's
# frontier section names it where the frontier it reads has one temperature
WHOLE_FRONTIER_PRESET = "study"
# Every stage in seconds on one CPU thread (a bridge of 27k parameters, 8 training sequences of
# 16 tokens, 4 samples of 6 tokens): a check that the whole chain runs, on a tiny model (the
# worked example of docs/own-model.md) or on a real one; its numbers mean nothing. The corpus
# is the embedded sample unless a corpus section is added (a user's file).
_TINY_PROTOCOL = {"d_model": 32, "n_layers": 1, "n_heads": 2, "batch_size": 2,
                  "eval_sequences": 4, "sampler_steps": 4, "checkpoint_every": 2}
PROFILES["tiny"] = {
    "sequences": {"seq_len": 16, "n_train": 8, "n_val": 6, "val_fraction": 0.3,
                  "max_tokens_per_doc": 40},
    "hidden_states": {"batch_size": 4},
    "geometry": {"n_tokens": 64, "n_anchors": 24, "k_neighbors": 6, "n_pairs": 100},
    "bridge_sweep": _TINY_PROTOCOL,
    "bridge": {**_TINY_PROTOCOL, "epochs": 2.0},
    "eval": {"n_samples": 4, "length": 6, "batch_size": 2},
    "sampler_steps": {"steps": [1, 2, 4], "n_samples": 2, "length": 4},
    "baseline": {"n_samples": 4, "length": 8},
    "budget": {"budgets": [2, 4]},
    "budget_generation": {"budgets": [2, 4], "n_samples": 4, "length": 6, "batch_size": 2},
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


PRESET_ENV = "DIHAL_PROFILE"
INSTANCE_FILE = "dihal-preset"  # under $DAGSTER_HOME: the instance's preset, one line


@dataclass(frozen=True)
class Preset:
    """A resolved preset: `name` as chosen (a built-in name or a JSON file's path), `stages`
    (stage -> overrides) and `source`, where the choice came from."""

    name: str
    stages: dict[str, dict]
    source: str

    @property
    def label(self) -> str:
        """What manifests, fingerprints and metadata record: the built-in name, or the file's
        name and the digest of its content (`p.json@<sha256 prefix>`, content_digest): two
        files of one name with other content are two presets, never one; the same content in
        another folder (a copy, the file moved) is the same preset, so the same artifacts."""
        if self.name in PROFILES:
            return self.name
        return f"{Path(self.name).name}@{content_digest(self.stages)}"


LABEL_DIGEST_CHARS = 12  # of a JSON preset's sha256 in its label: 48 bits


def content_digest(stages: dict) -> str:
    """The first characters of the sha256 of a preset's content in canonical JSON (keys
    sorted, no spaces): reformatting the file or reordering its keys keeps it, any change of a
    value changes it."""
    text = json.dumps(stages, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:LABEL_DIGEST_CHARS]


def instance_file() -> Path | None:
    """$DAGSTER_HOME/dihal-preset, where DAGSTER_HOME is set."""
    home = os.environ.get("DAGSTER_HOME")
    return Path(home) / INSTANCE_FILE if home else None


def _project_choice() -> tuple[str, str] | None:
    """(preset, file) of the top-level `preset` key of dihal.toml ($DIHAL_CONFIG), a relative
    file path read from that file's folder; None where it has none."""

    path = config_file()
    # a file that is not TOML reads as {}: the code location loads with the default preset and
    # a warning naming the file (dihal.registry.project_config), and the driver refuses it
    value = project_config()[0].get("preset")
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{path}: `preset` must be a preset name ({', '.join(PROFILES)}) or a "
                         ".json file")
    if value.endswith(".json") and not Path(value).expanduser().is_absolute():
        value = str(path.parent / value)
    return value, str(path)


def chosen_preset() -> tuple[str, str]:
    """(name, source) of the preset no door named: $DIHAL_PROFILE, the instance's file, the
    project's dihal.toml, else cpu."""
    if (name := env_text(PRESET_ENV)) is not None:  # resolve_preset names it where unknown
        return name, f"${PRESET_ENV}"
    if (f := instance_file()) is not None and f.is_file():
        lines = [ln.strip() for ln in f.read_text().splitlines()
                 if ln.strip() and not ln.startswith("#")]
        if lines:
            return lines[0], str(f)
    if (project := _project_choice()) is not None:
        return project
    return "cpu", "the default"


def _near(name: str, fields) -> list[str]:
    """The fields a mistyped or shortened `name` may mean: those it is a word of
    (`steps` -> `sampler_steps`), else the closest spellings."""
    words = [f for f in fields if name in f.split("_")]
    return words or difflib.get_close_matches(name, list(fields), 1, 0.6)


def resolve_preset(name: str | None = None, source: str = "--profile") -> Preset:
    """The preset `name` (given by a door), else the chosen one (chosen_preset). Every override
    is checked by building its stage's config with it (a ValueError names the field)."""
    if not name:
        name, source = chosen_preset()
    if name in PROFILES:
        profile = PROFILES[name]
    elif name.endswith(".json"):
        try:
            profile = json.loads(Path(name).expanduser().read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"preset file {name} (from {source}): {exc}") from None
    else:
        raise ValueError(f"unknown preset {name!r} (from {source}): give one of "
                         f"{', '.join(PROFILES)} or a .json file of stage -> {{field: value}}")
    _check(name, profile)
    return Preset(name, profile, source)


def _check(name: str, profile: dict) -> None:
    if not isinstance(profile, dict):
        raise ValueError(f"preset {name}: give a JSON object of stage -> {{field: value}}")
    unknown = sorted(set(profile) - set(STAGE_CONFIGS))
    if unknown:
        raise ValueError(f"preset {name}: unknown stages {unknown}; the stages are "
                         f"{sorted(STAGE_CONFIGS)}")
    for stage, overrides in profile.items():
        fields = STAGE_CONFIGS[stage].__dataclass_fields__
        bad = sorted(set(overrides) - set(fields))
        if bad:
            close = {b: m[0] for b in bad if (m := _near(b, fields))}
            raise ValueError(f"preset {name}: {stage} has no fields {bad}" + (
                f" (did you mean {', '.join(f'{v} for {k}' for k, v in close.items())}?)"
                if close else ""))
        try:
            STAGE_CONFIGS[stage](**{k: tuple(v) if isinstance(v, list) else v
                                    for k, v in overrides.items()})
        except (TypeError, ValueError) as exc:
            raise ValueError(f"preset {name}: {stage}: {exc}") from None


def load_profile(name: str | None = None) -> tuple[str, dict[str, dict]]:
    """(name, stage -> overrides) of resolve_preset(name)."""
    preset = resolve_preset(name)
    return preset.name, preset.stages
