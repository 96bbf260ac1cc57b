"""The conditional diffusion bridge c = hs[0] -> h_l (docs/method.md §2 and §3).

Separate small pieces: the process (`BrownianBridge`), the network (`CausalDenoiser`), the loss,
the samplers (full and incremental), the training loop and the evaluation measures.
"""

from __future__ import annotations

from dihal.bridge.data import BridgeData, Standardizer
from dihal.bridge.denoiser import CausalDenoiser, KVCache, build_denoiser
from dihal.bridge.loss import bridge_loss, bridge_loss_terms
from dihal.bridge.measures import DEFAULT_T_GRID, reconstruction_error, validation_loss
from dihal.bridge.process import REGRESSION_T_GRID, BrownianBridge, EndpointRegression
from dihal.bridge.sampler import BridgeDecodeState, IncrementalSampler, sample, time_grid
from dihal.bridge.train import BridgeTrainingError, TrainConfig, TrainResult, train_bridge
from dihal.checkpoint import latest_checkpoint, load_into
from dihal.net_configs import DenoiserConfig

__all__ = [
    "DEFAULT_T_GRID",
    "BridgeData",
    "BridgeDecodeState",
    "BridgeTrainingError",
    "BrownianBridge",
    "EndpointRegression",
    "REGRESSION_T_GRID",
    "CausalDenoiser",
    "DenoiserConfig",
    "IncrementalSampler",
    "KVCache",
    "Standardizer",
    "TrainConfig",
    "TrainResult",
    "bridge_loss",
    "bridge_loss_terms",
    "build_denoiser",
    "latest_checkpoint",
    "load_into",
    "reconstruction_error",
    "sample",
    "time_grid",
    "train_bridge",
    "validation_loss",
]
