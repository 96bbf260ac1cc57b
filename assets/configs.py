"""Dagster run config for each stage. Each class mirrors one frozen dataclass of `dihal`
(the one config system); `to_dihal()` builds it, which validates every field.
tests/test_configs.py checks that fields and defaults match the dataclasses."""

from __future__ import annotations

import dagster as dg


class CorpusRunConfig(dg.Config):
    """Shards to read: local files/globs, or a URL list (Dolma's urls/v1_7.txt); none = the
    embedded sample."""

    paths: list[str] = []
    url_list: str | None = None
    max_shards: int | None = None
    max_docs: int | None = None
    on_malformed: str = "skip"
    min_chars: int = 1

    def to_dihal(self):
        from dihal.corpus import CorpusConfig

        return CorpusConfig(**{**self.model_dump(), "paths": tuple(self.paths)})


class SequencesRunConfig(dg.Config):
    seq_len: int = 128
    n_train: int = 512
    n_val: int = 64
    val_fraction: float = 0.1
    seed: int = 0
    max_tokens_per_doc: int | None = 256

    def to_dihal(self):
        from dihal.corpus import SequenceConfig

        return SequenceConfig(**self.model_dump())


class ExtractRunConfig(dg.Config):
    batch_size: int = 16
    dtype: str = "float16"

    def to_dihal(self):
        from dihal.extract import ExtractConfig

        return ExtractConfig(**self.model_dump())


class GeometryRunConfig(dg.Config):
    n_tokens: int = 4096
    n_anchors: int = 2048
    k_neighbors: int = 32
    n_pairs: int = 4096
    gamma_rel: float = 1e-3
    mono_stat: str = "median"
    normalizations: list[str] = ["none", "rms", "standardize"]
    seed: int = 0

    def to_dihal(self):
        from dihal.geometry import GeometryConfig

        return GeometryConfig(
            **{**self.model_dump(), "normalizations": tuple(self.normalizations)}
        )


class LayerScoreRunConfig(dg.Config):
    # The normalisation whose argmax is l* (METHOD.md: the paper does not say; plain reading).
    primary_norm: str = "none"


class BridgeProtocolRunConfig(dg.Config):
    """The fixed sweep protocol (dihal.replace.BridgeProtocol): the same for every layer."""

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
    mixed_precision: str = "auto"
    sigma: float = 1.0
    steps: int = 16
    eval_sequences: int = 32
    pin_first: bool = True
    checkpoint_every: int = 200

    def to_dihal(self):
        from dihal.replace import BridgeProtocol

        return BridgeProtocol(**self.model_dump())


class FullBridgeRunConfig(BridgeProtocolRunConfig):
    """The bridge at l* with the full budget: the sweep protocol with more passes."""

    epochs: float = 4.0


class EvalRunConfig(dg.Config):
    """Unconditional samples (METHOD.md s.4): CPU default 64 x 64 tokens; GPU 512 x 128."""

    n_samples: int = 64
    length: int = 64
    temperature: float = 1.0
    seed: int = 0
    batch_size: int = 32
    eta: float = 0.0
    judge: str = "gemma3-270m"


class BaselineRunConfig(dg.Config):
    """A baseline's own choices; its budget (size, tokens, steps, length) is DiHAL's."""

    lr: float = 1e-3
    seed: int = 0
    n_samples: int = 64
    length: int = 64

    def to_dihal(self):
        from dihal.compare import BaselineRunConfig as Cfg

        return Cfg(**self.model_dump())
