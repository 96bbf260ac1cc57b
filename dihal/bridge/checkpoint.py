"""Training checkpoints of a bridge: one directory per saved step, written atomically.

    ckpt_dir/step-00000120/model.safetensors   denoiser weights
                          /optimizer.pt        optimizer state dict (torch.save)
                          /state.json          step, curves, configs

A checkpoint directory is filled under a temporary name and renamed into place, so a
`step-*` directory is always complete; the newest one is the one to resume from.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from dihal.bridge.denoiser import CausalDenoiser, DenoiserConfig

FORMAT = "dihal-bridge-checkpoint/1"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "state.json"
_PREFIX = "step-"


def checkpoint_name(step: int) -> str:
    return f"{_PREFIX}{step:08d}"


def list_checkpoints(ckpt_dir: Path) -> list[Path]:
    """Complete checkpoints in `ckpt_dir`, oldest first."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return []
    found = [
        p
        for p in ckpt_dir.iterdir()
        if p.is_dir() and p.name.startswith(_PREFIX) and p.name[len(_PREFIX) :].isdigit()
    ]
    return sorted(found, key=lambda p: int(p.name[len(_PREFIX) :]))


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    found = list_checkpoints(ckpt_dir)
    return found[-1] if found else None


def save_checkpoint(
    ckpt_dir: Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    state: dict,
    keep: int = 1,
) -> Path:
    """Write checkpoint `step` atomically, then delete all but the newest `keep`."""
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    final = ckpt_dir / checkpoint_name(step)
    for stale in ckpt_dir.glob(f".tmp-{_PREFIX}*"):  # left by a run killed while saving
        shutil.rmtree(stale, ignore_errors=True)
    tmp = ckpt_dir / f".tmp-{checkpoint_name(step)}-{os.getpid()}"
    tmp.mkdir()
    weights = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(weights, str(tmp / MODEL_FILE), metadata={"format": FORMAT, "step": str(step)})
    if optimizer is not None:
        torch.save(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
    (tmp / STATE_FILE).write_text(json.dumps({"format": FORMAT, "step": step, **state}, indent=1))
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    if final.exists():  # a stale copy of this step (never the newest complete one we resume from)
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in list_checkpoints(ckpt_dir)[: -keep if keep > 0 else None]:
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def read_state(path: Path) -> dict:
    state = json.loads((Path(path) / STATE_FILE).read_text())
    if state.get("format") != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT} checkpoint")
    return state


def load_into(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict:
    """Load weights (and optimizer state) from checkpoint `path` in place; return its state."""
    path = Path(path)
    state = read_state(path)
    model.load_state_dict(load_file(str(path / MODEL_FILE)))
    if optimizer is not None:
        optimizer.load_state_dict(torch.load(path / OPTIMIZER_FILE, weights_only=True))
    return state


def load_denoiser(path: Path, device: torch.device | str = "cpu") -> CausalDenoiser:
    """A denoiser rebuilt from the config stored in checkpoint `path`, with its weights."""
    path = Path(path)
    cfg = DenoiserConfig.from_dict(read_state(path)["denoiser_config"])
    model = CausalDenoiser(cfg)
    model.load_state_dict(load_file(str(path / MODEL_FILE)))
    return model.to(device)
