"""Trained bridges on disk: safetensors weights (denoiser + standardisers + pinned BOS state)
and a JSON of hyper-parameters, written atomically into one directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dihal.atomic import atomic_write_bytes, atomic_write_json
from storage.manifest import CorruptArtifactError

WEIGHTS = "bridge.safetensors"
HPARAMS = "hparams.json"


def save_bridge(directory: Path, denoiser, cond_std, target_std, first_state, hparams: dict) -> Path:
    from safetensors.torch import save

    tensors = {f"denoiser.{k}": v.detach().contiguous().cpu()
               for k, v in denoiser.state_dict().items()}
    tensors.update({
        "cond_std.mean": cond_std.mean, "cond_std.std": cond_std.std,
        "target_std.mean": target_std.mean, "target_std.std": target_std.std,
    })
    if first_state is not None:
        tensors["first_state"] = first_state.detach().float().contiguous().cpu()
    directory = Path(directory)
    atomic_write_bytes(directory / WEIGHTS, save({k: v.contiguous() for k, v in tensors.items()}))
    atomic_write_json(directory / HPARAMS, hparams)
    return directory


def load_bridge(directory: Path, device: str = "cpu") -> dict[str, Any]:
    """{"denoiser", "cond_std", "target_std", "first_state", "hparams"} of a saved bridge."""
    from safetensors.torch import load_file

    from dihal.bridge import CausalDenoiser, DenoiserConfig, Standardizer

    directory = Path(directory)
    try:
        hparams = json.loads((directory / HPARAMS).read_text())
        tensors = load_file(str(directory / WEIGHTS))
    except FileNotFoundError as exc:
        raise FileNotFoundError(
            f"no trained bridge at {directory} ({exc.filename} missing): materialise the bridge "
            "asset first."
        ) from exc
    except Exception as exc:  # safetensors raises its own error type for damaged files
        raise CorruptArtifactError(
            f"the bridge at {directory} cannot be read ({exc}). Delete the directory and "
            "materialise the asset again."
        ) from exc
    model = CausalDenoiser(DenoiserConfig.from_dict(hparams["denoiser_config"]))
    model.load_state_dict({k[len("denoiser."):]: v for k, v in tensors.items()
                           if k.startswith("denoiser.")})
    return {
        "denoiser": model.to(device).eval(),
        "cond_std": Standardizer(tensors["cond_std.mean"], tensors["cond_std.std"]),
        "target_std": Standardizer(tensors["target_std.mean"], tensors["target_std.std"]),
        "first_state": tensors.get("first_state"),
        "hparams": hparams,
    }
