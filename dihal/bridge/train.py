"""Training a bridge denoiser under the fixed protocol of docs/method.md §2.

The loop itself (order, noise seeds, optimiser, schedule, budget, resume, checks, bf16,
checkpoints) is `dihal.training.train_model`, shared with the baselines; this module supplies
the bridge's loss (the squared error of the denoiser's z0 estimate at a noised point of the
bridge, pooled over real tokens) and its validation loss. The protocol pieces are re-exported
from here for the bridge's callers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from dihal.bridge.data import BridgeData, place_pairs
from dihal.bridge.denoiser import CausalDenoiser
from dihal.bridge.loss import bridge_loss_terms
from dihal.bridge.measures import validation_loss
from dihal.bridge.process import BrownianBridge
from dihal.checkpoint import runtime_warning
from dihal.errors import TrainingError
from dihal.training import (
    TrainConfig,
    TrainResult,
    lr_at,
    make_optimizer,
    sample_budget,
    sample_order,
    total_steps,
    train_model,
)

if TYPE_CHECKING:
    from accelerate import Accelerator

BridgeTrainingError = TrainingError  # the name this error had before baselines shared the loop

__all__ = [
    "BridgeTrainingError",
    "TrainConfig",
    "TrainResult",
    "bridge_training_loss",
    "lr_at",
    "make_optimizer",
    "sample_budget",
    "sample_order",
    "total_steps",
    "train_bridge",
]


def bridge_training_loss(train: BridgeData, process: BrownianBridge,
                         warn: Callable[[str], None] | None = None):
    """The loop's loss over `train`: per step, t ~ process and eps ~ N(0, I) from the step's
    generator, then (sum of squared errors, number of terms) of the batch's real tokens. At
    the first step the pairs move to the step's device where they fit (place_pairs), so that
    no step copies its batch from the host; where they do not, `warn` gets the reason
    (default: a RuntimeWarning) and every step copies its batch."""
    placed: dict[torch.device, BridgeData] = {}

    def loss_terms(
        model: nn.Module, indices: Tensor, generator: torch.Generator, device: torch.device
    ) -> tuple[Tensor, Tensor]:
        if device not in placed:
            placed[device], why = place_pairs(train, device)
            if why:
                (warn or runtime_warning)(why)
        cond, target, mask = placed[device].batch(indices, device)
        t = process.sample_t(cond.shape[0], generator)
        eps = torch.randn(target.shape, generator=generator, device=device)
        return bridge_loss_terms(model, process, cond, target, t, eps, mask)

    return loss_terms


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
    warn: Callable[[str], None] | None = None,
) -> TrainResult:
    """Train `denoiser` in place; resume from the newest checkpoint in `ckpt_dir` if there is one.

    The validation loss (every cfg.eval_every steps and at the end) is `validation_loss` on
    `val` with cfg.val_t_grid, cfg.val_seed and cfg.val_batch_size. A resumed run must share
    the denoiser's config and the process besides `cfg`. The training pairs move to the
    training device for the run where they fit (bridge_training_loss). The other arguments
    (`warn`: the reason a damaged checkpoint is passed over, or that the pairs stay on the
    host), the progress entries and the errors are those
    of `dihal.training.train_model`; BridgeTrainingError is its TrainingError.
    """
    if train.dim != denoiser.cfg.d_in or val.dim != denoiser.cfg.d_in:
        raise ValueError(
            f"data dimension {train.dim}/{val.dim} != denoiser d_in={denoiser.cfg.d_in}"
        )

    def validate() -> float:
        return validation_loss(
            denoiser, val, process, cfg.val_t_grid, cfg.val_seed, cfg.val_batch_size
        )

    return train_model(
        denoiser,
        bridge_training_loss(train, process, warn),
        len(train),
        cfg,
        ckpt_dir,
        progress,
        protocol={"denoiser_config": denoiser.cfg.to_dict(), "process": asdict(process)},
        validate=validate,
        stop_after=stop_after,
        accelerator=accelerator,
        warn=warn,
    )


def loop_config(protocol, device: str) -> TrainConfig:
    """The training loop's settings of a bridge protocol (dihal.config.BridgeProtocol) on
    `device`: bf16 where mixed_precision is "auto" and the device is a GPU."""
    mp = protocol.mixed_precision
    if mp == "auto":
        mp = "bf16" if device.startswith("cuda") else "no"
    return TrainConfig(lr=protocol.lr, weight_decay=protocol.weight_decay,
                       warmup_frac=protocol.warmup_frac, batch_size=protocol.batch_size,
                       epochs=protocol.epochs, grad_clip=protocol.grad_clip, seed=protocol.seed,
                       mixed_precision=mp, checkpoint_every=protocol.checkpoint_every,
                       log_every=5, val_seed=protocol.seed,  # the seed measure_bridge uses
                       keep_checkpoints=2)  # a damaged newest one falls back to the previous
