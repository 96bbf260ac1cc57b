"""Dagster run config for each stage, generated from the frozen dataclasses of dihal.config
(the one config system): same fields, same defaults (unless a stage overrides one), tuples as
lists. `to_dihal()` builds the dataclass, which validates every field."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, ClassVar

import dagster as dg
import pydantic

from dihal import config as dc
from dihal.run.profiles import resolve_preset
from dihal.run.stages import STAGES


class _RunConfig(dg.Config):
    dihal_class: ClassVar[type]
    tuple_fields: ClassVar[frozenset[str]] = frozenset()

    def to_dihal(self) -> Any:
        values = self.model_dump()
        for name in self.tuple_fields:
            values[name] = tuple(values[name])
        return self.dihal_class(**values)


# The preset of this code location's defaults: the one function every door resolves it with
# (the driver sets its --profile in the environment before it imports this location)
PRESET = resolve_preset()
PROFILE_NAME, PROFILE = PRESET.name, PRESET.stages


def run_config(cls: type, name: str, stage: str, doc: str | None = None,
               **defaults: Any) -> type[_RunConfig]:
    """A Dagster Config class mirroring dataclass `cls`, with optional other defaults, then
    the active profile's overrides for `stage`."""
    defaults = {**defaults, **PROFILE.get(stage, {})}
    hints = typing.get_type_hints(cls)
    fields: dict[str, Any] = {}
    tuples = set()
    for f in dataclasses.fields(cls):
        tp, default = hints[f.name], defaults.get(f.name, f.default)
        if typing.get_origin(tp) is tuple:
            tp, default = list[typing.get_args(tp)[0]], list(default)
            tuples.add(f.name)
        fields[f.name] = (tp, pydantic.Field(default=default))
    model = pydantic.create_model(name, __base__=_RunConfig, __doc__=doc or cls.__doc__,
                                  __module__=__name__, **fields)
    model.dihal_class = cls
    model.tuple_fields = frozenset(tuples)
    return model


def stage_run_config(stage: str, **defaults: Any) -> type[_RunConfig]:
    """The run config of `stage` as dihal.run.stages names it (its dataclass, class name, doc and
    defaults), with `defaults` on top."""
    s = STAGES[stage]
    return run_config(getattr(dc, s.config), s.run_config, stage, s.run_doc,
                      **{**s.run_defaults, **defaults})


# stage -> its Dagster run config, for every stage that has a config (dihal.run.stages)
RUN_CONFIGS = {name: stage_run_config(name) for name, s in STAGES.items() if s.config}
CorpusRunConfig = RUN_CONFIGS["corpus"]
SequencesRunConfig = RUN_CONFIGS["sequences"]
ExtractRunConfig = RUN_CONFIGS["hidden_states"]
_EXTRACT_BY_DTYPE = {dc.ExtractConfig.dtype: ExtractRunConfig}


def extract_run_config(state_dtype: str) -> type[_RunConfig]:
    """The dump's run config with a backbone's default storage dtype (float32 for a backbone
    whose activations overflow float16, e.g. gemma3); one class per dtype."""
    if state_dtype not in _EXTRACT_BY_DTYPE:
        _EXTRACT_BY_DTYPE[state_dtype] = run_config(
            dc.ExtractConfig, f"ExtractRunConfig{state_dtype.capitalize()}", "hidden_states",
            dtype=state_dtype)
    return _EXTRACT_BY_DTYPE[state_dtype]


GeometryRunConfig = RUN_CONFIGS["geometry"]
BridgeProtocolRunConfig = RUN_CONFIGS["bridge_sweep"]
FullBridgeRunConfig = RUN_CONFIGS["bridge"]
EvalRunConfig = RUN_CONFIGS["eval"]
SamplerCurveRunConfig = RUN_CONFIGS["sampler_steps"]
BaselineRunConfig = RUN_CONFIGS["baseline"]
LayerScoreRunConfig = RUN_CONFIGS["layer_score"]
