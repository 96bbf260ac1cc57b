"""What the number of sampler steps K buys at l*: the sampler-steps curve of one trained bridge.

The sampler-steps curve re-measures one trained bridge with K = 1, 2, 4, 8, 16 steps of its
deterministic sampler, under each update rule asked for (cfg.rules: ancestral, marginal):
reconstruction error and the hybrid's next-token NLL and top-1 agreement on the held-out
sequences (as the sweep measures them), and the hybrid's generation latency per token;
`choose_steps` picks the (rule, K) of lowest held-out hybrid NLL. The bridge is not retrained:
only the sampler changes. The row of the K the bridge was trained with is the bridge's own
measurement (its metrics), not a second one; at K = 1 every rule takes the one step from t = 1
to the predicted endpoint, so the other rules' K = 1 rows are the default rule's (marked
`same_as_rule`), not measured again. Pure compute, no Dagster.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from dihal.config import DEFAULT_SAMPLER_RULE as DEFAULT_RULE
from dihal.config import SamplerCurveConfig
from dihal.generation_inputs import CurvePoint
from dihal.results import SamplerCurveResult, TrainedBridge


def sampler_steps_curve(backbone, trained: TrainedBridge, reader, cfg: SamplerCurveConfig,
                        progress: Callable[[str], None] | None = None) -> SamplerCurveResult:
    """The bridge `trained` (at its layer) measured with each K in cfg.steps."""
    from dihal.replace.control_hybrids import BuiltBridge
    from dihal.replace.stage import (
        LayerData,
        check_candidate,
        held_out,
        held_out_reference,
        measure_bridge,
    )

    built = BuiltBridge.of(backbone, trained)  # restored once: measured and sampled at each K
    bridge = built.modules
    protocol = trained.hparams.protocol
    layer = trained.layer
    check_candidate(reader, layer)
    val, val_ids = held_out(reader, layer, protocol, bridge["cond_std"], bridge["target_std"])
    data = LayerData(layer=layer, train=None, val=val, cond_std=bridge["cond_std"],
                     target_std=bridge["target_std"], val_ids=val_ids,
                     first_state=bridge["first_state"], reference=held_out_reference(reader, protocol))
    rows: list[CurvePoint] = []
    for rule in cfg.rules:
        for k in cfg.steps:
            if k == 1 and rule != DEFAULT_RULE and (same := next(
                    (p for p in rows if p.sampler_steps == 1 and p.rule == DEFAULT_RULE), None)):
                # one step from t = 1 lands on the predicted endpoint under every rule (the
                # marginal of x_0 is z0_hat itself): the same states, the same measurement
                rows.append(replace(same, rule=rule, measure_seconds=0.0,
                                    same_as_rule=DEFAULT_RULE))
                continue
            if progress:
                progress(f"layer {layer}: sampler with K = {k} steps, {rule} rule")
            t0 = time.perf_counter()
            # the bridge was measured with its own K and the default rule, on these sequences,
            # when trained
            reused = k == protocol.sampler_steps and rule == DEFAULT_RULE and trained.metrics is not None
            if reused:
                measured = trained.metrics.to_dict()
            else:
                measured = measure_bridge(
                    backbone, bridge["denoiser"], data, replace(protocol, sampler_steps=k),
                    val_loss=trained.metrics.val_loss if trained.metrics else None, rule=rule)
            measure_s = time.perf_counter() - t0
            gen = built.hybrid(sampler_steps=k, rule=rule).decode(cfg.n_samples, cfg.length, seed=cfg.seed,
                                                              batch_size=cfg.n_samples)
            rows.append(CurvePoint(
                sampler_steps=k, rule=rule, recon_error=measured["recon_error"],
                hybrid_nll=measured["hybrid_nll"], backbone_nll=measured["backbone_nll"],
                top1_agreement=measured["top1_agreement"],
                ms_per_token=gen.timing()["ms_per_token"], measure_seconds=measure_s,
                protocol_sampler_steps=protocol.sampler_steps, from_bridge_metrics=reused))
    return SamplerCurveResult(rows=rows, layer=layer)


def choose_steps(points: list[CurvePoint]) -> dict:
    """The (rule, K) of lowest held-out hybrid NLL on a sampler-steps curve (the points of
    `sampler_steps_curve`), with its NLL; ties go to the smaller K (cheaper)."""
    if not points:
        raise ValueError("choose_steps needs at least one point of the sampler-steps curve")
    best = min(points, key=lambda p: (p.hybrid_nll, p.sampler_steps))
    return {"rule": best.rule, "sampler_steps": best.sampler_steps, "hybrid_nll": best.hybrid_nll}
