# Note: no `from __future__ import annotations`: Dagster reads the config annotations.
"""Replace, as assets: bridge_sweep_<b> and regression_sweep_<b> (one partition per candidate
layer) -> bridgeability_<b>; bridge_<b> (the bridge at l*, full budget)."""

import json

import dagster as dg

from assets._stage import StageRun, stage_asset
from assets.configs import (
    BridgeProtocolRunConfig,
    FullBridgeRunConfig,
)
from dihal.run.stages import asset_key
from storage import (
    Bridge,
    Bridgeability,
    BridgeRun,
    Geometry,
    HiddenStates,
    LayerScore,
    RegressionControl,
    Sequences,
    SweepBridge,
    bridgeability_inputs,
)


def trainer(run: StageRun, art: BridgeRun, layer: int, protocol, regression: bool = False,
            keep_pairs: bool = False):
    """The compute of a bridge artifact: build the layer's training pairs, train (resuming its
    checkpoints) and measure; with `regression`, the regression control (on the pairs a sweep
    bridge kept in this process, `keep_pairs`, where there are)."""
    def progress(e: dict) -> None:
        what = f"val loss {e['val_loss']:.4f}" if "val_loss" in e else f"loss {e['loss']:.4f}"
        run.log(f"layer {layer}: step {e['step']}/{e['total_steps']} {what} ({e['elapsed_s']:.0f} s)")

    def compute():
        from dihal.config import ExtractConfig
        from dihal.replace.stage import train_layer

        states = run.art(HiddenStates)
        (dump,) = run.require(states)
        return train_layer(run.model(), states.reader(), layer, protocol, art.checkpoints,
                           train_ids=run.art(Sequences).token_ids()["train"],
                           extract=ExtractConfig(**dump.config), device=run.device(),
                           progress=progress, log=run.throttled(), regression=regression,
                           warn=run.warn, keep_pairs=keep_pairs)

    return compute


def ridge_of(run: StageRun, layer: int, protocol):
    """The compute of a swept layer's regression control (dihal.replace.control_hybrids.ridge_control),
    on the pairs its sweep bridge kept in this process where there are."""
    def compute():
        from dihal.config import ExtractConfig
        from dihal.replace.control_hybrids import ridge_control

        states = run.art(HiddenStates)
        (dump,) = run.require(states)
        return ridge_control(run.model(), states.reader(), layer, protocol,
                             train_ids=run.art(Sequences).token_ids()["train"],
                             extract=ExtractConfig(**dump.config), log=run.throttled())

    return compute


def pairs_of(run: StageRun, layer: int):
    """The raw (hs[0], h_layer) training pairs, as `trainer` builds them: from the dump, or
    computed for the training sequences where the dump did not store that split."""
    def pairs():
        from dihal.config import ExtractConfig
        from dihal.locate.extract import layer_pairs
        from dihal.replace.stage import stored_pairs

        states = run.art(HiddenStates)
        (dump,) = run.require(states)
        reader = states.reader()
        if "train" in reader.splits:
            return stored_pairs(reader, "train", layer)
        return layer_pairs(run.model(), run.art(Sequences).token_ids()["train"], layer,
                           ExtractConfig(**dump.config), progress=run.throttled())

    return pairs


# (run id, fingerprint) of the regression controls bridge_sweep made (early_control):
# regression_sweep's step of the same run reports them as made, not reused
_MADE_BY_SWEEP: set[tuple[str, str]] = set()


def control(run: StageRun, layer: int):
    """(artifact, manifest, cached) of the regression control of a swept layer."""
    from dihal.config import RIDGE_LAMBDAS, BridgeProtocol

    states, sweep = run.art(HiddenStates), run.art(SweepBridge, layer)
    _, sm = run.require(states, sweep)
    protocol = BridgeProtocol(**sm.config)
    out = run.art(RegressionControl, layer)
    config = {"objective": "ridge", "lambdas": list(RIDGE_LAMBDAS),
              "pin_first": protocol.pin_first, "eval_sequences": protocol.eval_sequences}
    return run.made(out, config, [states, sweep], ridge_of(run, layer, protocol), layer=layer)


def early_control(run: StageRun, layer: int) -> None:
    """The layer's regression control, made now on the pairs its bridge kept in memory (a
    batched run trains every bridge before regression_sweep's step, which would otherwise
    build them again for all but the last layer). A failure here is left to
    regression_sweep's own step, which makes it again and reports why."""
    try:
        _, m, cached = control(run, layer)
    except Exception as exc:  # noqa: BLE001 (regression_sweep's step reports it)
        run.warn(f"layer {layer}: its regression control is left to regression_sweep's step "
                 f"({exc})")
        return
    if not cached:
        _MADE_BY_SWEEP.add((run.context.run.run_id, m.fingerprint))


def _makes(context: dg.AssetExecutionContext, asset: str) -> bool:
    """Whether this run makes `asset` too (a step of it is to execute)."""
    return dg.AssetKey(asset) in context.job_def.asset_layer.executable_asset_keys and (
        context.run.step_keys_to_execute is None or asset in context.run.step_keys_to_execute)


def replace_assets(backbone: str, n_layers: int) -> list:
    def key(stage: str) -> str:  # the asset key of this backbone's stage
        return asset_key(stage, backbone)

    layers = dg.StaticPartitionsDefinition([str(ll) for ll in range(1, n_layers)])

    @stage_asset(backbone, "bridge_sweep", [key("hidden_states")], partitions=layers,
                 kinds={"pytorch", "safetensors"}, batched=True)
    def bridge_sweep(context: dg.AssetExecutionContext,
                     config: BridgeProtocolRunConfig) -> dg.MaterializeResult:
        """A bridge per candidate layer under one fixed protocol, with its bridgeability:
        validation loss, reconstruction error, hybrid NLL, top-1 agreement. A batched run makes
        its layers in turn, loading the backbone and the dump once; where the run makes
        regression_sweep too, each layer's control is made right after its bridge, on the
        training pairs still in memory (regression_sweep's step then reports it)."""
        run = StageRun(context, backbone)
        with_control = _makes(context, key("regression_sweep"))

        def one(partition: str):
            layer = int(partition)
            # this layer's seeds (seed_layers: the layers with replicates; the others 1): stored
            # resolved, so a layer's artifact depends on its own seeds only
            protocol = config.to_dihal().for_layer(layer)
            out = run.art(SweepBridge, layer)
            made = run.made(out, protocol, [run.art(HiddenStates)],
                            trainer(run, out, layer, protocol, keep_pairs=True), layer=layer)
            if with_control:
                early_control(run, layer)
            return made

        return run.each_partition(one)

    @stage_asset(backbone, "regression_sweep", [bridge_sweep], partitions=layers,
                 kinds={"pytorch", "safetensors"}, batched=True)
    def regression_sweep(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        """The regression control of each swept layer: the closed-form ridge map hs[0] -> h_l
        on the sweep bridge's training pairs and standardisation, its penalty chosen on the
        held-out pairs; measured the same way (reconstruction error, hybrid NLL, top-1
        agreement). Seconds a layer, where a regression network took a bridge's training."""
        run = StageRun(context, backbone)

        def one(partition: str):
            out, m, cached = control(run, int(partition))
            return out, m, cached and (context.run.run_id, m.fingerprint) not in _MADE_BY_SWEEP

        return run.each_partition(one)

    @stage_asset(backbone, "bridgeability", [bridge_sweep, regression_sweep,
                                             key("layer_score"), key("geometry")],
                 kinds={"parquet"})
    def bridgeability(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        """Does the geometry score predict bridgeability? Spearman of S_l (each normalisation),
        of the rival predictors and of the depth control -l against -val loss,
        -reconstruction error, -hybrid NLL, with bootstrap intervals over layers."""
        from dihal.replace.bridgeability import bridgeability as stage

        run = StageRun(context, backbone)
        score, geo = run.art(LayerScore), run.art(Geometry)
        hs, sm, _ = run.require(run.art(HiddenStates), score, geo)
        inputs = bridgeability_inputs(run.layout, backbone, n_layers, hs)
        swept, controls = inputs["sweep"], inputs["regression"]
        check_sweep(swept, backbone)
        warn_missing_controls(context, swept, controls, backbone)
        ups = [a for group in inputs.values() for a, _ in group]

        def compute():
            bridges = [a.read() for a, _ in swept]
            return stage([b.metrics for b in bridges], score.rows(), sm.info["l_star"],
                         backbone=backbone, predictor_rows=geo.predictor_rows(),
                         regression=[a.read().metrics for a, _ in controls],
                         seed_metrics={b.layer: b.seed_metrics for b in bridges},
                         primary_norm=sm.config.get("primary_norm", "none"))

        return run.produce(run.art(Bridgeability), {}, ups, compute)

    @stage_asset(backbone, "bridge", [key("layer_score"), key("hidden_states")],
                 kinds={"pytorch", "safetensors"})
    def bridge(context: dg.AssetExecutionContext, config: FullBridgeRunConfig) -> dg.MaterializeResult:
        """The bridge at the geometry-selected layer l*, trained with the full budget."""
        run, protocol = StageRun(context, backbone), config.to_dihal()
        states, score = run.art(HiddenStates), run.art(LayerScore)
        layer = int(run.require(score)[0].info["l_star"])
        protocol = protocol.for_layer(layer)  # its seeds, where seed_layers names l* (or is empty)
        out = run.art(Bridge)
        return run.produce(out, protocol, [states, score], trainer(run, out, layer, protocol),
                           layer=layer)

    return [bridge_sweep, regression_sweep, bridgeability, bridge]


def warn_missing_controls(context, swept: list, controls: list, backbone: str) -> None:
    """Say which swept layers have no regression control yet (the table shows the others)."""
    if missing := sorted({a.key for a, _ in swept} - {a.key for a, _ in controls}):
        context.log.warning(f"no regression control for swept layers {missing}: run "
                            f"regression_sweep_{backbone} for them (the sweep job does)")


def check_sweep(swept: list, backbone: str) -> None:
    """Enough swept layers, all under one protocol, or a Failure saying what to run."""
    from dihal.config import MIN_SWEPT_LAYERS

    if len(swept) < MIN_SWEPT_LAYERS:
        raise dg.Failure(
            f"bridgeability needs >= {MIN_SWEPT_LAYERS} swept layers of the current hidden states, "
            f"found {len(swept)}. Run: dagster asset materialize --select bridge_sweep_{backbone} "
            f"--partition L for more layers L (or `python -m pipeline.main --backbone {backbone}`).")
    from dihal.config import SEED_FIELDS

    # the seed fields may differ: the kept bridge of every layer is trained alike
    protocols = {json.dumps({k: v for k, v in m.config.items() if k not in SEED_FIELDS},
                            sort_keys=True) for _, m in swept}
    if len(protocols) > 1:
        fields = sorted({k for _, m in swept for k in m.config if k not in SEED_FIELDS
                         and len({json.dumps(n.config.get(k)) for _, n in swept}) > 1})
        raise dg.Failure(f"the swept layers were trained under different protocols (they differ "
                         f"in {', '.join(fields)}); re-materialise the sweep with one config "
                         "(only seeds and seed_layers may differ between layers)")
