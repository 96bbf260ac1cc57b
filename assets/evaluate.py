# Note: no `from __future__ import annotations`: Dagster reads the config annotations.
"""Evaluate, as assets: sampler_steps_<b> (what the sampler's steps buy at l*) -> eval_<b>
(samples of the hybrid, the backbone and the control hybrids), and the nightly re-evaluation."""

import dagster as dg

from assets._stage import StageRun, stage_asset
from assets.configs import EvalRunConfig, SamplerCurveRunConfig
from assets.replace import pairs_of, trainer
from assets.staleness import stale_assets
from dihal.run.stages import asset_key
from resources import StorageResource
from storage import (
    Bridge,
    Evaluation,
    FullRegressionControl,
    HiddenStates,
    SamplerCurve,
    Sequences,
    eval_inputs,
)


def reference_texts(run: StageRun, length: int) -> list[str]:
    """Held-out corpus text cut like samples of `length` tokens: MAUVE's reference."""
    from dihal.evaluate.generation import held_out_texts

    bb = run.model()
    return held_out_texts(bb.tokenizer, run.art(Sequences).token_ids()["val"], length, bb.eos_id)


def held_out_reference(run: StageRun, length: int) -> dict:
    """Held-out text cut like samples of `length` tokens, as the eval takes it: the judge's
    features of it (MAUVE's reference) and the texts (the temperature frontier's anchor)."""
    texts = reference_texts(run, length)
    return {"reference": run.judge().features(texts), "anchor_texts": texts}


def evaluate_assets(backbone: str, n_layers: int) -> list:
    def key(stage: str) -> str:  # the asset key of this backbone's stage
        return asset_key(stage, backbone)

    @stage_asset(backbone, "eval", [key("bridge"), key("sampler_steps"), key("hidden_states")],
                 kinds={"jsonl"})
    def evaluation(context: dg.AssetExecutionContext, config: EvalRunConfig) -> dg.MaterializeResult:
        """Unconditional samples of the hybrid at l* and of the backbone (same count, length,
        temperature, seeds): Gen.PPL under the judge, diversity, repetition, latency; and of
        the hybrid at the K chosen on validation and the control hybrids (the regression
        control at l* trained here with the bridge's full budget, layer-drop, ridge), each
        against DiHAL with a paired interval; and the temperature frontier (DiHAL and the
        backbone at each of frontier_temperatures), kept apart."""
        from dihal.evaluate.generation import evaluate_with_controls
        from dihal.replace.sampler_steps import choose_steps
        from dihal.results import SamplerCurveResult

        run, cfg = StageRun(context, backbone), config.to_dihal()
        br, curve, states = run.art(Bridge), run.art(SamplerCurve), run.art(HiddenStates)
        bm, cm, hm = run.require(br, curve, states)
        points = SamplerCurveResult.from_dict(cm.info).rows
        layer = int(bm.info["metrics"]["layer"])
        control, note = full_regression(run, bm, layer)
        ups = [a for a, _ in eval_inputs(run.layout, backbone, hm, layer)]
        return run.produce(run.art(Evaluation), cfg, ups, lambda: evaluate_with_controls(
            run.model(), br.read(), run.judge(), cfg, progress=run.log,
            **held_out_reference(run, cfg.length), reader=states.reader(),
            train_pairs=pairs_of(run, layer), regression=control, regression_note=note,
            chosen=choose_steps(points), cost_steps=[p.sampler_steps for p in points]),
            judge=run.judge_identity())

    @stage_asset(backbone, "sampler_steps", [key("bridge"), key("hidden_states")], kinds={"parquet"})
    def sampler_steps(context: dg.AssetExecutionContext,
                      config: SamplerCurveRunConfig) -> dg.MaterializeResult:
        """What the sampler's steps K buy at l*: the bridge re-measured with K = 1, 2, 4, 8, 16
        (reconstruction error, hybrid NLL, top-1 agreement) and its latency per token."""
        from dihal.replace.sampler_steps import sampler_steps_curve

        run, cfg = StageRun(context, backbone), config.to_dihal()
        br, states = run.art(Bridge), run.art(HiddenStates)
        run.require(states)
        return run.produce(run.art(SamplerCurve), cfg, [br, states], lambda: sampler_steps_curve(
            run.model(), br.read(), states.reader(), cfg, progress=run.log))

    reeval_job = dg.define_asset_job(
        f"reevaluate_{backbone}", selection=[key("bridgeability"), key("sampler_steps"), key("eval")],
        description="Re-materialise the evaluation assets; the schedule runs it when stale.")

    @dg.schedule(job=reeval_job, cron_schedule="0 3 * * *", name=f"reevaluate_{backbone}_nightly",
                 default_status=dg.DefaultScheduleStatus.STOPPED)
    def reevaluate(context: dg.ScheduleEvaluationContext, storage: StorageResource):
        """Nightly: re-run bridgeability, the sampler-steps curve and eval when an upstream artifact changed since they
        were made (fingerprint mismatch); skip otherwise."""
        stale = stale_assets(storage.layout(), backbone, n_layers)
        if not stale:
            return dg.SkipReason(f"bridgeability_{backbone} and eval_{backbone} are up to date")
        return dg.RunRequest(run_key=None, asset_selection=[dg.AssetKey(a) for a in stale],
                             tags={"reason": "stale: " + ", ".join(stale)})

    return [evaluation, sampler_steps, reeval_job, reevaluate]


def full_regression(run: StageRun, bridge_manifest, layer: int):
    """(the regression control at `layer` with the full budget, None) -- trained, or reused
    when made from the same protocol and hidden states: the bridge stage's protocol with one
    step and one seed, as regression_sweep does with the sweep's -- or (None, why) where its
    training failed (the eval goes on without a regression row and says what to run)."""
    from dataclasses import replace

    from dihal.config import BridgeProtocol

    protocol = replace(BridgeProtocol(**bridge_manifest.config), sampler_steps=1, seeds=1)
    art, states = run.art(FullRegressionControl, layer), run.art(HiddenStates)
    try:
        run.obtain(art, protocol, [states], trainer(run, art, layer, protocol, regression=True),
                   layer=layer)
    except dg.Failure as exc:
        why = (f"the full-budget regression control of layer {layer} could not be trained "
               f"({exc.description}); materialise eval_{run.backbone} again to retry (its "
               f"training resumes from {art.checkpoints})")
        run.warn(why + ": the eval has no regression row")
        return None, why
    return art.read(), None
