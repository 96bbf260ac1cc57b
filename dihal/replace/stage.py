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
    DenoiserConfig,
    EndpointRegression,
    Standardizer,
    build_denoiser,
    reconstruction_error,
    train_bridge,
    validation_loss,
)
from dihal.bridge.denoiser import denoiser_config_of
from dihal.bridge.sampler import DEFAULT_RULE
from dihal.bridge.train import loop_config, sample_budget
from dihal.config import MIN_SWEPT_LAYERS, BridgeProtocol, ExtractConfig  # noqa: F401
from dihal.errors import DihalError, LayerIndexError
from dihal.locate.extract import layer_pairs
from dihal.locate.predictors import ORIENTATION
from dihal.plots import plot_bridgeability
from dihal.replace.hybrid import Hybrid, next_token_nll, top1_agreement
from dihal.results import BridgeabilityResult, BridgeMetrics, TrainedBridge
from dihal.rows import (
    DEPTH,
    PRIMARY_TARGET,
    TARGETS,
    PrimaryTest,
    RegressionRow,
    Spearman,
    SpearmanRow,
    number,
)
from dihal.seeds import derive_seed
from dihal.uncertainty import (
    PRIMARY_RESAMPLES,
    design_min_p,
    oracle_by_measures,
    paired_standing,
    primary_test,
    seed_oracle,
    seed_spread,
    spearman_interval,
    two_level_spearman,
)


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


def held_out(reader, layer: int, protocol: BridgeProtocol, cond_std: Standardizer,
             target_std: Standardizer) -> tuple[BridgeData, torch.Tensor]:
    """The first `protocol.eval_sequences` held-out sequences as standardised (c, h_l) pairs,
    and their tokens."""
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
    runs here. `rule`: the sampler's update rule (default: dihal.bridge.sampler.DEFAULT_RULE)."""

    rule = rule or DEFAULT_RULE
    process = BrownianBridge(sigma=protocol.sigma)
    denoiser.eval()
    if val_loss is None:
        val_loss = validation_loss(denoiser, data.val, process, seed=protocol.seed)
    out = {
        "val_loss": val_loss,
        # the error at t = 1, where x_t is the condition alone: what the sampler's first step
        # must predict (validation loss averages t in 0.1..0.9, where x_t still carries most of
        # the target); a regression control's validation loss is this same number
        "t1_loss": validation_loss(denoiser, data.val, process, REGRESSION_T_GRID,
                                   seed=protocol.seed),
        "recon_error": reconstruction_error(denoiser, data.val, process, steps=protocol.steps,
                                            seed=protocol.seed, rule=rule),
    }
    hybrid = Hybrid(backbone, denoiser, process, data.cond_std, data.target_std, data.layer,
                    steps=protocol.steps, first_state=data.first_state, rule=rule,
                    noise_seed=protocol.seed)
    nll_h = nll_b = agree = 0.0
    n = 0
    per_sequence = []  # the hybrid's mean next-token NLL of each held-out sequence
    for lo in range(0, len(data.val_ids), batch_size):
        ids = data.val_ids[lo : lo + batch_size].to(backbone.device)
        lh = hybrid.logits(ids).float()
        w = ids.shape[0]
        if data.reference is None:
            lb = backbone.model(ids).logits.float()
            nll_b += next_token_nll(lambda _, x=lb: x, ids) * w
            top_b = lb.argmax(-1)
        else:
            nll_b += float(data.reference[1][lo : lo + w].mean()) * w
            top_b = data.reference[0][lo : lo + w]
        nll_h += next_token_nll(lambda _, x=lh: x, ids) * w
        per_sequence += sequence_nll(lh, ids)
        agree += top1_agreement(lh, top_b) * w
        n += w
    out.update({"hybrid_nll": nll_h / n, "backbone_nll": nll_b / n, "top1_agreement": agree / n,
                "hybrid_ppl": math.exp(nll_h / n), "backbone_ppl": math.exp(nll_b / n),
                **split_halves(per_sequence)})
    return out


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


def _predictor_values(layers: list[int], score_rows: list[dict],
                      predictor_rows: list[dict]) -> dict[str, list[float]]:
    """{predictor name: its oriented value at each swept layer}: S_l per normalisation, the
    depth control -l, and each rival predictor times its ORIENTATION."""
    from dihal.locate.score import depth_control

    out = {}
    score = {(r["norm"], r["layer"]): r["S"] for r in score_rows}
    for norm in sorted({r["norm"] for r in score_rows}):
        out[f"S_l ({norm})"] = [score[(norm, ll)] for ll in layers]
    out[DEPTH] = list(depth_control(layers))
    rivals = {r["layer"]: r for r in predictor_rows}
    missing = [ll for ll in layers if ll not in rivals]
    if predictor_rows and missing:
        raise ValueError(f"the rival predictors lack swept layers {missing}: re-materialise geometry")
    for name, sign in ORIENTATION.items():
        if predictor_rows:
            out[("-" if sign < 0 else "") + name] = [sign * rivals[ll][name] for ll in layers]
    return out


# the measures the oracle and worst layer are named by
ORACLE_MEASURES = ("val_loss", "hybrid_nll", "hybrid_nll_select")
# the one full training follows: the measure closest to generation (on a 29-layer sweep at the GPU
# budget validation loss ranked the layers nearly opposite to hybrid NLL), on the first half of the held-out
# sequences only, so that the second half judges the choice (hybrid_nll_judge); sweeps measured
# before the halves fall back to the hybrid NLL on all of them
ORACLE_BY, ORACLE_FALLBACK = "hybrid_nll_select", "hybrid_nll"


def _seed_values(layers: list[int], by_layer: dict, seed_rows: dict[int, list[dict]],
                 measure: str) -> np.ndarray:
    """(layers, seeds) values of `measure`: each layer's kept bridge first, then its
    replicates, NaN where a layer has fewer seeds."""
    width = 1 + max(len(seed_rows.get(ll, [])) for ll in layers)
    out = np.full((len(layers), width), np.nan)
    for i, ll in enumerate(layers):
        vals = [by_layer[ll][measure]] + [r[measure] for r in seed_rows.get(ll, [])]
        out[i, : len(vals)] = vals
    return out


def bridgeability_table(layer_rows: list[dict], score_rows: list[dict],
                        predictor_rows: list[dict] = (), *, n_boot: int = 2000,
                        seed: int = 0, seed_rows: dict[int, list[dict]] | None = None,
                        l_star: int | None = None, primary_norm: str | None = None) -> dict:
    """Spearman of every predictor (S_l per normalisation, the depth control -l, the oriented
    rival predictors) against -val_loss, -recon_error and -hybrid_nll over the swept layers,
    each with a percentile bootstrap interval over layers, and its standing against depth
    decided by the paired difference rho - depth's rho (the same resamples of layers for both
    and for every predictor), its p-value Holm-corrected over predictors x targets, with the
    partial Spearman given depth beside it (dihal.uncertainty.paired_standing). "rows": one
    dihal.rows.SpearmanRow per predictor; "oracle" / "worst": the lowest / highest swept layer
    by hybrid NLL (ORACLE_BY), "oracle_by": both by every ORACLE_MEASURES
    (oracle_by_measures: {"by", "oracle_disagree", "worst_disagree"}).

    With `seed_rows` (layer -> the metrics rows of its further training seeds) where some layer
    has more than one seed, every target is the per-layer mean over seeds and every interval
    and p-value comes from the two-level resample (layers, then seeds within layers:
    two_level_spearman, paired_standing on (layers, seeds) targets); the oracle and worst are
    by the seed means, and "seeds" holds the spread between seeds at each layer (seed_spread)
    and the oracle's (and l*'s) standing over resampled seeds (seed_oracle); else "seeds" is
    {}. With `primary_norm`, "primary": the pre-registered primary test (primary_standing, a
    dihal.rows.PrimaryTest); every paired standing in "rows" is then exploratory; else None."""

    layers = sorted(r["layer"] for r in layer_rows)
    by_layer = {r["layer"]: r for r in layer_rows}
    seed_rows = {ll: rows for ll, rows in (seed_rows or {}).items() if rows and ll in by_layer}
    preds = _predictor_values(layers, score_rows, predictor_rows)
    targets, stats, oracle_rows, seeds_info = _layer_statistics(
        layers, layer_rows, seed_rows, preds, n_boot=n_boot, seed=seed, l_star=l_star)
    rivals = {p: v for p, v in preds.items() if p != DEPTH}
    paired = {(r["predictor"], r["target"]): r for r in paired_standing(
        rivals, preds[DEPTH], targets, n_boot=n_boot, seed=seed)} if rivals else {}

    def standing(p: str, m: str) -> Spearman:
        st = stats[(p, m)]
        if p == DEPTH:
            return Spearman(st["rho"], st["low"], st["high"])
        d = paired[(p, m)]
        return Spearman(st["rho"], st["low"], st["high"], d["verdict"],
                        **{k: number(d[k]) for k in ("diff", "p", "p_holm", "partial",
                                                     "partial_low", "partial_high",
                                                     "partial_undefined")},
                        diff_low=number(d["low"]), diff_high=number(d["high"]))

    table = [SpearmanRow(p, {m: standing(p, m) for m in TARGETS}) for p in preds]
    measures = [m for m in ORACLE_MEASURES if all(r.get(m) is not None for r in oracle_rows)]
    by = oracle_by_measures(oracle_rows, measures)
    chosen = ORACLE_BY if ORACLE_BY in by["by"] else ORACLE_FALLBACK
    by["chosen_by"] = chosen
    primary = (primary_standing(preds, targets[PRIMARY_TARGET], score_rows, primary_norm,
                                seed=seed) if primary_norm is not None else None)
    return {"rows": table, "layers": layers, "oracle": by["by"][chosen]["oracle"],
            "worst": by["by"][chosen]["worst"], "oracle_by": by, "seeds": seeds_info,
            "primary": primary}


def primary_standing(preds: dict[str, list[float]], target, score_rows: list[dict],
                     primary_norm: str, *, seed: int = 0,
                     n_boot: int | None = None) -> PrimaryTest:
    """The pre-registered primary test (dihal.uncertainty.primary_test) of S_l under
    `primary_norm` against depth on -PRIMARY_TARGET over the swept layers (`preds`, `target`:
    as bridgeability_table has them), with the design's floor at every candidate layer of
    `score_rows` and the fewest evenly spread swept layers (default_sweep_layers) whose floor
    is under alpha. Covered by test_primary_standing_through_the_bridgeability_table."""

    name = f"S_l ({primary_norm})"
    if name not in preds:
        raise ValueError(f"the primary normalisation {primary_norm!r} has no S_l in the score "
                         f"rows (have {sorted(p for p in preds if p.startswith('S_l'))}); "
                         "re-materialise layer_score with it")
    n_boot = n_boot or PRIMARY_RESAMPLES
    t = primary_test(preds[name], preds[DEPTH], target, n_boot=n_boot, seed=seed)
    score = {int(r["layer"]): float(r["S"]) for r in score_rows if r["norm"] == primary_norm}
    every = sorted(score)

    def floor(layers: list[int], resamples: int = n_boot) -> float:
        return design_min_p([score[ll] for ll in layers], [-ll for ll in layers],
                            n_boot=resamples, seed=seed)["p_min"]

    needed = None  # searched with 2,000 resamples a count (the floor to about +-0.01)
    for count in range(3, len(every) + 1):
        if floor(default_sweep_layers(max(every) + 1, count), min(n_boot, 2000)) < t["alpha"]:
            needed = count
            break
    return PrimaryTest(predictor=name, target=PRIMARY_TARGET,
                       **{k: t[k] for k in ("rho", "rho_reference", "diff", "low", "p", "p_min",
                                            "ties", "undefined", "n_boot", "layers", "alpha",
                                            "verdict")},
                       p_min_all=floor(every) if len(every) >= 3 else None,
                       layers_all=len(every), layers_needed=needed)


def _layer_statistics(layers: list[int], layer_rows: list[dict], seed_rows: dict, preds: dict,
                      *, n_boot: int, seed: int, l_star: int | None):
    """(targets, Spearman stats per (predictor, target), the rows the oracle is chosen from,
    the seed information) of bridgeability_table: over one seed per layer, or, with
    `seed_rows`, over the per-layer seed means with the two-level resample."""

    by_layer = {r["layer"]: r for r in layer_rows}
    if not seed_rows:
        targets = {m: [-by_layer[ll][m] for ll in layers] for m in TARGETS}
        stats = {(p, m): spearman_interval(v, t, n_boot=n_boot, seed=seed)
                 for p, v in preds.items() for m, t in targets.items()}
        return targets, stats, layer_rows, {}
    raw = {m: _seed_values(layers, by_layer, seed_rows, m) for m in TARGETS}
    targets = {m: -v for m, v in raw.items()}
    stats = {(p, m): two_level_spearman(v, t, n_boot=n_boot, seed=seed)
             for p, v in preds.items() for m, t in targets.items()}
    halves = _select_means(layers, by_layer, seed_rows)
    chosen = ORACLE_BY if len(halves) == len(layers) else ORACLE_FALLBACK  # the oracle's measure
    oracle_rows = [{"layer": ll, **{m: float(np.nanmean(raw[m][i])) for m in TARGETS},
                    ORACLE_BY: halves.get(ll)} for i, ll in enumerate(layers)]
    seeds_info = {"n_seeds": int(raw["hybrid_nll"].shape[1]),
                  "spread": {m: seed_spread(raw[m], layers) for m in TARGETS},
                  "oracle": seed_oracle(_seed_values(layers, by_layer, seed_rows, chosen),
                                        layers, n_boot=n_boot, seed=seed,
                                        l_star=l_star if l_star in layers else None),
                  **_seed_cost(layers, by_layer, seed_rows)}
    return targets, stats, oracle_rows, seeds_info


def _select_means(layers: list[int], by_layer: dict, seed_rows: dict) -> dict[int, float]:
    """layer -> the mean over its seeds of the hybrid NLL on the selection half (ORACLE_BY),
    for the layers whose every seed measured it."""
    out = {}
    for ll in layers:
        vals = [r.get(ORACLE_BY) for r in [by_layer[ll], *seed_rows.get(ll, [])]]
        if all(v is not None for v in vals):
            out[ll] = float(np.mean(vals))
    return out


def _seed_cost(layers: list[int], by_layer: dict, seed_rows: dict) -> dict:
    """What the replicate seeds cost, from the bridges' own timings: {"replicates",
    "replicate_seconds" (their total), "bridge_seconds" (the kept bridges' total, each with its
    training pairs)}; the report sizes from it what more seeds would take. (Each layer's seed
    count is in the spread rows.)"""
    reps = [r for ll in layers for r in seed_rows.get(ll, [])]
    return {"replicates": len(reps),
            "replicate_seconds": round(float(sum(r.get("seconds") or 0.0 for r in reps)), 1),
            "bridge_seconds": round(float(sum(by_layer[ll].get("seconds") or 0.0
                                               for ll in layers)), 1)}


def regression_table(swept: list[BridgeMetrics], controls: list[BridgeMetrics]) -> list[RegressionRow]:
    """The diffusion bridge against its regression control at each layer that has both: the
    reconstruction error, hybrid NLL and top-1 agreement of each, and which is better."""
    control = {m.layer: m for m in controls}
    return [RegressionRow.of(b, control[b.layer])
            for b in sorted(swept, key=lambda m: m.layer) if b.layer in control]


def bridgeability(swept: list[BridgeMetrics], score_rows: list[dict], l_star: int, *,
                  backbone: str, predictor_rows: list[dict] = (),
                  regression: list[BridgeMetrics] = (),
                  seed_metrics: dict[int, list[BridgeMetrics]] | None = None,
                  primary_norm: str = "none") -> BridgeabilityResult:
    """The bridgeability stage: does the layer score, or a rival predictor, predict how well
    a bridge learns, better than depth does? And does the bridge beat its regression control
    (`regression`: the controls' metrics, of some or all swept layers)? `seed_metrics`: layer ->
    the metrics of its further training seeds (TrainedBridge.seed_metrics), resampled on two
    levels where there are any. `primary_norm`: layer_score's, whose S_l the pre-registered
    primary test reads (primary_standing)."""

    if len(swept) < MIN_SWEPT_LAYERS:
        raise DihalError(f"bridgeability needs >= {MIN_SWEPT_LAYERS} swept layers, got {len(swept)}")
    layer_rows = sorted((m.to_dict() for m in swept), key=lambda r: r["layer"])
    candidates = [r for r in score_rows if r["candidate"]]
    table = bridgeability_table(layer_rows, candidates, predictor_rows, l_star=l_star, seed_rows={
        ll: [m.to_dict() for m in ms] for ll, ms in (seed_metrics or {}).items()},
        primary_norm=primary_norm)
    return BridgeabilityResult(
        layer_rows=layer_rows, spearman=table["rows"], layers=table["layers"],
        oracle=table["oracle"], worst=table["worst"], oracle_by=table["oracle_by"],
        seeds=table["seeds"], l_star=l_star, primary=table["primary"],
        regression=regression_table(swept, list(regression)),
        plot_png=plot_bridgeability(layer_rows, candidates,
                                    f"{backbone}: score vs bridgeability (l* = {l_star})"))


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
    control instead (train_layer_bridge; `protocol.steps` must then be 1), on the pairs a
    bridge of the same layer kept (`keep_pairs`) where there are any (layer_data_for). `warn`
    gets the reason a damaged checkpoint is passed over (default: a RuntimeWarning)."""
    protocol = protocol.for_layer(layer)  # `seeds` only where seed_layers is empty or names it
    if regression and protocol.steps != 1:
        raise ValueError(f"the regression control predicts in one step: steps must be 1, got "
                         f"{protocol.steps}")
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
        steps=result.step,
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
    hparams = {"backbone": backbone.spec.name, "layer": layer, "protocol": protocol.to_dict(),
               "denoiser_config": denoiser.cfg.to_dict(), "train_config": tcfg.to_dict(),
               "revision": backbone.weights.revision}
    if regression:
        hparams["objective"] = "regression"
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
        steps=result.step,
        train_tokens=sample_budget(len(data.train), train_config_of(proto, device)) * data.train.seq_len,
        seconds=round(time.monotonic() - t0, 1), resumed_from_step=result.resumed_from,
        denoiser_parameters=denoiser.param_count())


def restore_bridge(trained: TrainedBridge, device: str = "cpu") -> dict:
    """The modules of a saved bridge: {"denoiser", "cond_std", "target_std", "first_state",
    "hparams"}."""

    t = trained.tensors
    model = CausalDenoiser(DenoiserConfig.from_dict(trained.hparams["denoiser_config"]))
    model.load_state_dict({k[len("denoiser."):]: v for k, v in t.items() if k.startswith("denoiser.")})
    return {"denoiser": model.to(device).eval(),
            "cond_std": Standardizer(t["cond_std.mean"], t["cond_std.std"]),
            "target_std": Standardizer(t["target_std.mean"], t["target_std.std"]),
            "first_state": t.get("first_state"), "hparams": trained.hparams}
