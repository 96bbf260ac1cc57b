"""The budget study: is it the method or the budget? (pure compute, no Dagster)

At the sweep's budget (one pass, 128 steps by default) the ridge map beats every bridge. The
study trains the bridge, the network control and (given a factory) the ridge-started residual
bridge at several budgets of optimiser steps, fits the ridge map on the same tokens, and
measures each as the sweep does (`measure_bridge`, same held-out sequences); the backbone's
NLL is the floor. Its rows are `BudgetPoint`s.

Where the tokens come from (the pieces, in order):
- `training_sequences`: the corpus packed again by the Sequences stage's own code
  (`dihal.locate.corpus.pack_sequences`, same tokenizer, document split, length and
  per-document cap), asking for as many training sequences as the largest budget consumes.
  Packing is continuous, so the first `n_train` of them are the sweep's, and every one after
  them is fresh; the held-out documents never enter (the split is by document, and
  `check_fresh` refuses any training sequence equal to a held-out one). Where the corpus holds
  fewer, all of them are taken and the budget repeats them (`plan_budget`: how often).
- `layer_pairs_for_budget`: the (hs[0], h_l) pairs of those sequences, the sweep's read from the
  dump where it stored them, the others computed as needed, not stored: by the backbone's own
  forward stopped after block l (`dihal.locate.extract.layer_pairs`, rounded through the
  dump's dtype as a dump would store them), chunk by chunk into one buffer, in host memory
  only for the layer being studied and only as many as its largest unfinished budget needs.
  Standardised with the sweep bridge's own statistics (`load_layer_data`): every budget's
  losses share one set of units, and one pass over the sweep's sequences (128 steps by
  default) reproduces the sweep's bridge exactly. A budget trains on a view of the first.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from dihal.bridge import BrownianBridge, train_bridge
from dihal.bridge.data import BridgeData
from dihal.bridge.denoiser import denoiser_config_of
from dihal.bridge.train import loop_config
from dihal.config import (
    MAX_TRAIN_STEPS,
    TRAIN_STEPS_WHY,
    BridgeProtocol,
    BudgetConfig,
    BudgetGenerationConfig,
    ExtractConfig,
    SequenceConfig,
)
from dihal.errors import CorpusError, LayerIndexError
from dihal.locate.corpus import document_lengths, pack_sequences, sequence_capacity
from dihal.locate.documents import Document
from dihal.locate.extract import layer_pairs
from dihal.net_configs import DenoiserConfig
from dihal.replace.control_hybrids import RidgeMap, fit_ridge, held_out_nll, ridge_hybrid
from dihal.replace.hybrid import next_token_nll
from dihal.replace.stage import (
    LayerData,
    check_candidate,
    load_layer_data,
    loss_mask,
    measure_bridge,
    require_held_out,
    standardise_pairs,
    stored_pairs,
    train_config_of,
    train_layer_bridge,
)
from dihal.rows import BUDGET_MODELS, BudgetPoint
from dihal.seeds import derive_seed
from dihal.training import sample_order, total_steps


def quiet(_message: str) -> None:
    """The default progress callback: says nothing."""


TRAINED_MODELS = ("bridge", "network", "residual")  # trained for `steps` optimiser steps
CPU_BUDGETS = (128, 512, 2048)  # the sweep's budget, 4x and 16x
GPU_BUDGETS = (128, 512, 2048, 8192)


def _distinct_ints(obj, name: str, minimum: int, maximum: int | None = None) -> None:
    v = getattr(obj, name)
    v = tuple(v) if isinstance(v, tuple | list) else None
    if (not v or len(set(v)) != len(v) or not all(
            isinstance(x, int) and not isinstance(x, bool) and x >= minimum for x in v)
            or (maximum is not None and max(v) > maximum)):
        limit = f", each at most {maximum:,} ({TRAIN_STEPS_WHY})" if maximum else ""
        raise ValueError(f"{type(obj).__name__}.{name} must be a non-empty tuple of distinct "
                         f"ints >= {minimum}{limit}, got {getattr(obj, name)!r}")
    object.__setattr__(obj, name, tuple(sorted(v)))  # a run config's list -> a sorted tuple


@dataclass(frozen=True)
class BudgetStudyConfig:
    """Which layers, which budgets (optimiser steps of each trained model), and whether the
    ridge-started residual bridge is trained too (it needs a residual_factory)."""

    layers: tuple[int, ...] = (1, 2, 3)
    budgets: tuple[int, ...] = CPU_BUDGETS
    residual: bool = True

    def __post_init__(self) -> None:
        _distinct_ints(self, "layers", 1)
        _distinct_ints(self, "budgets", 1, MAX_TRAIN_STEPS)
        if not isinstance(self.residual, bool):
            raise ValueError(f"BudgetStudyConfig.residual must be True or False, got "
                             f"{self.residual!r}")

    @property
    def trained(self) -> tuple[str, ...]:
        """The models trained at each budget."""
        return TRAINED_MODELS if self.residual else TRAINED_MODELS[:2]


def default_study_layers(l_star: int, n_layers: int) -> tuple[int, ...]:
    """The study's layers by default: l*, one more shallow layer (layer 1, or 2 where l* is
    1), the middle candidate and the last, distinct and in order (`n_layers` decoder blocks:
    candidates 1..n_layers - 1)."""
    last = n_layers - 1
    if not 1 <= l_star <= last:
        raise LayerIndexError(f"l* = {l_star} is not a candidate of a backbone with {n_layers} "
                              f"layers (1..{last})")
    shallow = 2 if l_star == 1 else 1
    return tuple(sorted({l_star, min(shallow, last), max(1, n_layers // 2), last}))


# ---------------------------------------------------------------- plan and estimate


@dataclass(frozen=True)
class BudgetPlan:
    """What one budget trains on: the first `sequences` training sequences, `epochs` passes."""

    train_steps: int
    sequences: int  # distinct training sequences (fresh where the corpus holds them)
    epochs: float  # steps * batch_size / sequences
    tokens: int  # steps * batch_size * seq_len
    distinct_tokens: int  # sequences * seq_len

    @property
    def repeats(self) -> float:
        """How often each training token is seen (1: every token fresh)."""
        return self.tokens / self.distinct_tokens


def plan_budget(steps: int, batch_size: int, seq_len: int, available: int | None) -> BudgetPlan:
    """The budget's sequences: steps x batch_size of them, fresh, where the corpus holds that
    many (`available`; None: unbounded), else all `available`, repeated."""
    want = steps * batch_size
    n = want if available is None else min(want, available)
    if n < 1:
        raise ValueError(f"no training sequence for a budget of {steps} steps (available {available})")
    return BudgetPlan(steps, n, want / n, want * seq_len, n * seq_len)


# ---------------------------------------------------------------- training tokens


@dataclass(frozen=True, eq=False)
class TrainingTokens:
    """The study's training sequences: ids (n, T), the first `sweep` of them the sweep's."""

    ids: np.ndarray  # (n, T) int64
    doc_ids: list[list[str]]  # the documents each sequence holds
    held_out_docs: frozenset[str]  # the held-out sequences' documents (as packed again)
    sweep: int  # the Sequences stage's n_train: its training sequences come first
    capacity: int  # training sequences the corpus holds in all

    def __post_init__(self) -> None:
        if shared := set().union(*map(set, self.doc_ids)) & self.held_out_docs:
            raise CorpusError(f"training sequences hold held-out documents {sorted(shared)[:3]}: "
                              "the split must be by document; make the sequences again")


def corpus_capacity(documents: Iterable[Document], tokenizer, seq: SequenceConfig,
                    wanted: int) -> int:
    """Training sequences of `seq` the documents fill (read only until `wanted` are sure)."""
    lengths = document_lengths(documents, tokenizer, replace(seq, n_train=max(wanted, seq.n_train)))
    return sequence_capacity(lengths["train"], seq.seq_len, seq.max_tokens_per_doc)


def training_sequences(documents: Callable[[], Iterable[Document]], tokenizer,
                       seq: SequenceConfig, wanted: int, *, bos_id: int,
                       eos_id: int) -> TrainingTokens:
    """min(wanted, what the corpus holds) training sequences, packed as the Sequences stage
    packs them under `seq` (its config): the first seq.n_train are the sweep's, the rest fresh.
    `documents()` streams the corpus again at each call (dihal.locate.corpus.corpus_documents):
    once to count, once to pack."""
    capacity = corpus_capacity(documents(), tokenizer, seq, wanted)
    if capacity < seq.n_train:
        raise CorpusError(f"the corpus holds {capacity} training sequences, fewer than the "
                          f"sweep's {seq.n_train}: it changed since the sequences were made")
    n = max(seq.n_train, min(wanted, capacity))
    packed = pack_sequences(documents(), tokenizer, replace(seq, n_train=n), bos_id=bos_id,
                            eos_id=eos_id)
    return TrainingTokens(np.asarray(packed["train"].input_ids, dtype=np.int64),
                          packed["train"].doc_ids,
                          frozenset(d for ds in packed["val"].doc_ids for d in ds),
                          seq.n_train, capacity)


def study_sequences(documents: Callable[[], Iterable[Document]], tokenizer, seq: SequenceConfig,
                    made: dict[str, np.ndarray], budgets: Iterable[int], batch_size: int, *,
                    bos_id: int, eos_id: int) -> TrainingTokens:
    """The training sequences of a study up to its largest budget (training_sequences), checked
    against the Sequences stage's own (`made`: its "train" and "val" token ids): the first of
    them must be its training sequences (the same corpus, cut alike), and none a held-out
    one."""
    tokens = training_sequences(documents, tokenizer, seq, max(budgets) * batch_size,
                                bos_id=bos_id, eos_id=eos_id)
    if not np.array_equal(tokens.ids[: len(made["train"])], made["train"]):
        raise CorpusError("the corpus packs into other training sequences than the Sequences "
                          "stage made: materialise the sequences again")
    check_fresh(tokens.ids, np.asarray(made["val"]))
    return tokens


def check_fresh(train_ids: np.ndarray, held_out_ids: np.ndarray) -> None:
    """CorpusError where a training sequence equals a held-out one (the held-out sequences
    must never enter training)."""
    held = {bytes(np.ascontiguousarray(r, dtype=np.int64)) for r in held_out_ids}
    hits = [i for i, r in enumerate(train_ids) if bytes(np.ascontiguousarray(r, np.int64)) in held]
    if hits:
        raise CorpusError(f"training sequences {hits[:5]} equal held-out sequences: the training "
                          "tokens must come from the training documents only")


def distinct_rows(ids: np.ndarray) -> int:
    """How many different sequences (rows) `ids` holds."""
    return int(np.unique(ids, axis=0).shape[0]) if len(ids) else 0


# ---------------------------------------------------------------- a layer's pairs

PAIR_CHUNK = 256  # sequences computed at a time (layer_pairs' own buffer is this size)


def _stored_prefix(reader, ids: np.ndarray) -> int:
    """How many leading sequences of `ids` the dump stored (its training split, same ids)."""
    if "train" not in reader.splits:
        return 0
    dump = np.asarray(reader.input_ids("train"))
    k = min(len(dump), len(ids))
    return k if np.array_equal(dump[:k], ids[:k]) else 0


def layer_pairs_for_budget(backbone, reader, layer: int, protocol: BridgeProtocol,
                           tokens: TrainingTokens, n_seq: int, extract: ExtractConfig,
                           say: Callable[[str], None] = quiet) -> LayerData:
    """The layer's standardised training pairs of the first n_seq sequences of `tokens` (at
    least the sweep's, so that the standardisation is always the sweep bridge's) and the
    held-out pairs (`dihal.replace.stage.load_layer_data`). Read from the dump where it
    stored them; computed as needed, not stored, for the others."""
    check_candidate(reader, layer)
    require_held_out(reader, protocol)
    n_seq = max(n_seq, min(tokens.sweep, len(tokens.ids)))
    if n_seq > len(tokens.ids):
        raise ValueError(f"{n_seq} sequences asked of {len(tokens.ids)} training sequences")
    ids = tokens.ids[:n_seq]
    check_fresh(ids, np.asarray(reader.input_ids("val")))
    d = backbone.hidden_size
    c = torch.empty((n_seq, ids.shape[1], d), dtype=torch.float32)
    h = torch.empty_like(c)
    stored = _stored_prefix(reader, ids)
    if stored:
        c[:stored], h[:stored] = stored_pairs(reader, "train", layer, stored)
    t0 = time.monotonic()
    for lo in range(stored, n_seq, PAIR_CHUNK):
        hi = min(lo + PAIR_CHUNK, n_seq)
        c[lo:hi], h[lo:hi] = layer_pairs(backbone, ids[lo:hi], layer, extract)
        say(f"layer {layer}: training pairs {hi}/{n_seq} ({stored} from the dump, "
            f"{time.monotonic() - t0:.0f} s)")
    n_std = min(tokens.sweep, n_seq)
    data = load_layer_data(reader, layer, protocol, (c[:n_std], h[:n_std]))  # in place
    if n_seq > n_std:
        standardise_pairs(c[n_std:], h[n_std:], data.cond_std, data.target_std, protocol)
    return replace(data, train=BridgeData(c, h, loss_mask(c, protocol)))


def budget_data(data: LayerData, n_seq: int) -> LayerData:
    """The layer's data with its first n_seq training sequences (views, not copies)."""
    t = data.train
    return replace(data, train=BridgeData(t.cond[:n_seq], t.target[:n_seq], t.mask[:n_seq]))


def study_protocol(swept: dict, cfg: BudgetConfig | BudgetGenerationConfig) -> BridgeProtocol:
    """A sweep bridge's protocol (`swept`: its stored config) as the study trains it: one
    training seed, measured (the study) or sampled (its generation) at cfg's `eval_sequences`
    and `sampler_steps` where set. Neither changes what is trained."""
    protocol = replace(BridgeProtocol(**swept), seeds=1, seed_layers=())
    return replace(protocol, **{k: v for k in ("eval_sequences", "sampler_steps")
                                if (v := getattr(cfg, k, None)) is not None})


def budget_protocol(protocol: BridgeProtocol, layer: int, plan: BudgetPlan) -> BridgeProtocol:
    """The sweep's protocol at this layer, one seed, with epochs such that the loop takes
    exactly plan.train_steps optimiser steps over plan.sequences sequences."""
    p = replace(protocol.for_layer(layer), seeds=1,
                epochs=plan.train_steps * protocol.batch_size / plan.sequences)
    got = total_steps(plan.sequences, loop_config(p, "cpu"))
    if got != plan.train_steps:
        raise ValueError(f"epochs {p.epochs!r} give {got} steps, not the budget's {plan.train_steps}")
    return p


# ---------------------------------------------------------------- one point

# (the ridge map fitted on the budget's pairs, the protocol's denoiser config) -> a module with
# CausalDenoiser's interface (forward(x_t, t, c, cache, start_pos), cfg, new_cache, param_count)
ResidualFactory = Callable[[RidgeMap, DenoiserConfig], torch.nn.Module]


def seen_distinct_tokens(ids: np.ndarray, protocol: BridgeProtocol, plan: BudgetPlan) -> int:
    """Distinct training tokens the loop's sample order actually visits (sequences differing in
    content; a sequence met twice counts once) x seq_len."""
    order = sample_order(plan.sequences, loop_config(protocol, "cpu")).numpy()
    return distinct_rows(ids[np.unique(order)]) * ids.shape[1]


def backbone_nll(backbone, data: LayerData, batch_size: int = 8) -> float:
    """The backbone's own held-out NLL, pooled as measure_bridge pools it: from the dump's
    reference where it keeps one, else from the backbone's forward pass."""
    if data.reference is not None:
        return float(data.reference[1].double().mean())
    total = 0.0
    with torch.no_grad():
        for lo in range(0, len(data.val_ids), batch_size):
            ids = data.val_ids[lo : lo + batch_size].to(backbone.device)
            total += next_token_nll(lambda x: backbone.model(x).logits, ids) * ids.shape[0]
    return total / len(data.val_ids)


def _ridge_measures(backbone, data: LayerData) -> tuple[RidgeMap, float, float]:
    """(the ridge map fitted on data.train, its held-out reconstruction error, its hybrid's
    held-out NLL), measured as dihal.replace.control_hybrids.ridge_control measures it."""
    ridge = fit_ridge(data.train, data.val)
    z, m = ridge(data.val.cond)[data.val.mask], data.val.target[data.val.mask]
    recon = math.sqrt(float(((z - m).double() ** 2).sum() / (m.double() ** 2).sum()))
    first = data.first_state.to(backbone.device) if data.first_state is not None else None
    hybrid = ridge_hybrid(backbone, data.layer, ridge, data.cond_std, data.target_std, first)
    return ridge, recon, held_out_nll(hybrid, data.val_ids, data.reference)["hybrid_nll"]


def train_budget_point(backbone, data: LayerData, protocol: BridgeProtocol, model: str,
                       plan: BudgetPlan, ckpt_dir, *, device: str = "cpu",
                       distinct_tokens: int | None = None,
                       say: Callable[[str], None] = quiet, ridge: RidgeMap | None = None,
                       residual_factory: ResidualFactory | None = None) -> BudgetPoint:
    """One trained model ("bridge", "network" or "residual") at one budget: trained on
    data.train (the budget's sequences) under budget_protocol(protocol, layer, plan), resuming
    from ckpt_dir, and measured on the held-out sequences with measure_bridge. "residual"
    needs the ridge map fitted on the same pairs and residual_factory(ridge, denoiser config),
    called under a seeded RNG (the bridge's initialisation seed)."""
    if model not in TRAINED_MODELS:
        raise ValueError(f"model must be one of {TRAINED_MODELS}, got {model!r}")
    t0 = time.monotonic()
    layer = data.layer
    proto = budget_protocol(protocol, layer, plan)
    every = max(1, plan.train_steps // 8)

    def progress(e: dict) -> None:
        if "val_loss" in e or e["step"] % every == 0:
            say(f"layer {layer} {model} @ {plan.train_steps} steps: step {e['step']}/{e['total_steps']}")

    if model == "residual":
        if residual_factory is None or ridge is None:
            raise ValueError("the residual model needs residual_factory and the ridge map")
        cfg = denoiser_config_of(proto, data.train.dim, data.train.seq_len)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(proto.seed, "denoiser-init"))
            net = residual_factory(ridge, cfg).to(device)
        result = train_bridge(net, data.train, data.val, BrownianBridge(sigma=proto.sigma),
                              train_config_of(proto, device), ckpt_dir, progress=progress,
                              warn=say)
    else:
        if model == "network":
            proto = replace(proto, sampler_steps=1)  # the regression control predicts in one step
        net, result, _ = train_layer_bridge(data, proto, ckpt_dir, device=device,
                                            progress=progress, regression=model == "network",
                                            warn=say)
    if result.step != plan.train_steps:
        raise RuntimeError(f"{model} at layer {layer} stopped at step {result.step} of {plan.train_steps}")
    measured = measure_bridge(backbone, net.to(backbone.device), data, proto,
                              val_loss=result.val_loss)
    own = model != "network"  # the network's losses are not the bridge's: left None
    return BudgetPoint(
        layer=layer, train_steps=plan.train_steps, tokens=plan.tokens,
        distinct_tokens=plan.distinct_tokens if distinct_tokens is None else distinct_tokens,
        model=model, val_loss=measured["val_loss"] if own else None,
        t1_loss=measured["t1_loss"] if own else None, recon_error=measured["recon_error"],
        hybrid_nll=measured["hybrid_nll"], seconds=round(time.monotonic() - t0, 2))


# ---------------------------------------------------------------- one layer, the study


def _pace(point: BudgetPoint, cfg: BudgetStudyConfig, points: dict) -> str:
    """The layer's remaining trainings at this point's seconds a step (its measurement
    included): the estimate made before the start, corrected by this machine's pace."""
    if point.model not in cfg.trained or point.train_steps <= 0:
        return ""
    left = sum(b for b in cfg.budgets for m in cfg.trained if (point.layer, m, b) not in points)
    return (f"; at {point.seconds / point.train_steps:.2f} s a step, the layer's other trainings "
            f"({left:,} steps) take about {left * point.seconds / point.train_steps / 60:.0f} min"
            if left else "")


def _ridge_point(backbone, sub: LayerData, layer: int, plan: BudgetPlan,
                 tokens: TrainingTokens) -> tuple[RidgeMap, BudgetPoint]:
    """The ridge map of a budget's pairs (the residual bridge starts from it) and its point:
    fitted on every sequence of the budget once."""
    t0 = time.monotonic()
    ridge, recon, nll = _ridge_measures(backbone, sub)
    fitted = distinct_rows(tokens.ids[: plan.sequences]) * tokens.ids.shape[1]
    return ridge, BudgetPoint(layer, plan.train_steps, plan.distinct_tokens, fitted, "ridge", None,
                              None, recon, nll, round(time.monotonic() - t0, 2))


def study_layer(backbone, reader, layer: int, cfg: BudgetStudyConfig,
                protocol: BridgeProtocol, tokens: TrainingTokens, extract: ExtractConfig,
                work_dir, *, device: str = "cpu", finished: Iterable[BudgetPoint] = (),
                say: Callable[[str], None] = quiet,
                on_point: Callable[[BudgetPoint], None] | None = None,
                residual_factory: ResidualFactory | None = None) -> list[BudgetPoint]:
    """Every point of one layer: the backbone's NLL, then per budget (smallest first) the
    ridge map fitted on the budget's pairs, and the bridge, the network control and (with
    cfg.residual and a residual_factory) the residual bridge trained for exactly that many
    steps on them. A point in `finished` (same layer, model, steps) is not computed again, and
    the pairs are computed only as far as the unfinished budgets need. Each new point goes to
    `on_point` as soon as it is made (to be saved); checkpoints under work_dir/layer<l>/ let a
    training interrupted mid-way resume. Returns the layer's points, finished ones included,
    in (steps, model) order."""
    if cfg.residual and residual_factory is None:
        raise ValueError("cfg.residual is True but no residual_factory was given: pass one "
                         "(the ridge-started denoiser) or set residual=False")
    done = {p.key: p for p in finished if p.layer == layer}
    points = dict(done)

    def keep(point: BudgetPoint) -> None:
        points[point.key] = point
        say(f"layer {layer} {point.model} @ {point.train_steps} steps: hybrid NLL "
            f"{point.hybrid_nll:.4f} ({point.seconds:.0f} s)" + _pace(point, cfg, points))
        if on_point is not None:
            on_point(point)

    plans = [plan_budget(b, protocol.batch_size, tokens.ids.shape[1], len(tokens.ids))
             for b in cfg.budgets]
    todo = [p for p in plans if any((layer, m, p.train_steps) not in done for m in ("ridge", *cfg.trained))]
    if (layer, "backbone", 0) in done and not todo:
        return _ordered(points)
    data = layer_pairs_for_budget(backbone, reader, layer, protocol, tokens,
                                  max((p.sequences for p in todo), default=0), extract, say)
    if (layer, "backbone", 0) not in done:
        t0 = time.monotonic()
        keep(BudgetPoint(layer, 0, 0, 0, "backbone", None, None, None,
                         backbone_nll(backbone, data), round(time.monotonic() - t0, 2)))
    root = Path(work_dir) / f"layer{layer}"
    for plan in todo:
        sub = budget_data(data, plan.sequences)
        proto = budget_protocol(protocol, layer, plan)
        distinct = seen_distinct_tokens(tokens.ids[: plan.sequences], proto, plan)
        ridge = None
        if (layer, "ridge", plan.train_steps) not in done or (
                "residual" in cfg.trained and (layer, "residual", plan.train_steps) not in done):
            ridge, point = _ridge_point(backbone, sub, layer, plan, tokens)
            if (layer, "ridge", plan.train_steps) not in done:
                keep(point)
        for model in cfg.trained:
            if (layer, model, plan.train_steps) in done:
                continue
            keep(train_budget_point(backbone, sub, protocol, model, plan,
                                    root / f"{model}-{plan.train_steps}", device=device,
                                    distinct_tokens=distinct, say=say, ridge=ridge,
                                    residual_factory=residual_factory))
    return _ordered(points)


def _ordered(points: dict) -> list[BudgetPoint]:
    return sorted(points.values(), key=lambda p: (p.train_steps, BUDGET_MODELS.index(p.model)))


def run_study(backbone, reader, cfg: BudgetStudyConfig, protocol: BridgeProtocol,
              tokens: TrainingTokens, extract: ExtractConfig, work_dir, *,
              device: str = "cpu", finished: Iterable[BudgetPoint] = (),
              say: Callable[[str], None] = quiet,
              on_point: Callable[[BudgetPoint], None] | None = None,
              residual_factory: ResidualFactory | None = None) -> list[BudgetPoint]:
    """study_layer for each layer of cfg, one layer's pairs in memory at a time."""
    finished = list(finished)
    out: list[BudgetPoint] = []
    for layer in cfg.layers:
        say(f"budget study: layer {layer}")
        out += study_layer(backbone, reader, layer, cfg, protocol, tokens, extract, work_dir,
                           device=device, finished=finished, say=say, on_point=on_point,
                           residual_factory=residual_factory)
    return out
