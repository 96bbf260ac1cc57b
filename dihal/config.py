"""Every configuration of the method, in one place: frozen dataclasses validated on
construction. They import nothing heavy, so the Dagster layer builds its run-config classes
from them at load time (assets/configs.py): one config system, not two.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

NORMALIZATIONS = ("none", "rms", "standardize")
MONO_STATS = ("median", "q05", "min_eig")
DTYPE_MAX = {"float16": 65504.0, "float32": 3.4028234663852886e38}
MIN_SWEPT_LAYERS = 3  # bridgeability needs at least this many swept layers


@dataclass(frozen=True)
class CorpusConfig:
    """Which shards to read. ``paths`` are files or globs; ``url_list`` a file (or URL) with one
    shard URL per line. Neither given: the embedded sample under data/dolma_sample."""

    paths: tuple[str, ...] = ()
    url_list: str | None = None
    max_shards: int | None = None
    max_docs: int | None = None
    on_malformed: str = "skip"  # "skip" (count and go on) | "error"
    min_chars: int = 1  # shorter (or empty) documents are skipped and counted

    def __post_init__(self) -> None:
        if self.on_malformed not in ("skip", "error"):
            raise ValueError(f"on_malformed must be 'skip' or 'error', got {self.on_malformed!r}")
        if self.paths and self.url_list:
            raise ValueError("give corpus paths or a url_list, not both")
        object.__setattr__(self, "paths", tuple(self.paths))  # a list from JSON -> tuple


@dataclass(frozen=True)
class SequenceConfig:
    seq_len: int = 128
    n_train: int = 512
    n_val: int = 64
    val_fraction: float = 0.1
    seed: int = 0
    # Each document contributes at most this many tokens (None: all), so that a small budget
    # still covers many documents and genres rather than a few long ones [ours].
    max_tokens_per_doc: int | None = 256

    def __post_init__(self) -> None:
        if self.max_tokens_per_doc is not None and self.max_tokens_per_doc < 1:
            raise ValueError("max_tokens_per_doc must be >= 1 or None")
        if self.seq_len < 4:
            raise ValueError(f"seq_len must be >= 4, got {self.seq_len}")
        if self.n_train < 1 or self.n_val < 1:
            raise ValueError("n_train and n_val must be >= 1")
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {self.val_fraction}")


@dataclass(frozen=True)
class ExtractConfig:
    batch_size: int = 16
    dtype: str = "float16"  # storage dtype: float16 (checked for overflow) or float32

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_MAX:
            raise ValueError(f"dtype must be one of {sorted(DTYPE_MAX)}, got {self.dtype!r}")
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _require_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"GeometryConfig.{name} must be an int >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class GeometryConfig:
    """What the Locate stage computes per layer. Every field is recorded in artifact metadata."""

    n_tokens: int = 4096  # states sampled per layer (same positions for every layer)
    n_anchors: int = 2048
    k_neighbors: int = 32
    n_pairs: int = 4096
    gamma_rel: float = 1e-3  # gamma = gamma_rel * tr(Sigma) / d
    mono_stat: str = "median"  # "median" | "q05" | "min_eig"
    normalizations: tuple[str, ...] = NORMALIZATIONS
    seed: int = 0

    def __post_init__(self) -> None:
        _require_int("n_tokens", self.n_tokens, 2)
        _require_int("n_anchors", self.n_anchors, 1)
        _require_int("k_neighbors", self.k_neighbors, 2)
        _require_int("n_pairs", self.n_pairs, 1)
        _require_int("seed", self.seed, 0)
        if self.n_anchors > self.n_tokens:
            raise ValueError(
                f"GeometryConfig.n_anchors ({self.n_anchors}) must be <= n_tokens ({self.n_tokens})"
            )
        if self.k_neighbors >= self.n_tokens:
            raise ValueError(
                f"GeometryConfig.k_neighbors ({self.k_neighbors}) must be < n_tokens "
                f"({self.n_tokens}): the anchor itself is excluded from its neighbours"
            )
        gamma = self.gamma_rel
        if isinstance(gamma, bool) or not isinstance(gamma, int | float) or not _positive(gamma):
            raise ValueError(f"GeometryConfig.gamma_rel must be a finite float > 0, got {gamma!r}")
        if self.mono_stat not in MONO_STATS:
            raise ValueError(
                f"GeometryConfig.mono_stat must be one of {MONO_STATS}, got {self.mono_stat!r}"
            )
        norms = self.normalizations
        if isinstance(norms, str) or not isinstance(norms, tuple | list):
            raise ValueError(
                f"GeometryConfig.normalizations must be a tuple drawn from {NORMALIZATIONS}, "
                f"got {norms!r}"
            )
        norms = tuple(norms)
        bad = [k for k in norms if k not in NORMALIZATIONS]
        if not norms or bad or len(set(norms)) != len(norms):
            raise ValueError(
                f"GeometryConfig.normalizations must be a non-empty tuple of distinct values from "
                f"{NORMALIZATIONS}, got {norms!r}"
            )
        object.__setattr__(self, "normalizations", norms)  # a list from a run config -> tuple


@dataclass(frozen=True)
class BridgeProtocol:
    """One protocol for every candidate layer: same denoiser, data, order, seed, optimiser and
    token budget. `epochs` = 1 is the paper's single pass; full training raises it."""

    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    mlp_ratio: float = 4.0
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_frac: float = 0.05
    batch_size: int = 4
    epochs: float = 1.0
    grad_clip: float = 1.0
    seed: int = 0
    mixed_precision: str = "auto"  # "auto": bf16 on GPU, fp32 on CPU
    sigma: float = 1.0
    steps: int = 16
    eval_sequences: int = 32
    pin_first: bool = True
    checkpoint_every: int = 200

    def __post_init__(self) -> None:
        if self.mixed_precision not in ("auto", "no", "bf16"):
            raise ValueError(f"mixed_precision must be auto|no|bf16, got {self.mixed_precision!r}")
        if self.steps < 1 or self.eval_sequences < 1:
            raise ValueError("steps and eval_sequences must be >= 1")

    def denoiser_config(self, d_in: int, max_len: int):
        from dihal.bridge.denoiser import DenoiserConfig

        return DenoiserConfig(d_in=d_in, d_model=self.d_model, n_layers=self.n_layers,
                              n_heads=self.n_heads, mlp_ratio=self.mlp_ratio, max_len=max_len)

    def train_config(self, device: str):
        from dihal.training import TrainConfig

        mp = self.mixed_precision
        if mp == "auto":
            mp = "bf16" if device.startswith("cuda") else "no"
        return TrainConfig(lr=self.lr, weight_decay=self.weight_decay,
                           warmup_frac=self.warmup_frac, batch_size=self.batch_size,
                           epochs=self.epochs, grad_clip=self.grad_clip, seed=self.seed,
                           mixed_precision=mp, checkpoint_every=self.checkpoint_every,
                           log_every=5, val_seed=self.seed)  # the seed measure_bridge uses

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class EvalConfig:
    n_samples: int = 64
    length: int = 64
    temperature: float = 1.0
    seed: int = 0
    batch_size: int = 32
    eta: float = 0.0

    def __post_init__(self) -> None:
        if self.n_samples < 1 or self.length < 1 or self.batch_size < 1:
            raise ValueError("n_samples, length and batch_size must be >= 1")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")


@dataclass(frozen=True)
class BaselineRunConfig:
    """What a baseline run may choose; everything in the Budget is taken from DiHAL's bridge."""

    lr: float = 1e-3  # the same default as BridgeProtocol.lr and TrainConfig.lr
    seed: int = 0
    n_samples: int = 64
    length: int = 64
    # Token tables (embeddings, read-out, rounding) over the tokens of the training data only
    # (plus BOS/EOS), mapped back to backbone ids when sampling [ours]: a baseline trained
    # from scratch never learns the others, and the full 49k read-out dominates CPU time.
    restrict_vocab: bool = True




@dataclass(frozen=True)
class LayerScoreConfig:
    # The normalisation whose argmax is l* (METHOD.md: the paper does not say; plain reading).
    primary_norm: str = "none"

    def __post_init__(self) -> None:
        if self.primary_norm not in NORMALIZATIONS:
            raise ValueError(f"primary_norm must be one of {NORMALIZATIONS}, got {self.primary_norm!r}")
