"""What every continuous-diffusion baseline shares (METHOD.md s.5): the matched budget, its
check, the training loop (the bridge's optimiser and schedule, resumable) and the interface.

A baseline is an nn.Module with
    name: str
    denoiser_parameters() -> int      the network run at every sampler step (matched to DiHAL's
                                      bridge denoiser, +-10%); token embedding tables and
                                      read-out heads tied to them are not counted
    loss(ids: LongTensor (B, T), generator) -> scalar Tensor
    sample(n, length, steps, generator) -> LongTensor (n, length)   valid token ids
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

import torch
from torch import Tensor, nn

from dihal.errors import DihalError
from dihal.seeds import derive_seed


class BudgetMismatchError(DihalError):
    pass


@dataclass(frozen=True)
class Budget:
    """The figures a comparison must hold fixed across methods."""

    denoiser_parameters: int
    train_tokens: int
    sampler_steps: int
    seq_len: int

    def to_dict(self) -> dict:
        return asdict(self)


def check_budget(reference: Budget, candidate: Budget, name: str, param_tol: float = 0.10) -> None:
    """Raise BudgetMismatchError unless `candidate` matches `reference`: parameters within
    +-param_tol, training tokens, sampler steps and sequence length exactly."""
    problems = []
    rel = abs(candidate.denoiser_parameters - reference.denoiser_parameters) / reference.denoiser_parameters
    if rel > param_tol:
        problems.append(f"denoiser parameters {candidate.denoiser_parameters:,} vs "
                        f"{reference.denoiser_parameters:,} ({rel:+.1%}, allowed +-{param_tol:.0%})")
    for field in ("train_tokens", "sampler_steps", "seq_len"):
        a, b = getattr(reference, field), getattr(candidate, field)
        if a != b:
            problems.append(f"{field} {b:,} vs {a:,}")
    if problems:
        raise BudgetMismatchError(
            f"{name} is not at DiHAL's budget: " + "; ".join(problems)
            + ". Change the baseline's size or training config so the comparison is fair.")


class Baseline(Protocol):
    name: str

    def denoiser_parameters(self) -> int: ...
    def loss(self, ids: Tensor, generator: torch.Generator) -> Tensor: ...
    def sample(self, n: int, length: int, steps: int, generator: torch.Generator) -> Tensor: ...


@dataclass(frozen=True)
class BaselineTrainConfig:
    """The same optimiser and schedule as the bridge (AdamW, linear warm-up, cosine)."""

    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_frac: float = 0.05
    min_lr_frac: float = 0.1
    batch_size: int = 4
    epochs: float = 4.0
    grad_clip: float = 1.0
    seed: int = 0
    checkpoint_every: int = 200
    log_every: int = 10

    def steps(self, n_seq: int) -> int:
        return math.ceil(max(1, round(self.epochs * n_seq)) / self.batch_size)

    def lr_at(self, step: int, n_steps: int) -> float:
        warmup = math.ceil(self.warmup_frac * n_steps)
        if step < warmup:
            return self.lr * (step + 1) / warmup
        progress = (step - warmup) / max(1, n_steps - warmup)
        return self.lr * (self.min_lr_frac + (1 - self.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def train_baseline(
    model: nn.Module,
    ids: Tensor,
    cfg: BaselineTrainConfig,
    ckpt_dir: Path,
    progress: Callable[[dict], None] | None = None,
    device: str = "cpu",
) -> dict:
    """Train in place over `ids` (n_seq, T) for cfg.epochs passes; resumes from ckpt_dir.
    Returns {"steps", "train_tokens", "curve", "seconds", "resumed_from"}."""
    from dihal.bridge.checkpoint import latest_checkpoint, load_into, save_checkpoint

    n_seq = ids.shape[0]
    n_steps = cfg.steps(n_seq)
    budget = max(1, round(cfg.epochs * n_seq))
    order = torch.cat([
        torch.randperm(n_seq, generator=torch.Generator().manual_seed(derive_seed(cfg.seed, "order", e)))
        for e in range(math.ceil(budget / n_seq))])[:budget]
    model.to(device).train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW([
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    step, curve = 0, []
    last = latest_checkpoint(ckpt_dir)
    if last is not None:
        state = load_into(last, model, opt)
        step, curve = state["step"], state["curve"]
    resumed_from = step
    t0 = time.perf_counter()
    window: list[float] = []
    while step < n_steps:
        idx = order[step * cfg.batch_size : (step + 1) * cfg.batch_size]
        gen = torch.Generator(device=device).manual_seed(derive_seed(cfg.seed, "noise", step))
        for group in opt.param_groups:
            group["lr"] = cfg.lr_at(step, n_steps)
        loss = model.loss(ids[idx].to(device), gen)
        if not torch.isfinite(loss):
            raise DihalError(f"{getattr(model, 'name', 'baseline')}: non-finite loss at step "
                             f"{step + 1}; the last good checkpoint in {ckpt_dir} is kept")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip:
            nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        step += 1
        window.append(loss.item())
        if step % cfg.log_every == 0 or step == n_steps:
            entry = {"step": step, "loss": sum(window) / len(window), "lr": cfg.lr_at(step - 1, n_steps)}
            curve.append(entry)
            window = []
            if progress:
                progress({**entry, "total_steps": n_steps, "elapsed_s": time.perf_counter() - t0})
        if step % cfg.checkpoint_every == 0 or step == n_steps:
            save_checkpoint(Path(ckpt_dir), step, model, opt, {"curve": curve})
    model.eval()
    return {"steps": step, "train_tokens": int(budget * ids.shape[1]), "curve": curve,
            "seconds": time.perf_counter() - t0, "resumed_from": resumed_from}
