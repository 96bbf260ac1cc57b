"""Replace: train a bridge c = hs[0] -> h_l for one candidate layer under the fixed protocol,
and measure its bridgeability (docs/method.md §2).

Position 0 [ours]: every sequence starts with BOS, so h_l at position 0 is one constant vector
of the backbone (the attention-sink state, with massive activations). It is excluded from the
standardisation statistics and the loss (its standardised target is set to 0, so the huge
value never enters the denoiser), and the hybrid pins it to the backbone's own value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from dihal.bridge import (
    REGRESSION_T_GRID,
    BridgeData,
    BrownianBridge,
    CausalDenoiser,
    EndpointRegression,
    Standardizer,
    build_denoiser,
    reconstruction_error,
    train_bridge,
    validation_loss,
)
from dihal.bridge.denoiser import denoiser_config_of
from dihal.bridge.measures import ReconstructionPool
from dihal.bridge.sampler import DEFAULT_RULE, draws_noise
from dihal.bridge.train import loop_config, sample_budget
from dihal.config import MIN_SWEPT_LAYERS, BridgeProtocol, ExtractConfig  # noqa: F401
from dihal.errors import LayerIndexError, TooFewError
from dihal.locate.extract import layer_pairs
from dihal.replace.hybrid import Hybrid, next_token_nll, top1_agreement
from dihal.results import BridgeHparams, TrainedBridge
from dihal.rows import BridgeMetrics
from dihal.seeds import derive_seed


def default_sweep_layers(n_layers: int, count: int = 10) -> list[int]:
    """Candidate layers for a budget-limited sweep: 1, 2, 3, then evenly spaced to N-1."""
    candidates = list(range(1, n_layers))
    if count >= len(candidates):
        return candidates
    head = candidates[:3]
    rest = np.linspace(4, n_layers - 1, count - len(head)).round().astype(int).tolist()
    return sorted(set(head + rest))


def default_seed_layers(swept: list[int], count: int = 4) -> list[int]:
    """The swept layers that get replicate seeds where only `count` of them can: evenly spaced
    over the sorted swept layers, the first and the last included (all of them where there are
    no more than `count`)."""
    layers = sorted(set(swept))
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    if count >= len(layers):
        return layers
    idx = np.linspace(0, len(layers) - 1, count).round().astype(int)
    return [layers[i] for i in sorted(set(idx.tolist()))]


@dataclass
class LayerData:
    layer: int
    train: BridgeData | None  # None where only the held-out pairs are needed
    val: BridgeData
    cond_std: Standardizer
    target_std: Standardizer
    val_ids: torch.Tensor  # (n_val, T) the held-out tokens
    first_state: torch.Tensor | None  # raw h_l at position 0 (BOS), pinned in the hybrid
    # the backbone's own (top-1 (n_val, T), next-token NLL (n_val, T-1)) on val_ids, from the
    # dump (held_out_reference); None: measure_bridge runs the backbone itself
    reference: tuple[torch.Tensor, torch.Tensor] | None = None


def check_candidate(reader, layer: int) -> None:
    n_layers = reader.n_layers()
    if not 1 <= layer <= n_layers - 1:

        raise LayerIndexError(f"layer {layer} is not a candidate: this dump has layers 1..{n_layers - 1}")


def stored_pairs(reader, split: str, layer: int, n: int | None = None):
    c = torch.from_numpy(np.asarray(reader.layer(split, 0)[:n], dtype=np.float32))
    h = torch.from_numpy(np.asarray(reader.layer(split, layer)[:n], dtype=np.float32))
    return c, h


def load_layer_data(reader, layer: int, protocol: BridgeProtocol,
                    train_pairs: tuple[torch.Tensor, torch.Tensor]) -> LayerData:
    """Standardised (c, h_l) pairs: `train_pairs` (from the dump or extract.layer_pairs;
    standardised in place, so the caller should not keep them), and held-out sequences from
    the dump (`layer` checked by the caller: check_candidate)."""
    c_tr, h_tr = train_pairs
    first_state = None
    if protocol.pin_first:
        first_state = h_tr[0, 0].clone()
        spread = (h_tr[:, 0] - first_state).abs().max().item()
        scale = first_state.abs().max().item()
        if spread > 1e-2 * max(scale, 1.0):
            raise ValueError(
                f"h_{layer} at position 0 differs between sequences (max diff {spread:.3g}): "
                "sequences do not all start with the same BOS token; set pin_first=False."
            )
    m_tr = loss_mask(c_tr, protocol)
    cond_std = Standardizer.fit(c_tr, m_tr)
    target_std = Standardizer.fit(h_tr, m_tr)
    zc_tr, zh_tr = standardise_pairs(c_tr, h_tr, cond_std, target_std, protocol)
    val, val_ids = held_out(reader, layer, protocol, cond_std, target_std)
    return LayerData(layer=layer, train=BridgeData(zc_tr, zh_tr, m_tr), val=val, cond_std=cond_std,
                     target_std=target_std, val_ids=val_ids, first_state=first_state,
                     reference=held_out_reference(reader, protocol))


def loss_mask(x: torch.Tensor, protocol: BridgeProtocol) -> torch.Tensor:
    m = torch.ones(x.shape[:2], dtype=torch.bool)
    if protocol.pin_first:
        m[:, 0] = False
    return m


def standardise_pairs(c, h, cond_std: Standardizer, target_std: Standardizer,
                 protocol: BridgeProtocol):
    """In place: the pairs of a large backbone are not copied."""
    zc, zh = cond_std.apply_(c), target_std.apply_(h)
    if protocol.pin_first:
        zc[:, 0] = 0.0
        zh[:, 0] = 0.0
    return zc, zh


def require_held_out(reader, protocol: BridgeProtocol) -> None:
    """A TooFewError where the dump holds fewer held-out sequences than eval_sequences asks
    for: a bridge is measured on what its protocol says, never on fewer."""
    have = reader.shape("val")[1]
    if have < protocol.eval_sequences:
        raise TooFewError(
            f"eval_sequences {protocol.eval_sequences}: the dump holds {have} held-out (val) "
            f"sequences. Lower eval_sequences to at most {have}, or raise sequences.n_val to "
            f"at least {protocol.eval_sequences} (then make the sequences and the dump again)")


def held_out(reader, layer: int, protocol: BridgeProtocol, cond_std: Standardizer,
             target_std: Standardizer) -> tuple[BridgeData, torch.Tensor]:
    """The first `protocol.eval_sequences` held-out sequences as standardised (c, h_l) pairs,
    and their tokens (require_held_out: all of them there)."""
    require_held_out(reader, protocol)
    c_va, h_va = stored_pairs(reader, "val", layer, protocol.eval_sequences)
    zc, zh = standardise_pairs(c_va, h_va, cond_std, target_std, protocol)
    ids = np.asarray(reader.input_ids("val")[: protocol.eval_sequences], dtype=np.int64)
    return BridgeData(zc, zh, loss_mask(c_va, protocol)), torch.from_numpy(ids)


def held_out_reference(reader, protocol: BridgeProtocol) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The backbone's next-token reference on the held-out sequences `held_out` returns, as
    the dump keeps it (top-1 tokens, next-token NLL); None for a dump without one."""
    ref = reader.reference("val", protocol.eval_sequences)
    if ref is None:
        return None
    top, nll = (torch.from_numpy(np.asarray(a)) for a in ref)
    return top.long(), nll.double()


def train_config_of(protocol: BridgeProtocol, device: str, regression: bool = False):
    """The loop's config: the protocol's, validated at t = 1 for the regression control."""
    from dataclasses import replace

    tcfg = loop_config(protocol, device)
    return replace(tcfg, val_t_grid=REGRESSION_T_GRID) if regression else tcfg


def train_layer_bridge(
    data: LayerData,
    protocol: BridgeProtocol,
    ckpt_dir: Path,
    *,
    device: str = "cpu",
    progress: Callable[[dict], None] | None = None,
    regression: bool = False,
    warn: Callable[[str], None] | None = None,
):
    """Build the protocol's denoiser (seeded the same for every layer), measure its validation
    loss at initialisation, and train it; resumes from ckpt_dir. With `regression`, the same
    network, loss and budget trained only at t = 1 (EndpointRegression: h_l from c directly).
    `warn` gets the reason a damaged checkpoint is passed over (train_model's). Returns (denoiser, TrainResult, validation loss at initialisation)."""
    cfg = denoiser_config_of(protocol, data.train.dim, data.train.seq_len)
    denoiser = build_denoiser(cfg, seed=derive_seed(protocol.seed, "denoiser-init")).to(device)
    process = (EndpointRegression if regression else BrownianBridge)(sigma=protocol.sigma)
    tcfg = train_config_of(protocol, device, regression)
    init_val_loss = validation_loss(denoiser, data.val, process, tcfg.val_t_grid, seed=protocol.seed)
    result = train_bridge(denoiser, data.train, data.val, process, tcfg, Path(ckpt_dir),
                          progress=progress, warn=warn)
    return denoiser, result, init_val_loss


@torch.no_grad()
def measure_bridge(backbone, denoiser, data: LayerData, protocol: BridgeProtocol,
                    batch_size: int = 8, val_loss: float | None = None,
                    rule: str | None = None) -> dict:
    """Bridgeability of one layer: validation loss (fixed t grid and noise, standardised
    units; `val_loss` when the trainer already measured it), the same loss at t = 1 alone
    (`t1_loss`), full-sampler relative
    reconstruction error, and the hybrid's next-token NLL and top-1 agreement with the
    backbone on held-out text. The backbone's side (its top-1 tokens and NLL) is
    `data.reference`, kept by the dump from its own forward pass; without one, the backbone
    runs here. `rule`: the sampler's update rule (default: dihal.bridge.sampler.DEFAULT_RULE).

    The reconstruction error and the NLL come from one sampling pass (held_out_scores): h_l of
    each held-out sequence is sampled once, from the hybrid's own condition (the tokens'
    embedding, standardised, which the dump stores rounded to its dtype), compared with the
    true h_l and run through the upper layers. Where the sampler draws noise (the
    marginal rule with K > 1), reconstruction_error keeps its own noise stream and samples
    again, so both numbers stay those of their own definitions."""

    rule = rule or DEFAULT_RULE
    process = BrownianBridge(sigma=protocol.sigma)
    denoiser.eval()
    if val_loss is None:
        val_loss = validation_loss(denoiser, data.val, process, seed=protocol.seed)
    # the error at t = 1, where x_t is the condition alone: what the sampler's first step
    # must predict (validation loss averages t in 0.1..0.9, where x_t still carries most of
    # the target); a regression control's validation loss is this same number
    t1_loss = validation_loss(denoiser, data.val, process, REGRESSION_T_GRID, seed=protocol.seed)
    hybrid = Hybrid(backbone, denoiser, process, data.cond_std, data.target_std, data.layer,
                    sampler_steps=protocol.sampler_steps, first_state=data.first_state, rule=rule,
                    noise_seed=protocol.seed)
    one_pass = not draws_noise(rule, protocol.sampler_steps)
    held = held_out_scores(hybrid, data.val_ids, data.reference, val=data.val if one_pass else None,
                           batch_size=batch_size, per_sequence=True)
    recon = held.recon_error if one_pass else reconstruction_error(
        denoiser, data.val, process, steps=protocol.sampler_steps, seed=protocol.seed, rule=rule)
    return {"val_loss": val_loss, "t1_loss": t1_loss, "recon_error": recon,
            "hybrid_nll": held.hybrid_nll, "backbone_nll": held.backbone_nll,
            "top1_agreement": held.top1_agreement, "hybrid_ppl": math.exp(held.hybrid_nll),
            "backbone_ppl": math.exp(held.backbone_nll), **split_halves(list(held.per_sequence))}


@dataclass(frozen=True)
class HeldOutScores:
    """A hybrid measured on held-out sequences: its next-token NLL (nats, pooled as
    measure_bridge reports it), the backbone's, the top-1 agreement with the backbone, each
    sequence's mean NLL in order (empty where not asked for) and the reconstruction error of
    the same samples of h_l (None where not asked for)."""

    hybrid_nll: float
    backbone_nll: float
    top1_agreement: float
    per_sequence: tuple[float, ...] = ()
    recon_error: float | None = None


@torch.no_grad()
def held_out_scores(model, val_ids: torch.Tensor,
                    reference: tuple[torch.Tensor, torch.Tensor] | None = None, *,
                    val: BridgeData | None = None, batch_size: int = 8,
                    per_sequence: bool = False) -> HeldOutScores:
    """One pass over the held-out sequences `val_ids` (n, T), `batch_size` at a time: the
    hybrid's logits scored on the next tokens and against the backbone's side (`reference`:
    its top-1 tokens and NLL as the dump keeps them; None: the backbone runs here).

    Without `val`, the logits are `model.logits(ids)` (any ControlModel). With `val`, the
    standardised (c, h_l) pairs of the same sequences, the model's prediction of h_l is
    made once per batch (`model.predict(ids)`, standardised units, as Hybrid and the ridge
    hybrid make it), pooled against val's h_l into the reconstruction error
    (ReconstructionPool, summed in the blocks reconstruction_error sums) and, restored
    (`model.restore`), run through the upper layers: the logits are `model.logits(ids)`'s.
    Where the prediction draws no noise, the reconstruction error is reconstruction_error's
    on pairs whose condition is the hybrid's own (hs[0] = the embedding, standardised), to
    the bit where the denoiser's rows round alike in a batch of `batch_size` and in one of
    32. A dump stores hs[0] in its storage dtype: on a float16 dump the stored condition is
    the hybrid's rounded, and the two reconstruction errors differ by what that rounding
    moves."""
    if val is not None and (len(val), val.seq_len) != tuple(val_ids.shape):
        raise ValueError(f"the held-out pairs ({len(val)} x {val.seq_len}) are not the "
                         f"held-out sequences ({tuple(val_ids.shape)}): measure both from the "
                         "same held_out() call")
    backbone = model.backbone
    pool = ReconstructionPool() if val is not None else None
    nll_h = nll_b = agree = 0.0
    n = 0
    each: list[float] = []
    for lo in range(0, len(val_ids), batch_size):
        ids = val_ids[lo : lo + batch_size].to(backbone.device)
        w = ids.shape[0]
        if pool is None:
            lh = model.logits(ids).float()
        else:
            z = model.predict(ids)
            mask = None if val.mask is None else val.mask[lo : lo + w].to(z.device)
            pool.add(z, val.target[lo : lo + w].to(z.device), mask)
            lh = backbone.run_upper(model.restore(z), model.layer).float()
        if reference is None:
            lb = backbone.model(ids).logits.float()
            nll_b += next_token_nll(lambda _, x=lb: x, ids) * w
            top_b = lb.argmax(-1)
        else:
            nll_b += float(reference[1][lo : lo + w].mean()) * w
            top_b = reference[0][lo : lo + w]
        nll_h += next_token_nll(lambda _, x=lh: x, ids) * w
        if per_sequence:
            each += sequence_nll(lh, ids)
        agree += top1_agreement(lh, top_b) * w
        n += w
    if n == 0:
        raise ValueError("held-out scores need at least one held-out sequence")
    return HeldOutScores(nll_h / n, nll_b / n, agree / n, tuple(each),
                         pool.value() if pool is not None else None)


def sequence_nll(logits: torch.Tensor, ids: torch.Tensor) -> list[float]:
    """The mean next-token NLL (nats) of each sequence of a batch (tokens 1..T-1)."""
    import torch.nn.functional as F

    lp = logits[:, :-1].float()
    nll = F.cross_entropy(lp.flatten(0, 1), ids[:, 1:].to(lp.device).flatten(), reduction="none")
    return nll.view(ids.shape[0], -1).mean(dim=1).tolist()


def split_halves(per_sequence: list[float]) -> dict:
    """The hybrid NLL on each half of the held-out sequences: the first half selects the
    oracle and the worst layer (`hybrid_nll_select`), the second half, which that choice
    never saw, judges them (`hybrid_nll_judge`); None with fewer than 2 sequences."""
    half = len(per_sequence) // 2
    if half < 1:
        return {"hybrid_nll_select": None, "hybrid_nll_judge": None}
    return {"hybrid_nll_select": float(np.mean(per_sequence[:half])),
            "hybrid_nll_judge": float(np.mean(per_sequence[half:]))}


# The standardised pairs of the last bridge trained with keep_pairs, for its regression control
# in the same process (a sweep partition's run: bridge, then control): at most one layer's
# pairs are held at a time (a bridge trained next releases them)
_KEPT: dict[tuple, LayerData] = {}


def _pairs_key(backbone, reader, layer: int, protocol: BridgeProtocol, train_ids: np.ndarray,
               extract: ExtractConfig) -> tuple:
    """Everything LayerData depends on: the weights, the dump, the layer, the training tokens,
    how they were run (dtype, batch) and the protocol's data fields (pin_first,
    eval_sequences). The denoiser, objective and budget do not enter."""
    import hashlib

    ids = np.ascontiguousarray(train_ids)
    where = getattr(reader, "directory", None)
    return (backbone.weights.revision, str(where) if where is not None else id(reader), layer,
            protocol.pin_first, protocol.eval_sequences, ids.shape,
            hashlib.sha256(ids.tobytes()).hexdigest(), extract.dtype, extract.batch_size,
            "train" in reader.splits)


def layer_data_for(backbone, reader, layer: int, protocol: BridgeProtocol, *,
                   train_ids: np.ndarray, extract: ExtractConfig,
                   log: Callable[[str], None] | None = None, reuse: bool = False) -> LayerData:
    """The layer's standardised training and held-out pairs: from the dump where it stored the
    training split, else computed with the backbone's first `layer` blocks. With `reuse`, the
    pairs a bridge kept (train_layer keep_pairs) for the same key are taken instead (and
    released): a sweep partition builds its 1M-token pairs once for the bridge and its
    regression control."""

    require_held_out(reader, protocol)  # before the pairs are computed
    key = _pairs_key(backbone, reader, layer, protocol, train_ids, extract)
    kept = _KEPT.pop(key, None) if reuse else None
    if kept is not None:
        if log:
            log(f"layer {layer}: the training pairs of the bridge just trained, reused")
        return kept
    if "train" in reader.splits:
        pairs = stored_pairs(reader, "train", layer)
    else:
        pairs = layer_pairs(backbone, train_ids, layer, extract, progress=log)
    return load_layer_data(reader, layer, protocol, pairs)


def train_layer(backbone, reader, layer: int, protocol: BridgeProtocol, ckpt_dir: Path, *,
                train_ids: np.ndarray, extract: ExtractConfig, device: str = "cpu",
                progress: Callable[[dict], None] | None = None,
                log: Callable[[str], None] | None = None, regression: bool = False,
                warn: Callable[[str], None] | None = None,
                keep_pairs: bool = False) -> TrainedBridge:
    """The bridge stage (sweep partitions, the bridge at l*, full training): the training pairs
    from the dump of `reader`, or, where it did not store the training split, computed for
    `train_ids` with the backbone's first `layer` blocks (as the dump was made, under
    `extract`); train a bridge hs[0] -> h_layer under `protocol` (resuming from `ckpt_dir`),
    measure its bridgeability and package it for saving. With `regression`: the regression
    control instead (train_layer_bridge; `protocol.sampler_steps` must then be 1), on the pairs a
    bridge of the same layer kept (`keep_pairs`) where there are any (layer_data_for). `warn`
    gets the reason a damaged checkpoint is passed over (default: a RuntimeWarning)."""
    protocol = protocol.for_layer(layer)  # `seeds` only where seed_layers is empty or names it
    if regression and protocol.sampler_steps != 1:
        raise ValueError(f"the regression control predicts in one step: steps must be 1, got "
                         f"{protocol.sampler_steps}")
    import time

    t0 = time.monotonic()
    check_candidate(reader, layer)
    if not regression:
        _KEPT.clear()  # a bridge releases what an earlier one kept
    data = layer_data_for(backbone, reader, layer, protocol, train_ids=train_ids,
                          extract=extract, log=log, reuse=regression)
    denoiser, result, init_val_loss = train_layer_bridge(data, protocol, ckpt_dir, device=device,
                                                         progress=progress, regression=regression,
                                                         warn=warn)
    measured = measure_bridge(backbone, denoiser.to(backbone.device), data, protocol,
                               val_loss=result.val_loss)
    tcfg = train_config_of(protocol, device, regression)
    metrics = BridgeMetrics(
        layer=layer, **measured, init_val_loss=init_val_loss, train_loss=result.train_loss,
        train_steps=result.step,
        train_tokens=sample_budget(len(data.train), tcfg) * data.train.seq_len,
        seconds=round(time.monotonic() - t0, 1), resumed_from_step=result.resumed_from,
        denoiser_parameters=denoiser.param_count())
    replicates = [] if regression else [
        _seed_replicate(backbone, data, protocol, i, Path(ckpt_dir), device=device,
                        progress=progress, warn=warn) for i in range(1, protocol.seeds)]
    tensors = {f"denoiser.{k}": v.detach().contiguous().cpu() for k, v in denoiser.state_dict().items()}
    tensors.update({"cond_std.mean": data.cond_std.mean, "cond_std.std": data.cond_std.std,
                    "target_std.mean": data.target_std.mean, "target_std.std": data.target_std.std})
    if data.first_state is not None:
        tensors["first_state"] = data.first_state.detach().float().contiguous().cpu()
    hparams = BridgeHparams(layer, protocol, backbone.spec.name, backbone.weights.revision,
                            "regression" if regression else None,
                            denoiser_config=denoiser.cfg, train_config=tcfg)
    if keep_pairs and not regression:
        _KEPT[_pairs_key(backbone, reader, layer, protocol, train_ids, extract)] = data
    return TrainedBridge(tensors, hparams, metrics, result.curve, seed_metrics=replicates)


def replicate_seed(protocol: BridgeProtocol, i: int) -> int:
    """The training seed of the i-th replicate (i >= 1; 0 is the protocol's own seed)."""
    return protocol.seed if i == 0 else derive_seed(protocol.seed, "training-seed", i) % 2**31


def _seed_replicate(backbone, data: LayerData, protocol: BridgeProtocol, i: int, ckpt_dir: Path,
                    *, device: str, progress, warn) -> BridgeMetrics:
    """The bridge of the same layer, data and protocol trained again under replicate seed i
    (its own checkpoints beside the kept bridge's, resumable), measured alike; not kept."""
    import time
    from dataclasses import replace

    t0 = time.monotonic()
    proto = replace(protocol, seed=replicate_seed(protocol, i), seeds=1)
    denoiser, result, init = train_layer_bridge(
        data, proto, ckpt_dir.parent / f"{ckpt_dir.name}_seed{i}", device=device,
        progress=progress, warn=warn)
    measured = measure_bridge(backbone, denoiser.to(backbone.device), data, proto,
                              val_loss=result.val_loss)
    return BridgeMetrics(
        layer=data.layer, **measured, init_val_loss=init, train_loss=result.train_loss,
        train_steps=result.step,
        train_tokens=sample_budget(len(data.train), train_config_of(proto, device)) * data.train.seq_len,
        seconds=round(time.monotonic() - t0, 1), resumed_from_step=result.resumed_from,
        denoiser_parameters=denoiser.param_count())


def restore_bridge(trained: TrainedBridge, device: str = "cpu") -> dict:
    """The modules of a saved bridge: {"denoiser", "cond_std", "target_std", "first_state",
    "hparams"}."""

    t = trained.tensors
    model = CausalDenoiser(trained.hparams.denoiser_config)
    model.load_state_dict({k[len("denoiser."):]: v for k, v in t.items() if k.startswith("denoiser.")})
    return {"denoiser": model.to(device).eval(),
            "cond_std": Standardizer(t["cond_std.mean"], t["cond_std.std"]),
            "target_std": Standardizer(t["target_std.mean"], t["target_std.std"]),
            "first_state": t.get("first_state"), "hparams": trained.hparams}
