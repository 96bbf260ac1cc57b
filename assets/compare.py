# Note: no `from __future__ import annotations`: Dagster reads the config annotations.
"""Compare, as assets: baseline_<b> (one partition per baseline), comparison_<b> and
full_training_<b> (l*, oracle, worst under the full budget)."""

import dagster as dg

from assets._stage import StageRun, stage_asset
from assets.configs import BaselineRunConfig, EvalRunConfig
from assets.evaluate import reference_texts
from assets.replace import trainer
from dihal.registry import BASELINES
from dihal.run.stages import asset_key
from storage import (
    BaselineRun,
    Bridge,
    Bridgeability,
    Comparison,
    Evaluation,
    FullTraining,
    FullTrainingBridge,
    HiddenStates,
    SamplerCurve,
    Sequences,
    current_baselines,
)


def full_bridges(run: StageRun):
    """layer -> the full-budget bridge there: bridge_<b> at l*, else a FullTrainingBridge under
    the same protocol (its seeds included), trained or reused."""
    from dihal.config import BridgeProtocol

    br, states = run.art(Bridge), run.art(HiddenStates)
    bm, _ = run.require(br, states)
    protocol = BridgeProtocol(**bm.config)

    def bridge_at(layer: int):
        art = br if layer == bm.info["metrics"]["layer"] else run.art(FullTrainingBridge, layer)
        if art is not br:
            run.obtain(art, protocol, [states], trainer(run, art, layer, protocol), layer=layer)
        return art.read()

    return bridge_at


def same_eval(run: StageRun, cfg, made_from: list) -> list:
    """[the eval] where it sampled the current bridge at l* under the current sampler curve
    with the same config as `cfg` (so full training takes l*'s rows from it), else []."""
    from storage.manifest import canonical

    ev = run.art(Evaluation)
    m = ev.manifest()
    if m is None or m.config != canonical(cfg):
        return []
    current = {a.name: mm.fingerprint for a, mm in zip(made_from, run.require(*made_from),
                                                       strict=True)}
    return [ev] if all(m.upstream.get(k) == fp for k, fp in current.items()) else []


def baseline_of(run: StageRun, cfg):
    """one(name) -> (artifact, manifest, cached): the baseline `name` at DiHAL's budget, made
    or reused (StageRun.each_partition's function for the baseline asset)."""
    import torch

    from dihal.compare.baselines import VERSIONS
    from dihal.compare.stage import baseline as stage
    from dihal.compare.stage import reference_budget

    seqs, br = run.art(Sequences), run.art(Bridge)
    sm, bm = run.require(seqs, br)

    def one(name: str):
        out = run.art(BaselineRun, name)

        def compute():
            ref = reference_budget(br.read().metrics, bm.config["sampler_steps"], sm.config["seq_len"])
            return stage(name, run.model(), torch.as_tensor(seqs.token_ids()["train"]), ref,
                         bm.config, cfg, out.workdir, run.judge(), progress=run.throttled(),
                         device=run.device(), reference_texts=reference_texts(run, cfg.length),
                         warn=run.warn)

        return run.made(out, {"name": name, **cfg.__dict__}, [seqs, br], compute,
                        judge=run.judge_identity(), recipe_version=VERSIONS[name])

    return one


def compare_assets(backbone: str) -> list:
    def key(stage: str) -> str:  # the asset key of this backbone's stage
        return asset_key(stage, backbone)

    names = dg.StaticPartitionsDefinition(list(BASELINES))

    @stage_asset(backbone, "baseline", [key("sequences"), key("bridge")],
                 partitions=names, kinds={"pytorch", "safetensors"}, batched=True)
    def baseline(context: dg.AssetExecutionContext, config: BaselineRunConfig) -> dg.MaterializeResult:
        """A continuous-diffusion baseline at DiHAL's budget: same denoiser size (+-10%),
        training tokens, sampler steps, sequence length, judge and metric code."""
        run = StageRun(context, backbone)
        return run.each_partition(baseline_of(run, config.to_dihal()))

    @stage_asset(backbone, "comparison", [key("eval"), baseline], kinds={"parquet"})
    def comparison(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        """Gen.PPL and diversity of DiHAL, the four baselines and the backbone, with budgets;
        and the temperature frontier of the eval and the baselines."""
        from dihal.compare.stage import comparison as stage

        run = StageRun(context, backbone)
        ev, br = run.art(Evaluation), run.art(Bridge)
        em, bm = run.require(ev, br)
        current = current_baselines(run.layout, backbone, BASELINES, bm)
        if missing := [n for n in BASELINES if n not in {a.key for a, _ in current}]:
            context.log.warning(f"baselines not materialised for the current bridge: {missing}")
        rows = {a.key: m.info["row"] for a, m in current}
        return run.produce(run.art(Comparison), {}, [ev] + [a for a, _ in current], lambda: stage(
            em.info["rows"], br.read().metrics, bm.config["sampler_steps"], rows, missing,
            em.info.get("frontier", [])))

    @stage_asset(backbone, "full_training", [key("bridgeability"), key("bridge"),
                                             key("sampler_steps")],
                 kinds={"pytorch", "parquet"})
    def full_training(context: dg.AssetExecutionContext, config: EvalRunConfig) -> dg.MaterializeResult:
        """Bridges at l* (geometry), the oracle and the worst sweep layer under the full budget
        (and training seeds) of bridge_<b>, evaluated the same way (bridgeability + generation)
        at the protocol's K and at the (rule, K) chosen on validation at l*."""
        from dihal.compare.stage import full_training as stage
        from dihal.compare.stage import full_training_roles
        from dihal.inputs import BridgeabilitySummary
        from dihal.replace.sampler_steps import choose_steps
        from dihal.results import SamplerCurveResult

        run, cfg = StageRun(context, backbone), config.to_dihal()
        bness, br, curve = run.art(Bridgeability), run.art(Bridge), run.art(SamplerCurve)
        bn, cm = run.require(bness, curve)
        ev = same_eval(run, cfg, [br, curve])  # l*'s rows where the eval drew them alike
        roles = full_training_roles(BridgeabilitySummary.from_dict(bn.info))
        chosen = choose_steps(SamplerCurveResult.from_dict(cm.info).rows)
        return run.produce(run.art(FullTraining), cfg, [bness, br, curve, *ev], lambda: stage(
            roles, full_bridges(run), run.model(), run.judge(), cfg, run.log,
            reference_texts=reference_texts(run, cfg.length), chosen=chosen,
            from_eval=ev[0].manifest().info["rows"] if ev else None,
            eval_samples=ev[0].samples() if ev else None),
            judge=run.judge_identity())

    return [baseline, comparison, full_training]
