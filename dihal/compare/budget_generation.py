"""Generation at the training budget's ends: DiHAL at l* against CoDAR (pure compute, no Dagster)

The budget study (dihal.replace.budget) measures bridges by held-out NLL. This piece measures
what they generate at its two ends: DiHAL's bridge at l* and CoDAR, the strongest baseline, are
each trained at the lowest and the highest budget of the study, then sampled and scored as the
eval samples. One `BudgetGenerationRow` per (model, budget).

- DiHAL: the budget study's bridge point at l*, made again: the same training sequences
  (`TrainingTokens` of dihal.replace.budget.study_sequences), the same pairs
  (layer_pairs_for_budget, budget_data), the same protocol (budget_protocol: the sweep bridge's
  at l*, one seed, exactly that many optimiser steps) and the same training call
  (train_layer_bridge), so its weights are the study's. Its hybrid samples as the eval's DiHAL
  row does (the protocol's K, the default rule, `eta`, `temperature`, `seed`, cached decoding)
  and is scored by sample_and_score.
- CoDAR: the baselines stage's own function (dihal.compare.stage.baseline) on the same
  sequences under the same protocol's loop, so the same optimiser steps and training tokens
  (its budget check refuses any other), at DiHAL's denoiser size (+-10 %), its lr, vocabulary
  and seed from the config; its samples at the same count, length and temperature, scored by
  the same judge and metric code (no MAUVE, no frontier).
Each row carries its budget: optimiser steps, the tokens seen and the distinct tokens behind
them (seen_distinct_tokens: the sequences the loop's own sample order visits).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from dihal.bridge import BrownianBridge
from dihal.compare.stage import baseline
from dihal.config import BaselineRunConfig, BridgeProtocol, BudgetGenerationConfig, EvalConfig
from dihal.evaluate.generation import cpu_setting, sample_and_score
from dihal.generation_rows import Budget, BudgetSample, GenerationRow
from dihal.replace.budget import (
    BudgetPlan,
    TrainingTokens,
    budget_data,
    budget_protocol,
    layer_pairs_for_budget,
    plan_budget,
    quiet,
    seen_distinct_tokens,
)
from dihal.replace.hybrid import Hybrid
from dihal.replace.stage import LayerData, train_layer_bridge
from dihal.rows import GENERATION_MODELS, BudgetGenerationRow

DIHAL, CODAR = GENERATION_MODELS
Samples = list[BudgetSample]
OnRow = Callable[[BudgetGenerationRow, Samples], None]


def eval_config(cfg: BudgetGenerationConfig) -> EvalConfig:
    """The eval's generation settings of `cfg` (no frontier: the main temperature only)."""
    return EvalConfig(n_samples=cfg.n_samples, length=cfg.length, temperature=cfg.temperature,
                      seed=cfg.seed, batch_size=cfg.batch_size, eta=cfg.eta,
                      frontier_temperatures=())


def codar_config(cfg: BudgetGenerationConfig) -> BaselineRunConfig:
    """The baselines stage's config of `cfg`: the eval's count, length and temperature, no
    frontier."""
    return BaselineRunConfig(lr=cfg.lr, seed=cfg.seed, n_samples=cfg.n_samples,
                             length=cfg.length, temperature=cfg.temperature,
                             restrict_vocab=cfg.restrict_vocab, frontier_temperatures=())


def row_of(metrics: GenerationRow, *, layer: int, model: str, plan: BudgetPlan,
           distinct_tokens: int, parameters: int, sampler_steps: int, temperature: float,
           seconds: float, setting: tuple[int, str]) -> BudgetGenerationRow:
    """The row of one model at one budget from its metrics (its eval or baseline row), sampled
    under `setting` (dihal.evaluate.generation.cpu_setting)."""
    ppl, div = metrics.gen_ppl, metrics.diversity
    return BudgetGenerationRow(
        layer=layer, model=model, train_steps=plan.train_steps, tokens=plan.tokens,
        distinct_tokens=int(distinct_tokens), denoiser_parameters=int(parameters),
        sampler_steps=int(sampler_steps), temperature=float(temperature),
        gen_ppl=float(ppl.stored), gen_ppl_low=float(ppl.stored_low),
        gen_ppl_high=float(ppl.stored_high), diversity=float(div.stored),
        diversity_low=float(div.stored_low), diversity_high=float(div.stored_high),
        n_samples=int(metrics.n_samples), empty_samples=int(metrics.empty_samples),
        sample_nll=[float(v) for v in metrics.sample_nll],
        sample_tokens=[int(v) for v in metrics.sample_tokens], seconds=round(seconds, 2),
        cpu_threads=int(setting[0]), cpu_kernels=str(setting[1]))


def _stepped(say: Callable[[str], None], what: str, steps: int) -> Callable[[dict], None]:
    """A training loop's progress callback: `say` at every eighth of the steps and at each
    validation."""
    every = max(1, steps // 8)

    def progress(e: dict) -> None:
        if "val_loss" in e or e["step"] % every == 0:
            say(f"{what}: step {e['step']}/{e['total_steps']}")

    return progress


def dihal_at_budget(backbone, judge, data: LayerData, protocol: BridgeProtocol,
                    plan: BudgetPlan, cfg: BudgetGenerationConfig, ckpt_dir, *,
                    device: str = "cpu", distinct_tokens: int,
                    say: Callable[[str], None] = quiet,
                    warn: Callable[[str], None] | None = None
                    ) -> tuple[BudgetGenerationRow, Samples]:
    """DiHAL at one budget: the bridge trained on data.train (the budget's sequences) under
    budget_protocol(protocol, layer, plan), resuming from ckpt_dir, as the budget study trains
    its bridge point; its hybrid sampled and scored as the eval's DiHAL row. `say`: progress;
    `warn` (default `say`): the reason a damaged checkpoint is passed over."""
    t0, layer = time.monotonic(), data.layer
    proto = budget_protocol(protocol, layer, plan)
    denoiser, result, _ = train_layer_bridge(
        data, proto, ckpt_dir, device=device, warn=warn or say,
        progress=_stepped(say, f"DiHAL (l={layer}) @ {plan.train_steps} steps", plan.train_steps))
    if result.step != plan.train_steps:
        raise RuntimeError(f"DiHAL's bridge at layer {layer} stopped at step {result.step} of "
                           f"{plan.train_steps}")
    hybrid = Hybrid(backbone, denoiser.to(backbone.device), BrownianBridge(sigma=proto.sigma),
                    data.cond_std, data.target_std, layer, sampler_steps=proto.sampler_steps,
                    eta=cfg.eta,
                    first_state=data.first_state)
    ecfg = eval_config(cfg)
    kw = dict(temperature=ecfg.temperature, seed=ecfg.seed, batch_size=ecfg.batch_size,
              cached=True)
    name = f"DiHAL (l={layer}, {plan.train_steps} steps)"
    rows, samples = sample_and_score(
        backbone, [(name, "dihal", lambda: hybrid.decode(ecfg.n_samples, ecfg.length, **kw))],
        judge, ecfg, say)
    row = row_of(rows[0], layer=layer, model=DIHAL, plan=plan, distinct_tokens=distinct_tokens,
                 parameters=denoiser.param_count(), sampler_steps=proto.sampler_steps,
                 temperature=ecfg.temperature, seconds=time.monotonic() - t0,
                 setting=cpu_setting(backbone))
    return row, [BudgetSample(DIHAL, plan.train_steps, s.index, s.text) for s in samples]


def codar_at_budget(backbone, judge, ids: np.ndarray, protocol: BridgeProtocol, layer: int,
                    plan: BudgetPlan, cfg: BudgetGenerationConfig, parameters: int, work_dir, *,
                    device: str = "cpu", say: Callable[[str], None] = quiet,
                    warn: Callable[[str], None] | None = None
                    ) -> tuple[BudgetGenerationRow, Samples]:
    """CoDAR at one budget, by the baselines stage's function: trained on `ids` (the budget's
    sequences) under DiHAL's loop at this budget (budget_protocol: the same optimiser steps and
    training tokens), at DiHAL's denoiser size `parameters`, resuming from work_dir; sampled and
    scored at the eval's settings. `say` and `warn` as dihal_at_budget's."""
    t0 = time.monotonic()
    proto = budget_protocol(protocol, layer, plan)
    reference = Budget(denoiser_parameters=int(parameters), train_tokens=plan.tokens,
                       sampler_steps=proto.sampler_steps, seq_len=int(ids.shape[1]))
    bcfg = codar_config(cfg)
    made = baseline(CODAR, backbone, torch.as_tensor(ids), reference, proto.to_dict(), bcfg,
                    Path(work_dir), judge, progress=say, device=device, warn=warn or say)
    row = made.row
    if row.train_steps != plan.train_steps:
        raise RuntimeError(f"CoDAR stopped at step {row.train_steps} of {plan.train_steps}")
    # its own sample order (its seed), as DiHAL's distinct tokens are counted by DiHAL's
    distinct = seen_distinct_tokens(ids, replace(proto, seed=bcfg.seed), plan)
    out = row_of(row, layer=layer, model=CODAR, plan=plan, distinct_tokens=distinct,
                 parameters=row.budget.denoiser_parameters,
                 sampler_steps=row.budget.sampler_steps, temperature=bcfg.temperature,
                 seconds=time.monotonic() - t0, setting=cpu_setting(backbone))
    return out, [BudgetSample(CODAR, plan.train_steps, i, t) for i, t in enumerate(made.texts)]


def generation_plans(cfg: BudgetGenerationConfig, batch_size: int,
                     tokens: TrainingTokens) -> list[BudgetPlan]:
    """The plans of the lowest and the highest budget (plan_budget over `tokens`)."""
    return [plan_budget(b, batch_size, tokens.ids.shape[1], len(tokens.ids)) for b in cfg.ends]


def generate_at_budgets(backbone, judge, reader, layer: int, protocol: BridgeProtocol,
                        tokens: TrainingTokens, extract, cfg: BudgetGenerationConfig, work_dir,
                        *, device: str = "cpu",
                        finished: Iterable[tuple[BudgetGenerationRow, Samples]] = (),
                        say: Callable[[str], None] = quiet,
                        progress: Callable[[str], None] | None = None,
                        on_row: OnRow | None = None) -> tuple[list[BudgetGenerationRow], Samples]:
    """Every row: per budget of cfg.ends (lowest first), DiHAL at `layer` (l*), then CoDAR at
    DiHAL's size. A row in `finished` (same layer, model, steps) is not made again, and the
    pairs are computed only as far as DiHAL's unfinished budgets need. Each new row goes to
    `on_row` with its samples as soon as it exists (to be kept); the trainings checkpoint under
    work_dir/<model>-<steps>/ so that one interrupted mid-way resumes. `say`: milestones and
    warnings; `progress`: the trainings' and the sampling's steps (default `say`; it may drop
    messages, as a throttled log does). Returns (rows in (steps, model) order, their samples)."""
    progress = progress or say
    out = {r.key: (r, s) for r, s in finished if r.layer == layer}
    done = set(out)

    def keep(row: BudgetGenerationRow, samples: Samples) -> None:
        out[row.key] = (row, samples)
        say(f"{row.model} (l={layer}) @ {row.train_steps} steps: Gen.PPL {row.gen_ppl:.2f} "
            f"[{row.gen_ppl_low:.2f}, {row.gen_ppl_high:.2f}], diversity {row.diversity:.3f} "
            f"({row.seconds:.0f} s)")
        if on_row is not None:
            on_row(row, samples)

    plans = generation_plans(cfg, protocol.batch_size, tokens)
    todo = [p for p in plans if (DIHAL, p.train_steps) not in done]
    data = layer_pairs_for_budget(backbone, reader, layer, protocol, tokens,
                                  max(p.sequences for p in todo), extract, say) if todo else None
    root = Path(work_dir)
    for plan in plans:
        ids = tokens.ids[: plan.sequences]
        if (DIHAL, plan.train_steps) not in done:
            distinct = seen_distinct_tokens(ids, budget_protocol(protocol, layer, plan), plan)
            keep(*dihal_at_budget(backbone, judge, budget_data(data, plan.sequences), protocol,
                                  plan, cfg, root / f"{DIHAL}-{plan.train_steps}", device=device,
                                  distinct_tokens=distinct, say=progress, warn=say))
        if (CODAR, plan.train_steps) not in done:
            size = out[(DIHAL, plan.train_steps)][0].denoiser_parameters
            keep(*codar_at_budget(backbone, judge, ids, protocol, layer, plan, cfg, size,
                                  root / f"{CODAR}-{plan.train_steps}", device=device, say=progress,
                                  warn=say))
    ordered = sorted(out.values(),
                     key=lambda x: (x[0].train_steps, GENERATION_MODELS.index(x[0].model)))
    return [r for r, _ in ordered], [s for _, samples in ordered for s in samples]
