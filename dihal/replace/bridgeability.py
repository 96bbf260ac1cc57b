"""Replace: does the layer score predict bridgeability? The Spearman table of every predictor
against each bridgeability target with its intervals, the standing against depth, the
pre-registered primary test, the oracle and worst layer, and the bridge against its regression
control (docs/method.md §2). Pure functions over measured rows; no network."""

from __future__ import annotations

import numpy as np

from dihal.config import MIN_SWEPT_LAYERS, BridgeProtocol, ExtractConfig  # noqa: F401
from dihal.errors import DihalError
from dihal.inputs import BridgeabilitySummary, OracleBy, PredictorRow, ScoreRow, SeedInfo
from dihal.locate.predictors import ORIENTATION
from dihal.plots import plot_bridgeability
from dihal.replace.stage import default_sweep_layers
from dihal.results import BridgeabilityResult
from dihal.rows import (
    DEPTH,
    PRIMARY_TARGET,
    TARGETS,
    BridgeMetrics,
    PrimaryTest,
    RegressionRow,
    Spearman,
    SpearmanRow,
    number,
)
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


def _predictor_values(layers: list[int], score_rows: list[ScoreRow],
                      predictor_rows: list[PredictorRow]) -> dict[str, list[float]]:
    """{predictor name: its oriented value at each swept layer}: S_l per normalisation, the
    depth control -l, and each rival predictor times its ORIENTATION."""
    from dihal.locate.score import depth_control

    out = {}
    score = {(r.norm, r.layer): r.S for r in score_rows}
    for norm in sorted({r.norm for r in score_rows}):
        out[f"S_l ({norm})"] = [score[(norm, ll)] for ll in layers]
    out[DEPTH] = list(depth_control(layers))
    rivals = {r.layer: r for r in predictor_rows}
    missing = [ll for ll in layers if ll not in rivals]
    if predictor_rows and missing:
        raise ValueError(f"the rival predictors lack swept layers {missing}: re-materialise geometry")
    for name, sign in ORIENTATION.items():
        if predictor_rows:
            out[("-" if sign < 0 else "") + name] = [sign * getattr(rivals[ll], name) for ll in layers]
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


def bridgeability_table(layer_rows: list[dict], score_rows: list[ScoreRow],
                        predictor_rows: list[PredictorRow] = (), *, n_boot: int = 2000,
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


def primary_standing(preds: dict[str, list[float]], target, score_rows: list[ScoreRow],
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
    score = {int(r.layer): float(r.S) for r in score_rows if r.norm == primary_norm}
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


def bridgeability(swept: list[BridgeMetrics], score_rows: list[ScoreRow], l_star: int, *,
                  backbone: str, predictor_rows: list[PredictorRow] = (),
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
    layers = sorted(swept, key=lambda m: m.layer)
    layer_rows = [m.to_dict() for m in layers]
    candidates = [r for r in score_rows if r.candidate]
    table = bridgeability_table(layer_rows, candidates, predictor_rows, l_star=l_star, seed_rows={
        ll: [m.to_dict() for m in ms] for ll, ms in (seed_metrics or {}).items()},
        primary_norm=primary_norm)
    summary = BridgeabilitySummary(
        l_star=l_star, oracle=table["oracle"], worst=table["worst"], swept_layers=table["layers"],
        spearman=table["rows"], regression=regression_table(swept, list(regression)),
        primary=table["primary"], oracle_by=OracleBy.from_dict(table["oracle_by"]),
        seeds=SeedInfo.from_dict(table["seeds"]))
    return BridgeabilityResult(
        layers=layers, summary=summary,
        plot_png=plot_bridgeability(layer_rows, candidates,
                                    f"{backbone}: score vs bridgeability (l* = {l_star})"))
