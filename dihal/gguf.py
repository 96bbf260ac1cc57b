"""GGUF files from PyPI packages, dequantised once into a safetensors folder."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch

from dihal.atomic import replace_dir


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
