"""Training checkpoints (of the bridge and of the baselines): one directory per saved step,
written atomically, every file under a digest.

    ckpt_dir/step-00000120/model.safetensors   model weights
                          /optimizer.pt        optimizer state dict (torch.save)
                          /state.json          step, curves, configs
                          /digests.json        sha256 and size of each file above

A checkpoint directory is filled under a temporary name (.tmp-step-*-<host>-<pid>), its digests
written last, and swapped into place, so a `step-*` directory is always complete; the newest one
is the one to resume from. A writer removes only temporaries of its own host whose process is
gone.

Nothing in a checkpoint is read before it is checked against its digests: a changed byte, a
truncated or missing file, or a checkpoint without digests (one written before they existed)
raises CheckpointDamagedError. `load_latest_good` then falls back to the previous checkpoint
(the protocols keep two) or, with none left, to a fresh start, and tells its `warn` callback
why. Tensors are read onto the CPU whatever device wrote them (`map_location`), and moved to
the model's device by `load_state_dict`: a GPU run's checkpoint resumes on a CPU host.
"""

from __future__ import annotations

import copy
import errno
import json
import math
import os
import shutil
import socket
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from dihal.atomic import file_sha256, link_message, replace_dir
from dihal.errors import CheckpointDamagedError, DiskFullError, UnsafePathError

FORMAT = "dihal-checkpoint/2"  # /1 (dihal-bridge-checkpoint/1) had no digests
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "state.json"
DIGESTS_FILE = "digests.json"
_PREFIX = "step-"

Warn = Callable[[str], None]


def checkpoint_name(step: int) -> str:
    return f"{_PREFIX}{step:08d}"


def _step_of(path: Path) -> int:
    return int(path.name[len(_PREFIX) :])


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
    return sorted(found, key=_step_of)


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


def _write_files(tmp: Path, step: int, model: nn.Module, optimizer, state: dict) -> None:
    """The checkpoint's files in `tmp`, its digests last, each fsynced."""
    weights = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(weights, str(tmp / MODEL_FILE), metadata={"format": FORMAT, "step": str(step)})
    if optimizer is not None:
        torch.save(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
    (tmp / STATE_FILE).write_text(json.dumps({"format": FORMAT, "step": step, **state}, indent=1))
    files = {f.name: {"sha256": file_sha256(f), "bytes": f.stat().st_size}
             for f in sorted(tmp.iterdir())}
    (tmp / DIGESTS_FILE).write_text(json.dumps({"format": FORMAT, "files": files}, indent=1))
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())


def save_checkpoint(
    ckpt_dir: Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    state: dict,
    keep: int = 1,
) -> Path:
    """Write checkpoint `step` atomically, then delete all but the newest `keep` up to `step`,
    and any beyond it (left by a run that fell back from them)."""
    ckpt_dir = Path(ckpt_dir)
    if ckpt_dir.is_symlink():  # old checkpoints are deleted there: never through a link
        raise UnsafePathError(link_message(ckpt_dir, "checkpoint folder"))
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    final = ckpt_dir / checkpoint_name(step)
    for stale in _stale_temporaries(ckpt_dir):  # left by a run killed while saving
        shutil.rmtree(stale, ignore_errors=True)
    tmp = ckpt_dir / f".tmp-{checkpoint_name(step)}-{_owner()}"
    tmp.mkdir()
    try:
        _write_files(tmp, step, model, optimizer, state)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)  # no half-written checkpoint left behind
        if _out_of_space(exc):
            raise _disk_full(ckpt_dir, model, optimizer, exc) from exc
        raise
    replace_dir(tmp, final)  # a stale copy of this step, if any, is swapped out, never lost first
    found = list_checkpoints(ckpt_dir)
    up_to = [p for p in found if _step_of(p) <= step]
    for old in [p for p in found if _step_of(p) > step] + up_to[: -keep if keep > 0 else None]:
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


# what a write that ran out of space raises: OSError (ENOSPC, EDQUOT), torch.save's stream
# writer (RuntimeError "[enforce fail at inline_container.cc:...] ... file write failed"),
# safetensors (its IoError, StorageFull)
_FULL_TEXTS = ("no space left", "quota exceeded", "storagefull", "file write failed",
               "enforce fail at inline_container")


def _out_of_space(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return isinstance(exc, Exception) and any(t in str(exc).lower() for t in _FULL_TEXTS)


def _disk_full(ckpt_dir: Path, model: nn.Module, optimizer, exc: BaseException) -> DiskFullError:
    """The error for a checkpoint that did not fit: the disk, the space it needs, the fix."""
    tensors = list(model.state_dict().values())
    if optimizer is not None:
        tensors += [v for st in optimizer.state_dict()["state"].values() for v in st.values()
                    if torch.is_tensor(v)]
    need = sum(t.numel() * t.element_size() for t in tensors)
    free = shutil.disk_usage(ckpt_dir).free
    short = max(need - free, 2**20)  # at least 1 MB: the write failed whatever the count says
    first = str(exc).splitlines()[0] if str(exc) else ""
    return DiskFullError(
        f"the disk holding {ckpt_dir} is full ({_mb(free)} free, a checkpoint needs about "
        f"{_mb(need)}): free {math.ceil(short / 2**20)} MB or move the artifact "
        "root (DIHAL_ARTIFACTS) to a larger disk, then run again: training resumes from its "
        f"last checkpoint. ({type(exc).__name__}: {first})")


def _mb(n: int) -> str:
    return f"{n / 2**20:.0f} MB" if n >= 10 * 2**20 else f"{n / 2**20:.2f} MB"


def verify(path: Path, files: tuple[str, ...] | None = None) -> None:
    """Raise CheckpointDamagedError unless checkpoint `path` has its digests and each of `files`
    (None: every file they list) matches its size and sha256."""
    path = Path(path)
    try:
        digests = json.loads((path / DIGESTS_FILE).read_text())
    except FileNotFoundError:
        raise CheckpointDamagedError(
            f"{path} has no {DIGESTS_FILE} (written before checkpoints carried digests): it "
            "cannot be verified") from None
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError included
        raise CheckpointDamagedError(f"{path / DIGESTS_FILE} is unreadable ({exc})") from None
    listed = digests.get("files") if isinstance(digests, dict) else None
    if digests.get("format") != FORMAT or not isinstance(listed, dict) or STATE_FILE not in listed:
        raise CheckpointDamagedError(f"{path / DIGESTS_FILE} is not a {FORMAT} digest list")
    for name in listed if files is None else files:
        f, want = path / name, listed.get(name)
        if want is None:
            raise CheckpointDamagedError(f"{f} is not listed in its digests")
        if not f.is_file() or f.stat().st_size != want["bytes"]:
            size = f.stat().st_size if f.is_file() else "no file"
            raise CheckpointDamagedError(f"{f}: {size} bytes, its digest says {want['bytes']}")
        if file_sha256(f) != want["sha256"]:
            raise CheckpointDamagedError(f"{f} does not match its sha256 (changed since written)")


def _state(path: Path) -> dict:
    state = json.loads((path / STATE_FILE).read_text())
    if state.get("format") != FORMAT:
        raise CheckpointDamagedError(f"{path} is not a {FORMAT} checkpoint")
    return state


def _load(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> dict:
    """Load verified checkpoint `path`: tensors read onto the CPU land on the model's device."""
    state = _state(path)
    model.load_state_dict(load_file(str(path / MODEL_FILE), device="cpu"))
    if optimizer is not None:
        optimizer.load_state_dict(
            torch.load(path / OPTIMIZER_FILE, map_location="cpu", weights_only=True))
    return state


def read_state(path: Path) -> dict:
    """The state of checkpoint `path` (its state.json verified)."""
    verify(Path(path), (STATE_FILE,))
    return _state(Path(path))


def load_into(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict:
    """Verify checkpoint `path`, then load its weights (and optimizer state) in place; return
    its state."""
    verify(Path(path))
    return _load(Path(path), model, optimizer)


def runtime_warning(message: str) -> None:
    """The default `warn`: a RuntimeWarning (on stderr)."""
    warnings.warn(message, RuntimeWarning, stacklevel=2)


def load_latest_good(ckpt_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None,
                     check: Callable[[dict], None] | None = None,
                     warn: Warn | None = None) -> tuple[Path | None, dict | None]:
    """Load the newest checkpoint that verifies and reads back whole, falling back to older
    ones; `warn` (default: a RuntimeWarning) gets the reason for each one passed over, and a
    last word when none is left. `check(state)` vets each before loading (its errors are not
    damage and propagate). (None, None) where no checkpoint is usable: the model and optimizer
    are then as they were."""
    warn = warn or runtime_warning
    before = copy.deepcopy(model.state_dict())
    opt_before = copy.deepcopy(optimizer.state_dict()) if optimizer is not None else None
    found = list_checkpoints(ckpt_dir)
    for path in reversed(found):
        try:
            verify(path)
            state = _state(path)
        except CheckpointDamagedError as exc:
            warn(f"checkpoint {path} is damaged ({exc}); falling back to the previous checkpoint")
            continue
        if check is not None:
            check(state)
        try:
            return path, _load(path, model, optimizer)
        except Exception as exc:  # safetensors, torch.load and load_state_dict raise many types
            warn(f"checkpoint {path} is damaged ({type(exc).__name__}: {exc}); falling back to "
                 "the previous checkpoint")
            model.load_state_dict(before)
            if optimizer is not None:
                optimizer.load_state_dict(opt_before)
    if found:
        warn(f"no usable checkpoint in {ckpt_dir}: training starts again from step 0")
    return None, None
