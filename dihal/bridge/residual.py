"""The ridge-started bridge denoiser: our variant, not the paper's (docs/method.md §2).

    z0_hat = R(c) + f(x_t, t, c)

R is the closed-form, position-wise ridge map c -> h_l of the layer (fitted on the bridge's
training pairs in their standardised units, as dihal.replace.control_hybrids.fit_ridge fits it),
held as a buffer that no optimiser sees; f is the project's causal denoiser, whose output
projection starts at zero. So before any training the denoiser predicts R(c) at every t and for
every x_t, and the sampler (either rule, any K: its last step returns the prediction itself)
returns R(c) exactly: the variant starts at the ridge hybrid, and training can only add what
the context (through f's causal attention) and the noisy state bring.

R acts on each position alone, so the key/value caches of incremental decoding are f's and
stay valid; the class is a `CausalDenoiser` (same forward, `cfg`, `new_cache`,
`param_count`), usable wherever one is: the bridge loss, validation, the samplers, the hybrid,
the training loop and its checkpoints. Its state dict carries the ridge buffers
(`ridge_weight`, `ridge_bias`) beside f's weights; `residual_denoiser_from_state` rebuilds it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from dihal.bridge.denoiser import CausalDenoiser, KVCache
from dihal.net_configs import DenoiserConfig

RIDGE_KEYS = ("ridge_weight", "ridge_bias")  # the buffers' names in the state dict


def check_ridge(cfg: DenoiserConfig, weight: Tensor, bias: Tensor) -> None:
    """A clear error unless (weight, bias) is a finite ridge map of width cfg.d_in: weight
    (d_in, d_in) applied as c @ weight, bias (d_in,)."""
    d = cfg.d_in
    if not isinstance(weight, Tensor) or not isinstance(bias, Tensor):
        raise TypeError(f"the ridge map must be tensors, got {type(weight).__name__} and "
                        f"{type(bias).__name__} (pass RidgeMap.weight and RidgeMap.bias)")
    if tuple(weight.shape) != (d, d) or tuple(bias.shape) != (d,):
        raise ValueError(
            f"the ridge map must be weight ({d}, {d}) and bias ({d},) for a denoiser with "
            f"d_in={d}, got {tuple(weight.shape)} and {tuple(bias.shape)}: fit it on this "
            "layer's standardised pairs (dihal.replace.control_hybrids.fit_ridge)")
    if not (torch.isfinite(weight).all() and torch.isfinite(bias).all()):
        raise ValueError("the ridge map holds NaN or inf; fit it again (a larger penalty "
                         "where the training covariance is near singular)")


class ResidualDenoiser(CausalDenoiser):
    """z0_hat = ridge(c) + f(x_t, t, c) for states (B, T, d_in), f the causal denoiser of `cfg`.

    The ridge map is evaluated in float32 outside any autocast (it is a fixed map; bf16 would
    only round it), f as a CausalDenoiser is; the sum has x_t's dtype.
    """

    def __init__(self, cfg: DenoiserConfig, ridge_weight: Tensor, ridge_bias: Tensor) -> None:
        check_ridge(cfg, ridge_weight, ridge_bias)
        super().__init__(cfg)  # draws f's weights exactly as a plain CausalDenoiser(cfg)
        self.register_buffer("ridge_weight", ridge_weight.detach().to(torch.float32).clone())
        self.register_buffer("ridge_bias", ridge_bias.detach().to(torch.float32).clone())

    def ridge(self, c: Tensor) -> Tensor:
        """R(c) = c @ ridge_weight + ridge_bias, float32, whatever autocast is on."""
        with torch.autocast(device_type=c.device.type, enabled=False):
            return c.float() @ self.ridge_weight.float() + self.ridge_bias.float()

    def forward(
        self,
        x_t: Tensor,
        t: float | Tensor,
        c: Tensor,
        cache: KVCache | None = None,
        start_pos: int = 0,
    ) -> Tensor:
        """z0_hat for positions [start_pos, start_pos + T): the ridge map of c plus f's
        residual (the cache, as CausalDenoiser's, holds f's keys and values)."""
        residual = super().forward(x_t, t, c, cache=cache, start_pos=start_pos)
        return (residual.float() + self.ridge(c)).to(x_t.dtype)


def build_residual_denoiser(cfg: DenoiserConfig, seed: int, ridge_weight: Tensor,
                            ridge_bias: Tensor) -> ResidualDenoiser:
    """A fresh ridge-started denoiser whose f has exactly the weights build_denoiser(cfg, seed)
    gives the paper's bridge (so the two differ by the ridge map alone), with the ridge map
    (ridge_weight (d_in, d_in), ridge_bias (d_in,): a RidgeMap's weight and bias, in the
    bridge's standardised units) as fixed buffers. The global RNG state is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ResidualDenoiser(cfg, ridge_weight, ridge_bias)


def ridge_started_denoiser(ridge, cfg: DenoiserConfig) -> ResidualDenoiser:
    """The ridge-started denoiser of a fitted ridge map (a dihal.replace.control_hybrids.RidgeMap,
    or anything with its `weight` (d_in, d_in) and `bias` (d_in,)), f drawn from the current RNG:
    the (ridge, cfg) factory the budget study takes (dihal.replace.budget), which calls it under
    the bridge's own seeded initialisation, so that f starts where the paper's bridge does."""
    return ResidualDenoiser(cfg, ridge.weight, ridge.bias)


def residual_denoiser_from_state(cfg: DenoiserConfig, state: dict[str, Tensor]) -> ResidualDenoiser:
    """The ResidualDenoiser of a saved state dict (its `state_dict()`, e.g. a checkpoint's or a
    saved bridge's "denoiser." tensors with the prefix stripped): ridge buffers and f's weights."""
    missing = [k for k in RIDGE_KEYS if k not in state]
    if missing:
        raise ValueError(f"the state has no {', '.join(missing)}: it is not a ridge-started "
                       "(residual) denoiser's; restore a plain bridge with CausalDenoiser")
    with torch.random.fork_rng(devices=[]):  # f's fresh weights are overwritten at once
        model = ResidualDenoiser(cfg, state["ridge_weight"], state["ridge_bias"])
    model.load_state_dict(state)
    return model
