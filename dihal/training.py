"""One training loop for every model that trains: the bridge and the baselines (docs/method.md §2, §5).

A model supplies a module and its loss; the loop owns everything a fair comparison must hold
fixed, pinned by `TrainConfig`: the order of the sequences (a permutation from the seed), the
noise of every step (a generator seeded from (seed, step, rank)), the optimiser and its schedule
(a pure function of the step), the budget (`epochs` passes over the training set -> sequences
-> steps), bf16 autocast, and the checks (non-finite loss or gradient; resuming only under the
protocol that wrote the checkpoint). Because no random state lives outside the step number, a
run resumed from a checkpoint ends with exactly the weights of an uninterrupted run. The
checkpoints are `dihal.checkpoint`'s: verified against their digests before a resume, a damaged
one passed over (with its reason to the caller's `warn`) for the previous one or a fresh start.

No step waits for the device: the loss and gradient norm of each step stay on it until the host
looks at them, which it does for every step on the CPU (where looking costs nothing), and on a
GPU every `log_every` steps, before each validation and checkpoint and at the end, all the
steps since the last look at once. A non-finite step is then named by its own step number, and
no checkpoint is ever written after it; on a GPU the updates after it (at most log_every - 1,
made with the non-finite values) are in the weights in memory, which a resume never reads.

`Trainer` is the loop, one method per concern (resume, train_step, log, record_validation,
checkpoint, finish); `train_model` is its one-call form.

The loss is `loss_terms(model, indices, generator, device) -> (total, count)`: the summed loss
over this process's share of the batch (`indices` into the training set) and the number of
terms it sums; the loop divides by the count pooled over processes. A loss that is already a
mean returns `(mean, 1.0)`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from dihal.checkpoint import latest_checkpoint, load_latest_good, runtime_warning, save_checkpoint
from dihal.config import MAX_TRAIN_STEPS, TRAIN_STEPS_WHY
from dihal.errors import CheckpointMismatchError, TrainingBudgetError, TrainingError
from dihal.net_configs import TrainConfig
from dihal.rows import TrainingPoint, ValidationPoint
from dihal.seeds import derive_seed

if TYPE_CHECKING:
    from accelerate import Accelerator

LossTerms = Callable[[nn.Module, Tensor, torch.Generator, torch.device], tuple[Tensor, Tensor | float]]

# Fields that only change how often things are written, not what is computed:
# they may differ between the run that wrote a checkpoint and the run resuming it.
_RESUMABLE_FIELDS = ("checkpoint_every", "keep_checkpoints")
# Keys of a checkpoint's state that the loop writes itself; a `protocol` may not use them.
_LOOP_KEYS = ("format", "step", "total_steps", "done", "train_config", "curve", "val_curve",
              "window")


@dataclass(frozen=True)
class TrainResult:
    step: int
    total_steps: int
    completed: bool
    train_loss: float | None  # mean training loss of the last logged window
    val_loss: float | None  # the validation hook at the end, if completed (None without one)
    curve: list[TrainingPoint] = field(repr=False)  # every log_every steps, and the last
    val_curve: list[ValidationPoint] = field(repr=False)  # every eval_every steps, and the last
    checkpoint: Path | None
    resumed_from: int  # step of the checkpoint this call started from (0: fresh)
    wall_s: float


# ---------------------------------------------------------------- devices


def _current_index(kind: str) -> int:
    """The index torch uses for a device of type `kind` given without one ("cuda": the current
    CUDA device)."""
    current = getattr(getattr(torch, kind, None), "current_device", None)
    return int(current()) if current is not None else 0


def normalise_device(device, current_index: Callable[[str], int] = _current_index):
    """`device` (a string or torch.device) as a torch.device with its index explicit: "cuda" is
    "cuda:<current device>", and "cpu" has no index ("cpu:0" is "cpu"). `current_index(type)`
    gives the index of a device named without one (a test passes its own)."""
    d = torch.device(device)
    if d.type == "cpu":
        return torch.device("cpu")
    return d if d.index is not None else torch.device(d.type, current_index(d.type))


def same_device(a, b, current_index: Callable[[str], int] = _current_index) -> bool:
    """Whether `a` and `b` name one device (torch.device("cuda") != torch.device("cuda:0"),
    yet both are the current GPU)."""
    return normalise_device(a, current_index) == normalise_device(b, current_index)


def sample_budget(n_seq: int, cfg: TrainConfig) -> int:
    """Number of sequences the run consumes: round(epochs * n_seq), at least one."""
    return max(1, round(cfg.epochs * n_seq))


def total_steps(n_seq: int, cfg: TrainConfig) -> int:
    return math.ceil(sample_budget(n_seq, cfg) / cfg.batch_size)


def check_budget(n_seq: int, cfg: TrainConfig) -> int:
    """total_steps, or TrainingBudgetError where it exceeds MAX_TRAIN_STEPS (before the
    sample order of the whole budget is built)."""
    steps = total_steps(n_seq, cfg)
    if steps > MAX_TRAIN_STEPS:
        raise TrainingBudgetError(
            f"a training of {steps:,} optimiser steps (epochs {cfg.epochs:g} x {n_seq:,} "
            f"sequences / batch_size {cfg.batch_size}) is over the limit of "
            f"{MAX_TRAIN_STEPS:,} ({TRAIN_STEPS_WHY}): lower epochs.")
    return steps


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


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on biases), as in nanoGPT."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.adam_eps)


def check_resumable(saved: dict, cfg: TrainConfig, protocol: dict, n_steps: int) -> None:
    """Raise CheckpointMismatchError unless checkpoint state `saved` was written under `cfg`,
    `protocol` and the same number of steps (the same training-set size)."""
    where = f"the checkpoint at step {saved.get('step')}"
    if "train_config" not in saved:
        raise CheckpointMismatchError(
            f"{where} does not record its training protocol (an older format); delete its "
            "checkpoint directory to train from scratch"
        )
    now = {k: v for k, v in cfg.to_dict().items() if k not in _RESUMABLE_FIELDS}
    then = {
        k: v
        for k, v in TrainConfig.from_dict(saved["train_config"]).to_dict().items()
        if k not in _RESUMABLE_FIELDS
    }
    diffs = [f"{k}: {then[k]!r} -> {now[k]!r}" for k in now if now[k] != then.get(k)]
    diffs += [key for key, value in protocol.items() if saved.get(key) != value]
    if saved.get("total_steps") != n_steps:
        diffs.append(f"total_steps (training-set size): {saved.get('total_steps')} -> {n_steps}")
    if diffs:
        raise CheckpointMismatchError(
            f"{where} was written with a different protocol: {'; '.join(diffs)}. Resume with "
            "the protocol that wrote it, or delete the checkpoint directory to start again"
        )


def _accelerator(accelerator: Accelerator | None, device: str | torch.device | None) -> Accelerator:
    """The caller's accelerator, or a single-process one on `device` (None: accelerate's
    default device); either must leave mixed precision to the loop."""
    if accelerator is not None and device is not None:
        raise ValueError("pass an accelerator or a device, not both")
    if accelerator is None:
        from accelerate import Accelerator

        if device is None:
            return Accelerator(mixed_precision="no")
        want = torch.device(device)
        accelerator = Accelerator(mixed_precision="no", cpu=want.type == "cpu")
        if not same_device(accelerator.device, want):
            raise ValueError(f"asked to train on {want} but accelerate chose "
                             f"{accelerator.device}; pass an Accelerator instead of a device")
    if accelerator.mixed_precision != "no":
        raise ValueError(
            "pass an Accelerator with mixed_precision='no'; set TrainConfig.mixed_precision")
    return accelerator


def _checked_protocol(protocol: dict | None) -> dict:
    """`protocol` as a checkpoint reads it back (JSON), its keys clear of the loop's own."""
    protocol = json.loads(json.dumps(protocol or {}))
    clash = sorted(set(protocol) & set(_LOOP_KEYS))
    if clash:
        raise ValueError(f"protocol keys {clash} are reserved for the training loop's own state")
    return protocol


class Trainer:
    """One training run of `model` under `cfg` (see `train_model` for the arguments): `run`
    resumes from the newest good checkpoint, then takes steps until the budget (or
    `stop_after`) is spent, logging, validating and checkpointing on the way."""

    def __init__(self, model: nn.Module, loss_terms: LossTerms, n_train: int, cfg: TrainConfig,
                 ckpt_dir: Path, *, progress: Callable[[dict], None] | None = None,
                 protocol: dict | None = None, validate: Callable[[], float] | None = None,
                 warn: Callable[[str], None] | None = None,
                 accelerator: Accelerator | None = None,
                 device: str | torch.device | None = None,
                 check_every: int | None = None) -> None:
        self.t_start = time.perf_counter()
        self.model, self.loss_terms, self.cfg, self.ckpt_dir = model, loss_terms, cfg, Path(ckpt_dir)
        self.progress, self.validate, self.warn = progress, validate, warn
        self.protocol = _checked_protocol(protocol)
        self.acc = _accelerator(accelerator, device)
        self.own_accelerator = accelerator is None
        self.device = self.acc.device
        self.autocast = torch.autocast(device_type=self.device.type, dtype=torch.bfloat16,
                                       enabled=cfg.mixed_precision == "bf16")
        self.n_steps = check_budget(n_train, cfg)
        self.order = sample_order(n_train, cfg)
        if self.device.type == "cuda":  # a batch's indices reach the device without a wait
            self.order = self.order.pin_memory()
        # the steps whose loss and gradient norm the host has not yet looked at, and how many
        # may wait (see the module docstring)
        self.unchecked: list[tuple[int, Tensor, Tensor]] = []
        self.check_every = check_every or (1 if self.device.type == "cpu" else cfg.log_every)
        model.to(self.device).train()
        self.optimizer = make_optimizer(model, cfg)
        self.step, self.window = 0, []
        self.curve: list[TrainingPoint] = []
        self.val_curve: list[ValidationPoint] = []
        self.last_ckpt: Path | None = None
        self.resumed_from = 0

    def run(self, stop_after: int | None = None) -> TrainResult:
        self.resume()
        prepared, opt = self.acc.prepare(self.model, self.optimizer)
        end = self.n_steps if stop_after is None else min(self.n_steps, stop_after)
        while self.step < end:
            loss, lr, grad_norm = self.train_step(prepared, opt)
            self.log(loss, lr, grad_norm)
            if self.validate is not None and self.cfg.eval_every \
                    and self.step % self.cfg.eval_every == 0 and self.step < self.n_steps:
                self.record_validation()
            if self.step % self.cfg.checkpoint_every == 0 and self.step < end:
                self.checkpoint()
        return self.finish()

    def resume(self) -> None:
        """Load the newest checkpoint that verifies (falling back past damaged ones, with the
        reason to `warn`) and take up its step, curves and loss window."""
        path, saved = load_latest_good(
            self.ckpt_dir, self.model, self.optimizer,
            lambda state: check_resumable(state, self.cfg, self.protocol, self.n_steps),
            warn=self._warn)
        if path is not None:
            self.step, self.window = saved["step"], saved["window"]
            self.curve = [TrainingPoint.from_dict(p) for p in saved["curve"]]
            self.val_curve = [ValidationPoint.from_dict(p) for p in saved["val_curve"]]
        self.last_ckpt, self.resumed_from = path, self.step

    def train_step(self, prepared: nn.Module, opt) -> tuple[Tensor, float, Tensor]:
        """One update on the step's batch with the step's noise; (loss, lr, gradient norm),
        the loss and norm on the device (check_finite looks at them)."""
        cfg, acc, device = self.cfg, self.acc, self.device
        rank, world = acc.process_index, acc.num_processes
        batch_idx = self.order[self.step * cfg.batch_size : (self.step + 1) * cfg.batch_size]
        gen = torch.Generator(device=device).manual_seed(
            derive_seed(cfg.seed, "noise", self.step, rank))
        lr = lr_at(self.step, self.n_steps, cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with self.autocast:
            total, count = self.loss_terms(prepared, batch_idx[rank::world], gen, device)
        if not isinstance(count, Tensor):  # filled on the device: no copy from the host
            count = torch.full((), float(count), device=device)
        # Each process holds part of the batch: normalise by the global count so that the
        # gradient (averaged over processes) is the gradient of the global-batch mean.
        global_count = acc.reduce(count.detach(), "sum").clamp_min(1.0)
        acc.backward(total / global_count * world)
        loss = acc.reduce(total.detach(), "sum") / global_count
        grad_norm = acc.clip_grad_norm_(prepared.parameters(), cfg.grad_clip or math.inf)
        self.unchecked.append((self.step + 1, loss, grad_norm.detach()))
        if len(self.unchecked) >= self.check_every:
            self.check_finite()  # before the update: on the CPU, a non-finite one is never made
        opt.step()
        opt.zero_grad(set_to_none=True)
        self.step += 1
        return loss, lr, grad_norm

    def check_finite(self) -> None:
        """The host's look at the unchecked steps' losses and gradient norms (one wait for the
        device for all of them): TrainingError at the first non-finite one."""
        if not self.unchecked:
            return
        values = torch.stack([torch.stack([loss.float(), norm.float()])
                              for _, loss, norm in self.unchecked]).tolist()
        for (step, _, _), (loss, norm) in zip(self.unchecked, values, strict=True):
            self._check_finite("training loss", loss, step)
            self._check_finite("gradient norm", norm, step)
        self.unchecked = []

    def _check_finite(self, what: str, value: float, step: int) -> None:
        if math.isfinite(value):
            return
        start = (f"resumed from step {self.resumed_from}, whose checkpoint matched its digests; "
                 if self.resumed_from else "")
        raise TrainingError(
            f"non-finite {what} ({value}) at step {step} ({start}the newest checkpoint "
            f"in {self.ckpt_dir}, if any, is from before it)", step)

    def log(self, loss: Tensor | float, lr: float, grad_norm: Tensor | float) -> None:
        """Add `loss` to the window; every log_every steps (and at the last) a curve entry,
        once the host has checked the steps since the last."""
        self.window.append(loss)
        if self.step % self.cfg.log_every == 0 or self.step == self.n_steps:
            self.check_finite()
            self.window = _floats(self.window)
            entry = TrainingPoint(self.step, sum(self.window) / len(self.window), lr,
                                  float(grad_norm))
            self.curve.append(entry)
            self.window = []
            self._report(entry.to_dict())

    def record_validation(self) -> float:
        self.check_finite()
        v = self.validate()
        self.val_curve.append(ValidationPoint(self.step, v))
        self._report({"step": self.step, "val_loss": v})
        return v

    def checkpoint(self) -> None:
        """Save the current step (main process), every process waiting for it; never past a
        step the host has not checked."""
        self.check_finite()
        self.window = _floats(self.window)
        if self.acc.is_main_process:
            state = {"total_steps": self.n_steps, "done": self.step >= self.n_steps,
                     "train_config": self.cfg.to_dict(), **self.protocol,
                     "curve": [p.to_dict() for p in self.curve],
                     "val_curve": [p.to_dict() for p in self.val_curve], "window": self.window}
            self.last_ckpt = save_checkpoint(self.ckpt_dir, self.step, self.model,
                                             self.optimizer, state, keep=self.cfg.keep_checkpoints)
        self.acc.wait_for_everyone()

    def finish(self) -> TrainResult:
        """Eval mode; the final validation and checkpoint of a run that made progress."""
        self.check_finite()
        if self.own_accelerator and self.acc.device.type != "cpu":
            # the device's cache emptied for the final validation; on the CPU there is none,
            # and accelerate's release is then only a full garbage collection (a third of a
            # second in a process holding a large heap, for every model trained)
            self.acc.free_memory()
        self.model.eval()
        completed = self.step >= self.n_steps
        val_loss = None
        if completed and self.validate is not None:
            if self.val_curve and self.val_curve[-1].step == self.step:
                val_loss = self.validate()
            else:
                val_loss = self.record_validation()
        if self.step > self.resumed_from:  # with the final validation loss when completed
            self.checkpoint()
        return TrainResult(
            step=self.step, total_steps=self.n_steps, completed=completed,
            train_loss=self.curve[-1].loss if self.curve else None, val_loss=val_loss,
            curve=self.curve, val_curve=self.val_curve,
            checkpoint=latest_checkpoint(self.ckpt_dir) if self.acc.is_main_process
            else self.last_ckpt,
            resumed_from=self.resumed_from, wall_s=time.perf_counter() - self.t_start)

    def _report(self, entry: dict) -> None:
        if self.progress is not None and self.acc.is_main_process:
            self.progress({**entry, "total_steps": self.n_steps,
                           "elapsed_s": time.perf_counter() - self.t_start})

    def _warn(self, message: str) -> None:
        if self.acc.is_main_process:
            (self.warn or runtime_warning)(message)


def _floats(values: list) -> list[float]:
    """`values` (floats and 0-d tensors) as floats, with one copy from the device for all."""
    at = [i for i, v in enumerate(values) if isinstance(v, Tensor)]
    if not at:
        return list(values)
    got = torch.stack([values[i].float() for i in at]).tolist()
    out = list(values)
    for i, v in zip(at, got, strict=True):
        out[i] = v
    return out


def train_model(
    model: nn.Module,
    loss_terms: LossTerms,
    n_train: int,
    cfg: TrainConfig,
    ckpt_dir: Path,
    progress: Callable[[dict], None] | None = None,
    *,
    protocol: dict | None = None,
    validate: Callable[[], float] | None = None,
    stop_after: int | None = None,
    accelerator: Accelerator | None = None,
    device: str | torch.device | None = None,
    warn: Callable[[str], None] | None = None,
) -> TrainResult:
    """Train `model` in place on a training set of `n_train` sequences; resume from the newest
    good checkpoint in `ckpt_dir` if there is one. The model is left in eval mode.

    loss_terms: see the module docstring; called under bf16 autocast when cfg asks for it.
    protocol: JSON-able facts besides `cfg` that a resumed run must share (model config, noise
        process, ...); stored in every checkpoint and checked on resume.
    validate: returns the validation loss of `model`; called every `eval_every` steps and at
        the end of a completed run (TrainResult.val_loss), always in float32.
    progress: called on the main process every `log_every` steps (and after each validation)
        with {"step", "total_steps", "loss", "lr", "grad_norm", "elapsed_s"} (+ "val_loss").
        An exception it raises interrupts the run; the newest checkpoint stays valid.
    warn: called on the main process with the reason whenever a checkpoint is passed over as
        damaged (it does not match its digests, or does not load) and training falls back to
        an older one or starts again; default: a RuntimeWarning.
    stop_after: stop (with a checkpoint) once this many updates are done; for tests and for
        splitting a run across jobs.
    accelerator: an `Accelerator(mixed_precision="no")` to use (several GPUs: the launcher's);
        bf16 is applied by this loop as autocast from cfg.mixed_precision. Without one, a
        single-process Accelerator on `device` (None: accelerate's default device; "cuda" and
        "cuda:<current device>" are the same device).
    Raises TrainingError on a non-finite loss or gradient norm, naming its step (on the CPU
    before its update; on a GPU at the host's next look, see the module docstring), and
    CheckpointMismatchError when the checkpoint was written under another protocol.
    """
    trainer = Trainer(model, loss_terms, n_train, cfg, ckpt_dir, progress=progress,
                      protocol=protocol, validate=validate, warn=warn, accelerator=accelerator,
                      device=device)
    return trainer.run(stop_after)
