"""Training checkpoints (of the bridge and of the baselines): one directory per saved step,
written atomically.

    ckpt_dir/step-00000120/model.safetensors   model weights
                          /optimizer.pt        optimizer state dict (torch.save)
                          /state.json          step, curves, configs

A checkpoint directory is filled under a temporary name (.tmp-step-*-<host>-<pid>) and swapped
into place, so a `step-*` directory is always complete; the newest one is the one to resume
from. A writer removes only temporaries of its own host whose process is gone.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from dihal.atomic import replace_dir

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


def _owner() -> str:
    """This process, as named in its temporaries: host and pid."""
    return f"{socket.gethostname()}-{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _stale_temporaries(ckpt_dir: Path) -> list[Path]:
    """Temporaries in `ckpt_dir` that no running writer owns: this process's own, and those of
    processes of this host that have ended. Other hosts' temporaries are left alone."""
    host, me = socket.gethostname(), os.getpid()
    stale = []
    for p in ckpt_dir.glob(f".tmp-{_PREFIX}*"):
        # .tmp-step-00000012-<host>-<pid> (a host name may contain '-'); before hosts were
        # named, .tmp-step-00000012-<pid>: taken as this host's
        rest = p.name[len(f".tmp-{checkpoint_name(0)}-") :]
        owner_host, _, pid = rest.rpartition("-")
        mine = owner_host in (host, "")
        if mine and pid.isdigit() and (int(pid) == me or not _alive(int(pid))):
            stale.append(p)
    return stale


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
    for stale in _stale_temporaries(ckpt_dir):  # left by a run killed while saving
        shutil.rmtree(stale, ignore_errors=True)
    tmp = ckpt_dir / f".tmp-{checkpoint_name(step)}-{_owner()}"
    tmp.mkdir()
    weights = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(weights, str(tmp / MODEL_FILE), metadata={"format": FORMAT, "step": str(step)})
    if optimizer is not None:
        torch.save(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
    (tmp / STATE_FILE).write_text(json.dumps({"format": FORMAT, "step": step, **state}, indent=1))
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    replace_dir(tmp, final)  # a stale copy of this step, if any, is swapped out, never lost first
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


def load_latest_good(ckpt_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None,
                     check=None) -> tuple[Path | None, dict | None]:
    """Load the newest checkpoint that reads back whole, falling back to older ones (with a
    warning naming each damaged file); `check(state)` vets each before loading (its errors
    are not damage and propagate). (None, None) where no checkpoint is usable: the model and
    optimizer are then as they were."""
    import copy
    import warnings

    before = copy.deepcopy(model.state_dict())
    opt_before = copy.deepcopy(optimizer.state_dict()) if optimizer is not None else None
    for path in reversed(list_checkpoints(ckpt_dir)):
        try:
            state = read_state(path)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            warnings.warn(f"checkpoint {path / STATE_FILE} is damaged ({exc}); "
                          "falling back to the previous checkpoint", RuntimeWarning, stacklevel=2)
            continue
        if check is not None:
            check(state)
        try:
            return path, load_into(path, model, optimizer)
        except Exception as exc:  # safetensors, torch.load and load_state_dict raise many types
            warnings.warn(f"checkpoint {path} is damaged ({type(exc).__name__}: {exc}); falling "
                          "back to the previous checkpoint", RuntimeWarning, stacklevel=2)
            model.load_state_dict(before)
            if optimizer is not None:
                optimizer.load_state_dict(opt_before)
    return None, None
