"""Control hybrids: non-diffusion replacements of layers 0..l-1, read beside DiHAL.

Each keeps the upper layers l..N-1, the final norm and the LM head exactly as DiHAL's hybrid
does, and samples through the same code (`dihal.replace.hybrid.autoregress`: temperature, one uniform
per (sequence, position), cached or uncached), so its rows are comparable with DiHAL's at the
same sample count, temperature and judge:

- the layer-drop hybrid: hs[0] fed straight to block l (no learned part);
- the ridge hybrid: a linear map hs[0] -> h_l fitted in closed form on the training pairs (in
  the bridge's standardised units, the regularisation chosen by held-out error);
- the regression hybrid: the regression control (EndpointRegression, a bridge network trained
  only at t = 1) sampled in one step, i.e. `dihal.replace.hybrid.Hybrid` with steps = 1.

Every model here (and `Hybrid`) offers the interface `ControlModel`: `layer`, `logits(ids)` for
held-out NLL, and `decode(n, length, *, temperature, seed, batch_size, cached, prompt)` for
generation. The position-wise maps need no state across positions, so their cached decoding
is the upper layers' cache alone. Pure compute, no Dagster.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from dihal.backbones import Backbone
from dihal.bridge import BrownianBridge, EndpointRegression
from dihal.bridge.data import BridgeData, Standardizer
from dihal.bridge.sampler import DEFAULT_RULE
from dihal.config import RIDGE_LAMBDAS, BridgeProtocol, ExtractConfig
from dihal.replace.hybrid import (
    Generation,
    Hybrid,
    Stepper,
    as_prompt_ids,
    autoregress,
)
from dihal.replace.stage import (
    check_candidate,
    held_out,
    held_out_scores,
    layer_data_for,
    loss_mask,
    restore_bridge,
    standardise_pairs,
)
from dihal.results import BridgeHparams, TrainedBridge
from dihal.rows import BridgeMetrics


class ControlModel(Protocol):
    """What the eval code needs of DiHAL's hybrid and of every control hybrid."""

    backbone: Backbone
    layer: int

    def logits(self, input_ids: Tensor) -> Tensor: ...

    def decode(self, n: int, length: int, *, temperature: float = 1.0, seed: int,
               batch_size: int | None = None, cached: bool = True,
               prompt: Sequence[int] | Tensor | None = None) -> Generation: ...


class PositionwiseHybrid:
    """Backbone with layers 0..l-1 replaced by a map applied to hs[0] one position at a time.

    map_fn: hs[0] (B, T, d) -> h_l_hat (B, T, d), raw (backbone) units, on the backbone's
    device. first_state: where given, h_l_hat at position 0 is this vector (the backbone's own
    BOS state, pinned as DiHAL's hybrid pins it); None feeds the map's output there too.
    """

    def __init__(self, backbone: Backbone, layer: int, map_fn: Callable[[Tensor], Tensor],
                 name: str, first_state: Tensor | None = None) -> None:
        self.backbone = backbone
        self.layer = backbone.check_layer(layer)
        self.map_fn = map_fn
        self.name = name
        if first_state is not None and first_state.shape != (backbone.hidden_size,):
            raise ValueError(f"first_state must be ({backbone.hidden_size},), got "
                             f"{tuple(first_state.shape)}")
        self.first_state = first_state

    @torch.no_grad()
    def hidden(self, input_ids: Tensor, start_pos: int = 0) -> Tensor:
        """h_l_hat (B, T, d) of positions [start_pos, ...)."""
        h = self.map_fn(self.backbone.embed(input_ids))
        if self.first_state is not None and start_pos == 0:
            h = h.clone()
            h[:, 0] = self.first_state.to(h)
        return h

    @torch.no_grad()
    def logits(self, input_ids: Tensor, generator: torch.Generator | None = None,
               seed: int | None = None) -> Tensor:
        """Logits (B, T, V) of whole sequences (no cache; generator and seed unused: the map
        is deterministic)."""
        return self.backbone.run_upper(self.hidden(input_ids), self.layer)

    def stepper(self, cached: bool = True, seed: int = 0) -> Stepper:
        """Next-token logits for one batch (see `dihal.replace.hybrid.backbone_stepper`)."""
        if not cached:
            return lambda ids: self.logits(ids)[:, -1]
        cache = self.backbone.new_cache()
        seen = 0

        def step(ids: Tensor) -> Tensor:
            nonlocal seen
            h = self.hidden(ids[:, seen:], seen)
            out = self.backbone.run_upper(h, self.layer, cache=cache, start_pos=seen)[:, -1]
            seen = ids.shape[1]
            return out

        return step

    @torch.no_grad()
    def decode(self, n: int, length: int, *, temperature: float = 1.0, seed: int,
               batch_size: int | None = None, cached: bool = True,
               prompt: Sequence[int] | Tensor | None = None) -> Generation:
        """Sample n sequences of `length` tokens, exactly as `Hybrid.decode` does."""
        return autoregress(
            lambda b, batch_seed: self.stepper(cached, batch_seed),
            as_prompt_ids(prompt, self.backbone.bos_id), n, length,
            temperature=temperature, seed=seed, batch_size=batch_size,
            device=self.backbone.device,
        )

    def generate(self, n: int, length: int, **kwargs) -> Tensor:
        return self.decode(n, length, **kwargs).tokens


def layer_drop_hybrid(backbone: Backbone, layer: int,
                      first_state: Tensor | None = None) -> PositionwiseHybrid:
    """The layer-drop control: hs[0] fed straight to block `layer` (no learned part)."""
    return PositionwiseHybrid(backbone, layer, lambda e: e, f"layer-drop (l={layer})", first_state)


# ---------------------------------------------------------------- the ridge map


@dataclass(frozen=True)
class RidgeMap:
    """z_h = z_c @ weight + bias in standardised units (those of the bridge's pairs).

    lam: the penalty it was fitted with; val_mse: its held-out mean squared error per element
    (standardised units, as the bridge's validation loss), None when fitted without held-out
    pairs. lambdas / val_mses: every penalty tried and its held-out error.
    """

    weight: Tensor  # (d_in, d_out) float32
    bias: Tensor  # (d_out,) float32
    lam: float
    val_mse: float | None = None
    lambdas: tuple[float, ...] = ()
    val_mses: tuple[float, ...] = ()
    fit_tokens: int = 0  # the real (masked-in) token pairs it was fitted on

    @property
    def parameters(self) -> int:
        return int(self.weight.numel() + self.bias.numel())

    def __call__(self, z: Tensor) -> Tensor:
        return z @ self.weight.to(z) + self.bias.to(z)

    def raw(self, cond_std: Standardizer, target_std: Standardizer) -> Callable[[Tensor], Tensor]:
        """The map in the backbone's units: hs[0] -> h_l_hat."""
        return lambda e: target_std.invert(self(cond_std.apply(e.float())))


@dataclass(frozen=True)
class _Moments:
    """Sufficient statistics of masked (x, y) pairs, float64: n, sums and cross products."""

    n: float
    sx: Tensor
    sy: Tensor
    xx: Tensor
    xy: Tensor
    yy: float


def _moments(data: BridgeData, chunk: int = 64) -> _Moments:
    d_in, d_out = data.cond.shape[-1], data.target.shape[-1]
    n, yy = 0.0, 0.0
    sx, sy = torch.zeros(d_in, dtype=torch.float64), torch.zeros(d_out, dtype=torch.float64)
    xx = torch.zeros(d_in, d_in, dtype=torch.float64)
    xy = torch.zeros(d_in, d_out, dtype=torch.float64)
    for i in range(0, len(data), chunk):
        x = data.cond[i : i + chunk].reshape(-1, d_in).double()
        y = data.target[i : i + chunk].reshape(-1, d_out).double()
        if data.mask is not None:
            keep = data.mask[i : i + chunk].reshape(-1)
            x, y = x[keep], y[keep]
        n += x.shape[0]
        sx += x.sum(0)
        sy += y.sum(0)
        xx += x.T @ x
        xy += x.T @ y
        yy += float((y * y).sum())
    if n == 0:
        raise ValueError("the ridge map has no pairs to fit (every token masked out)")
    return _Moments(n, sx, sy, xx, xy, yy)


def _mse(m: _Moments, weight: Tensor, bias: Tensor) -> float:
    """Mean over elements of (y - x W - b)^2 from the moments of (x, y)."""
    d_out = weight.shape[1]
    sq = (m.yy - 2 * float((weight * m.xy).sum()) - 2 * float(bias @ m.sy)
          + float((weight * (m.xx @ weight)).sum()) + 2 * float((m.sx @ weight) @ bias)
          + m.n * float(bias @ bias))
    return max(sq, 0.0) / (m.n * d_out)


def fit_ridge(train: BridgeData, val: BridgeData | None = None,
              lambdas: Sequence[float] = RIDGE_LAMBDAS) -> RidgeMap:
    """The ridge map z_c -> z_h on the (standardised, masked) training pairs, in closed form.

    For each lam: minimise mean ||y - x W - b||^2 + lam ||W||_F^2 over real tokens (the
    intercept unpenalised), solved once through the eigendecomposition of the centred
    covariance. With `val`, the lam of lowest held-out error is kept; without, `lambdas` must
    hold one value.
    """
    lambdas = tuple(float(v) for v in lambdas)
    if not lambdas or any(not (math.isfinite(v) and v >= 0) for v in lambdas):
        raise ValueError(f"lambdas must be finite numbers >= 0, got {lambdas}")
    if val is None and len(lambdas) != 1:
        raise ValueError(f"choosing among {len(lambdas)} penalties needs held-out pairs (val)")
    m = _moments(train)
    mx, my = m.sx / m.n, m.sy / m.n
    cov = m.xx / m.n - torch.outer(mx, mx)
    cross = m.xy / m.n - torch.outer(mx, my)
    evals, evecs = torch.linalg.eigh(cov)
    proj = evecs.T @ cross
    mv = _moments(val) if val is not None else None
    fits = []
    for lam in lambdas:
        inv = 1.0 / (evals.clamp_min(0.0) + lam)
        if not torch.isfinite(inv).all():
            raise ValueError(f"lam={lam}: the training covariance is singular; use lam > 0")
        weight = evecs @ (inv[:, None] * proj)
        bias = my - mx @ weight
        fits.append((weight, bias, _mse(mv, weight, bias) if mv is not None else None))
    best = min(range(len(fits)), key=lambda i: fits[i][2] if fits[i][2] is not None else 0.0)
    weight, bias, val_mse = fits[best]
    return RidgeMap(weight.float(), bias.float(), lambdas[best], val_mse, lambdas,
                    tuple(f[2] for f in fits) if mv is not None else (), fit_tokens=int(m.n))


class RidgeHybrid(PositionwiseHybrid):
    """The ridge control's hybrid: h_l_hat = target_std^-1(ridge(cond_std(hs[0]))), BOS pinned
    to `first_state` where given. Like DiHAL's Hybrid it offers its prediction in
    standardised units (`predict`) and the way back to the backbone's (`restore`), so that
    one pass over held-out sequences (dihal.replace.stage.held_out_scores) scores the same
    h_l_hat against the true h_l and through the upper layers."""

    def __init__(self, backbone: Backbone, layer: int, ridge: RidgeMap, cond_std: Standardizer,
                 target_std: Standardizer, first_state: Tensor | None = None) -> None:
        super().__init__(backbone, layer, ridge.raw(cond_std, target_std),
                         f"ridge (l={layer}, lam={ridge.lam:g})", first_state)
        self.ridge = ridge
        self.cond_std = cond_std
        self.target_std = target_std

    @torch.no_grad()
    def predict(self, input_ids: Tensor) -> Tensor:
        """z_hat (B, T, d): the ridge map of the standardised hs[0], in standardised units."""
        return self.ridge(self.cond_std.apply(self.backbone.embed(input_ids).float()))

    def restore(self, z: Tensor, start_pos: int = 0) -> Tensor:
        """h_l_hat: z de-standardised (the pinned state at position 0)."""
        h = self.target_std.invert(z)
        if self.first_state is not None and start_pos == 0:
            h[:, 0] = self.first_state.to(h)
        return h

    @torch.no_grad()
    def hidden(self, input_ids: Tensor, start_pos: int = 0) -> Tensor:
        """h_l_hat (B, T, d) of positions [start_pos, ...): `predict` restored (the values
        of PositionwiseHybrid.hidden with the map `ridge.raw`)."""
        return self.restore(self.predict(input_ids), start_pos)


def ridge_hybrid(backbone: Backbone, layer: int, ridge: RidgeMap, cond_std: Standardizer,
                 target_std: Standardizer, first_state: Tensor | None = None) -> RidgeHybrid:
    """The ridge control: h_l_hat = the ridge map of hs[0], in the bridge's standardisation
    (`cond_std`, `target_std` of the layer's pairs), BOS pinned as DiHAL's where given."""
    return RidgeHybrid(backbone, layer, ridge, cond_std, target_std, first_state)


# ---------------------------------------------------------------- hybrids of trained bridges


@dataclass(frozen=True)
class BuiltBridge:
    """A saved bridge (`dihal.results.TrainedBridge`) restored once on the backbone's device
    (`modules`: restore_bridge's): DiHAL's hybrid of it at any sampler K and rule (`hybrid`),
    each sharing the restored modules, so that a consumer sampling it at several K (the eval's
    rows, frontier and cost table) restores it once. The hybrids keep no state in the modules
    (the sampler's caches are made per decode)."""

    backbone: Backbone
    trained: TrainedBridge
    modules: dict

    @classmethod
    def of(cls, backbone: Backbone, trained: TrainedBridge) -> BuiltBridge:
        return cls(backbone, trained, restore_bridge(trained, device=str(backbone.device)))

    @property
    def layer(self) -> int:
        return int(self.trained.hparams.layer)

    @property
    def protocol_sampler_steps(self) -> int:
        """The sampler's K of the bridge's protocol."""
        return int(self.trained.hparams.protocol.sampler_steps)

    def hybrid(self, *, sampler_steps: int | None = None, rule: str | None = None,
               eta: float = 0.0):
        """DiHAL's hybrid at K = `sampler_steps` (default: the protocol's K) with the sampler
        `rule` (default: dihal.bridge.sampler.DEFAULT_RULE). A regression control (hparams
        objective "regression") gives the regression hybrid: its network was trained at t = 1
        only, so it is sampled in one step whatever `sampler_steps` says."""
        b, hp = self.modules, self.trained.hparams
        regression = hp.objective == "regression"
        process = (EndpointRegression if regression else BrownianBridge)(sigma=hp.protocol.sigma)
        k = 1 if regression else (sampler_steps or self.protocol_sampler_steps)
        return Hybrid(self.backbone, b["denoiser"], process, b["cond_std"], b["target_std"],
                      self.layer, sampler_steps=k, eta=eta, first_state=b["first_state"], rule=rule or DEFAULT_RULE)


def bridge_hybrid(backbone: Backbone, trained, *, sampler_steps: int | None = None,
                  rule: str | None = None, eta: float = 0.0):
    """DiHAL's hybrid of a saved bridge at one (K, rule): BuiltBridge.hybrid of the bridge
    restored for it alone (a consumer of several K builds the BuiltBridge once instead)."""
    return BuiltBridge.of(backbone, trained).hybrid(sampler_steps=sampler_steps, rule=rule, eta=eta)


def regression_hybrid(backbone: Backbone, trained):
    """The regression control's hybrid (one step from t = 1: h_l = f(c, 1, c))."""
    if trained.hparams.objective != "regression":
        raise ValueError("regression_hybrid needs a regression control (hparams objective "
                         f"'regression'), got objective {trained.hparams.objective!r}")
    return bridge_hybrid(backbone, trained)


# ---------------------------------------------------------------- measures


def held_out_nll(model: ControlModel, val_ids: Tensor,
                 reference: tuple[Tensor, Tensor] | None = None, batch_size: int = 8) -> dict:
    """The hybrid's next-token NLL (nats, mean over sequences of the per-sequence mean, as
    `dihal.replace.stage.measure_bridge` pools it) and top-1 agreement with the backbone on held-out
    sequences; the backbone's side from `reference` (top-1, NLL as the dump keeps them) or,
    without one, from the backbone's own forward pass (held_out_scores without pairs)."""
    held = held_out_scores(model, val_ids, reference, batch_size=batch_size)
    return {"hybrid_nll": held.hybrid_nll, "backbone_nll": held.backbone_nll,
            "top1_agreement": held.top1_agreement}


def fit_layer_ridge(reader, bridge: BuiltBridge, *,
                    train_pairs: Callable[[], tuple[Tensor, Tensor]]) -> RidgeMap:
    """The ridge map hs[0] -> h_l of a saved bridge's layer, fitted on its training pairs in
    the bridge's own standardisation (its cond_std, target_std; BOS masked as the bridge's
    loss masks it), the penalty chosen on the held-out pairs the bridge is measured on.
    `train_pairs()`: the layer's raw (hs[0], h_l) training pairs, built as the bridge stage
    builds them (dihal.replace.stage.train_layer)."""

    b = bridge.modules
    protocol = bridge.trained.hparams.protocol
    c, h = train_pairs()
    mask = loss_mask(c, protocol)
    zc, zh = standardise_pairs(c, h, b["cond_std"], b["target_std"], protocol)
    val, _ = held_out(reader, bridge.layer, protocol, b["cond_std"], b["target_std"])
    return fit_ridge(BridgeData(zc, zh, mask), val)


def ridge_control(backbone, reader, layer: int, protocol: BridgeProtocol, *,
                  train_ids: np.ndarray, extract: ExtractConfig,
                  log: Callable[[str], None] | None = None) -> TrainedBridge:
    """The regression control of a swept layer: the closed-form ridge map hs[0] -> h_l
    (fit_ridge) on the layer's standardised training pairs (those
    the sweep bridge of this layer kept in this process, else built as it built them), its
    penalty chosen on the held-out pairs the bridge is measured on, and measured as the bridge
    is: validation loss (its held-out error, standardised units: the regression network's t = 1
    loss), reconstruction error (||z_hat - z|| / ||z|| over the held-out tokens), the hybrid's
    NLL and top-1 agreement, the last three from one pass that maps each held-out sequence
    once (held_out_scores). At layer 3 of SmolLM2 it beat the same-budget regression network
    by 0.51 nats of hybrid NLL (benchmarks/RESULTS.md) and costs seconds, not a training."""
    import time

    t0 = time.monotonic()
    protocol = protocol.for_layer(layer)
    check_candidate(reader, layer)
    data = layer_data_for(backbone, reader, layer, protocol, train_ids=train_ids,
                          extract=extract, log=log, reuse=True)
    ridge = fit_ridge(data.train, data.val)
    first = data.first_state.to(backbone.device) if data.first_state is not None else None
    hybrid = ridge_hybrid(backbone, layer, ridge, data.cond_std, data.target_std, first)
    # one pass: each held-out sequence's h_l_hat made once, for the reconstruction error and
    # the NLL (as the bridge's, measure_bridge)
    held = held_out_scores(hybrid, data.val_ids, data.reference, val=data.val)
    m = data.val.target[data.val.mask]
    zero = float((m.double() ** 2).mean())  # the zero map's held-out error: the start a fit beats
    metrics = BridgeMetrics(
        layer=layer, val_loss=ridge.val_mse, t1_loss=ridge.val_mse, recon_error=held.recon_error,
        hybrid_nll=held.hybrid_nll, backbone_nll=held.backbone_nll,
        top1_agreement=held.top1_agreement,
        hybrid_ppl=math.exp(held.hybrid_nll), backbone_ppl=math.exp(held.backbone_nll),
        init_val_loss=zero, train_loss=None, train_steps=0,
        train_tokens=ridge.fit_tokens, seconds=round(time.monotonic() - t0, 1),
        resumed_from_step=0, denoiser_parameters=ridge.parameters)
    tensors = {"ridge.weight": ridge.weight.contiguous(), "ridge.bias": ridge.bias.contiguous(),
               "cond_std.mean": data.cond_std.mean, "cond_std.std": data.cond_std.std,
               "target_std.mean": data.target_std.mean, "target_std.std": data.target_std.std}
    if data.first_state is not None:
        tensors["first_state"] = data.first_state.detach().float().contiguous().cpu()
    hparams = BridgeHparams(layer, protocol, backbone.spec.name, backbone.weights.revision,
                            "ridge", ridge_lambda=ridge.lam, lambdas=list(ridge.lambdas),
                            val_mses=list(ridge.val_mses))
    return TrainedBridge(tensors, hparams, metrics)
