"""The networks' configs: the bridge denoiser's size (built from a BridgeProtocol by
dihal.bridge.denoiser.denoiser_config_of) and the training loop's protocol (dihal.training; from
a BridgeProtocol by dihal.bridge.train.loop_config). Plain dataclasses, torch-free, so that a
saved bridge's hyper-parameters (dihal.results.BridgeHparams) read back typed without torch."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from dihal.config import EPOCHS_WHY, MAX_TRAIN_STEPS

# The noise levels t at which the bridge's validation loss is averaged (docs/method.md §2): the
# default of TrainConfig.val_t_grid and of dihal.bridge.measures.
DEFAULT_T_GRID: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


@dataclass(frozen=True)
class DenoiserConfig:
    """Size of the denoiser. `d_in` is the backbone's hidden size (of both x_t and c)."""

    d_in: int
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    mlp_ratio: float = 4.0
    max_len: int = 1024
    time_embed_dim: int = 128
    rope_base: float = 10000.0
    norm_eps: float = 1e-6
    # False: bidirectional attention, for whole-sequence diffusion baselines (no KV cache).
    causal: bool = True

    def __post_init__(self) -> None:
        for name in ("d_in", "d_model", "n_layers", "n_heads", "max_len", "time_embed_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.head_dim % 2:
            raise ValueError(f"rotary positions need an even head size, got {self.head_dim}")
        if self.time_embed_dim % 2:
            raise ValueError(f"time_embed_dim must be even, got {self.time_embed_dim}")
        if not self.mlp_ratio > 0:
            raise ValueError(f"mlp_ratio must be > 0, got {self.mlp_ratio}")
        if not self.rope_base > 1:
            raise ValueError(f"rope_base must be > 1, got {self.rope_base}")
        if not self.norm_eps > 0:
            raise ValueError(f"norm_eps must be > 0, got {self.norm_eps}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def d_mlp(self) -> int:
        return int(round(self.mlp_ratio * self.d_model))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> DenoiserConfig:
        return cls(**d)


@dataclass(frozen=True)
class TrainConfig:
    """The training protocol. `step` counts optimiser updates, from 1.

    The val_* fields configure the validation hook of the bridge (`validation_loss`)."""

    lr: float = 1e-3
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
            # t = 1 is the condition itself: the regression control validates there
            "val_t_grid": len(self.val_t_grid) > 0 and all(0 < t <= 1 for t in self.val_t_grid),
            "val_batch_size": self.val_batch_size >= 1,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(
                f"invalid TrainConfig fields: {', '.join(f'{b}={getattr(self, b)!r}' for b in bad)}"
            )
        if self.epochs > MAX_TRAIN_STEPS:
            raise ValueError(f"TrainConfig.epochs must be at most {MAX_TRAIN_STEPS:,} "
                             f"({EPOCHS_WHY}), got {self.epochs!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        return cls(**d)
