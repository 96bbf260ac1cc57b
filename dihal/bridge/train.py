"""Training a bridge denoiser under the fixed protocol of METHOD.md section 2.

Everything that could differ between two candidate layers is pinned by `TrainConfig`: the
order of the sequences (a permutation from the seed), the noise of every step (a generator
seeded from (seed, step, rank)), the optimiser and its schedule (a pure function of the step),
and the token budget (`epochs` passes over the training set, one by default). Because no
random state lives outside the step number, a run resumed from a checkpoint ends with exactly
the weights of an uninterrupted run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import torch
from torch import Tensor

from dihal.bridge.checkpoint import latest_checkpoint, load_into, save_checkpoint
from dihal.bridge.data import BridgeData
from dihal.bridge.denoiser import CausalDenoiser
from dihal.bridge.evaluate import DEFAULT_T_GRID, validation_loss
from dihal.bridge.loss import bridge_loss_terms
from dihal.bridge.process import BrownianBridge
from dihal.seeds import derive_seed

if TYPE_CHECKING:
    from accelerate import Accelerator

# Fields that only change how often things are written, not what is computed:
# they may differ between the run that wrote a checkpoint and the run resuming it.
_RESUMABLE_FIELDS = ("checkpoint_every", "keep_checkpoints")


class BridgeTrainingError(RuntimeError):
    """Training stopped (non-finite loss or gradient); `step` is the update that failed."""

    def __init__(self, message: str, step: int) -> None:
        super().__init__(message)
        self.step = step


@dataclass(frozen=True)
class TrainConfig:
    """The training protocol. `step` counts optimiser updates, from 1."""

    lr: float = 3e-4
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.95)
    adam_eps: float = 1e-8
    warmup_frac: float = 0.05
    min_lr_frac: float = 0.1
    batch_size: int = 32
    epochs: float = 1.0
    grad_clip: float = 1.0
    seed: int = 0
    mixed_precision: Literal["no", "bf16"] = "no"
    checkpoint_every: int = 500
    keep_checkpoints: int = 1
    log_every: int = 10
    eval_every: int = 0
    val_t_grid: tuple[float, ...] = DEFAULT_T_GRID
    val_seed: int = 0
    val_batch_size: int = 32

    def __post_init__(self) -> None:
        object.__setattr__(self, "betas", tuple(self.betas))
        object.__setattr__(self, "val_t_grid", tuple(self.val_t_grid))
        checks = {
            "lr": self.lr > 0,
            "weight_decay": self.weight_decay >= 0,
            "betas": len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
            "adam_eps": self.adam_eps > 0,
            "warmup_frac": 0 <= self.warmup_frac < 1,
            "min_lr_frac": 0 <= self.min_lr_frac <= 1,
            "batch_size": self.batch_size >= 1,
            "epochs": self.epochs > 0,
            "grad_clip": self.grad_clip >= 0,
            "mixed_precision": self.mixed_precision in ("no", "bf16"),
            "checkpoint_every": self.checkpoint_every >= 1,
            "keep_checkpoints": self.keep_checkpoints >= 1,
            "log_every": self.log_every >= 1,
            "eval_every": self.eval_every >= 0,
            "val_t_grid": len(self.val_t_grid) > 0 and all(0 < t < 1 for t in self.val_t_grid),
            "val_batch_size": self.val_batch_size >= 1,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(
                f"invalid TrainConfig fields: {', '.join(f'{b}={getattr(self, b)!r}' for b in bad)}"
            )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        return cls(**d)


@dataclass(frozen=True)
class TrainResult:
    step: int
    total_steps: int
    completed: bool
    train_loss: float | None  # mean training loss of the last logged window
    val_loss: float | None  # validation_loss at the end, if completed
    curve: list[dict] = field(repr=False)  # {"step", "loss", "lr", "grad_norm"} every log_every
    val_curve: list[dict] = field(repr=False)  # {"step", "val_loss"} every eval_every
    checkpoint: Path | None
    resumed_from: int  # step of the checkpoint this call started from (0: fresh)
    wall_s: float


def sample_budget(n_seq: int, cfg: TrainConfig) -> int:
    """Number of sequences the run consumes: round(epochs * n_seq), at least one."""
    return max(1, round(cfg.epochs * n_seq))


def total_steps(n_seq: int, cfg: TrainConfig) -> int:
    return math.ceil(sample_budget(n_seq, cfg) / cfg.batch_size)


def sample_order(n_seq: int, cfg: TrainConfig) -> Tensor:
    """Sequence indices in training order: a fresh seeded permutation per epoch, truncated."""
    budget = sample_budget(n_seq, cfg)
    perms = []
    for epoch in range(math.ceil(budget / n_seq)):
        gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "order", epoch))
        perms.append(torch.randperm(n_seq, generator=gen))
    return torch.cat(perms)[:budget]


def lr_at(step: int, n_steps: int, cfg: TrainConfig) -> float:
    """Learning rate of update `step` (0-based): linear warm-up, then cosine to min_lr_frac * lr."""
    warmup = math.ceil(cfg.warmup_frac * n_steps)
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, n_steps - warmup)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return cfg.lr * (cfg.min_lr_frac + (1.0 - cfg.min_lr_frac) * cosine)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on biases), as in nanoGPT."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.adam_eps)


def _check_resumable(
    saved: dict, cfg: TrainConfig, denoiser: CausalDenoiser, process: BrownianBridge
) -> None:
    now = {k: v for k, v in cfg.to_dict().items() if k not in _RESUMABLE_FIELDS}
    then = {
        k: v
        for k, v in TrainConfig.from_dict(saved["train_config"]).to_dict().items()
        if k not in _RESUMABLE_FIELDS
    }
    diffs = [f"{k}: {then[k]!r} -> {now[k]!r}" for k in now if now[k] != then.get(k)]
    if saved["denoiser_config"] != denoiser.cfg.to_dict():
        diffs.append("denoiser_config")
    if saved["process"] != asdict(process):
        diffs.append("process")
    if diffs:
        raise ValueError(f"checkpoint was written with a different protocol: {'; '.join(diffs)}")


def train_bridge(
    denoiser: CausalDenoiser,
    train: BridgeData,
    val: BridgeData,
    process: BrownianBridge,
    cfg: TrainConfig,
    ckpt_dir: Path,
    progress: Callable[[dict], None] | None = None,
    *,
    stop_after: int | None = None,
    accelerator: Accelerator | None = None,
) -> TrainResult:
    """Train `denoiser` in place; resume from the newest checkpoint in `ckpt_dir` if there is one.

    progress: called on the main process every `log_every` steps (and after each evaluation)
        with {"step", "total_steps", "loss", "lr", "grad_norm", "elapsed_s"} (+ "val_loss").
        An exception it raises interrupts the run; the newest checkpoint stays valid.
    stop_after: stop (with a checkpoint) once this many updates are done; for tests and for
        splitting a run across jobs.
    accelerator: an `Accelerator(mixed_precision="no")` to use (several GPUs: the launcher's);
        bf16 is applied by this loop as autocast from cfg.mixed_precision, so that evaluation
        always runs in float32.
    Raises BridgeTrainingError on a non-finite loss or gradient norm, before the update.
    """
    from accelerate import Accelerator

    t_start = time.perf_counter()
    ckpt_dir = Path(ckpt_dir)
    if train.dim != denoiser.cfg.d_in or val.dim != denoiser.cfg.d_in:
        raise ValueError(
            f"data dimension {train.dim}/{val.dim} != denoiser d_in={denoiser.cfg.d_in}"
        )
    acc = accelerator if accelerator is not None else Accelerator(mixed_precision="no")
    if acc.mixed_precision != "no":
        raise ValueError(
            "pass an Accelerator with mixed_precision='no'; set TrainConfig.mixed_precision"
        )
    device = acc.device
    rank, world = acc.process_index, acc.num_processes
    autocast = torch.autocast(
        device_type=device.type, dtype=torch.bfloat16, enabled=cfg.mixed_precision == "bf16"
    )

    n_steps = total_steps(len(train), cfg)
    order = sample_order(len(train), cfg)
    denoiser.to(device)
    optimizer = make_optimizer(denoiser, cfg)

    step, curve, val_curve, window = 0, [], [], []
    last_ckpt = latest_checkpoint(ckpt_dir)
    if last_ckpt is not None:
        saved = load_into(last_ckpt, denoiser, optimizer)
        _check_resumable(saved, cfg, denoiser, process)
        step, curve, val_curve, window = (
            saved["step"],
            saved["curve"],
            saved["val_curve"],
            saved["window"],
        )
    resumed_from = step

    def save() -> Path | None:
        path = None
        if acc.is_main_process:
            state = {
                "total_steps": n_steps,
                "done": step >= n_steps,
                "train_config": cfg.to_dict(),
                "denoiser_config": denoiser.cfg.to_dict(),
                "process": asdict(process),
                "curve": curve,
                "val_curve": val_curve,
                "window": window,
            }
            path = save_checkpoint(
                ckpt_dir, step, denoiser, optimizer, state, keep=cfg.keep_checkpoints
            )
        acc.wait_for_everyone()
        return path

    def report(entry: dict) -> None:
        if progress is not None and acc.is_main_process:
            progress({**entry, "total_steps": n_steps, "elapsed_s": time.perf_counter() - t_start})

    model, opt = acc.prepare(denoiser, optimizer)
    end = n_steps if stop_after is None else min(n_steps, stop_after)
    while step < end:
        batch_idx = order[step * cfg.batch_size : (step + 1) * cfg.batch_size]
        cond, target, mask = train.batch(batch_idx[rank::world], device)
        gen = torch.Generator(device=device).manual_seed(derive_seed(cfg.seed, "noise", step, rank))
        t = process.sample_t(cond.shape[0], gen)
        eps = torch.randn(target.shape, generator=gen, device=device)
        lr = lr_at(step, n_steps, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr

        with autocast:
            sq, count = bridge_loss_terms(model, process, cond, target, t, eps, mask)
        # Each process holds part of the batch: normalise by the global token count so that
        # the gradient (averaged over processes) is the gradient of the global-batch mean.
        global_count = acc.reduce(count.detach(), "sum").clamp_min(1.0)
        acc.backward(sq / global_count * world)
        loss = float(acc.reduce(sq.detach(), "sum") / global_count)
        if not math.isfinite(loss):
            raise BridgeTrainingError(
                f"non-finite training loss ({loss}) at step {step + 1}", step + 1
            )
        grad_norm = float(acc.clip_grad_norm_(model.parameters(), cfg.grad_clip or math.inf))
        if not math.isfinite(grad_norm):
            raise BridgeTrainingError(
                f"non-finite gradient norm ({grad_norm}) at step {step + 1}", step + 1
            )
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1

        window.append(loss)
        if step % cfg.log_every == 0 or step == n_steps:
            entry = {
                "step": step,
                "loss": sum(window) / len(window),
                "lr": lr,
                "grad_norm": grad_norm,
            }
            curve.append(entry)
            window = []
            report(entry)
        if cfg.eval_every and step % cfg.eval_every == 0 and step < n_steps:
            v = validation_loss(
                denoiser, val, process, cfg.val_t_grid, cfg.val_seed, cfg.val_batch_size
            )
            val_curve.append({"step": step, "val_loss": v})
            report({"step": step, "val_loss": v})
        if step % cfg.checkpoint_every == 0 and step < end:
            last_ckpt = save() or last_ckpt

    if accelerator is None:
        acc.free_memory()
    completed = step >= n_steps
    val_loss = None
    if completed:
        val_loss = validation_loss(
            denoiser, val, process, cfg.val_t_grid, cfg.val_seed, cfg.val_batch_size
        )
        if not val_curve or val_curve[-1]["step"] != step:
            val_curve.append({"step": step, "val_loss": val_loss})
            report({"step": step, "val_loss": val_loss})
    if step > resumed_from:  # the last checkpoint, with the final validation loss when completed
        last_ckpt = save() or last_ckpt
    return TrainResult(
        step=step,
        total_steps=n_steps,
        completed=completed,
        train_loss=curve[-1]["loss"] if curve else None,
        val_loss=val_loss,
        curve=curve,
        val_curve=val_curve,
        checkpoint=latest_checkpoint(ckpt_dir) if acc.is_main_process else last_ckpt,
        resumed_from=resumed_from,
        wall_s=time.perf_counter() - t_start,
    )
