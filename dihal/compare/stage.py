"""Baselines at DiHAL's budget and the full-training comparison (docs/method.md §2, §5)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from dihal.bridge.train import loop_config
from dihal.compare.baselines import build_baseline
from dihal.compare.baselines.base import baseline_loss, check_budget
from dihal.config import DEFAULT_SAMPLER_RULE, BaselineRunConfig, BridgeProtocol
from dihal.evaluate.frontier import point, points_at
from dihal.evaluate.generation import (
    common_ppl_length,
    evaluate_generation,
    text_metrics,
    texts_until_eos,
)
from dihal.evaluate.ppl_difference import log_ppl_difference
from dihal.generation_inputs import (
    SEED_MEASURES,
    FullTrainingRow,
    RolePair,
    SamplerChoice,
    filled_pairs,
)
from dihal.generation_rows import (
    BASELINE_ROW,
    BUDGET_COLUMNS,
    COMPARISON_ROW,
    EVAL_ROW,
    FRONTIER_POINT,
    FULL_TRAINING_GENERATION,
    GENERATION_COLUMNS,
    GENERATION_KEYS,
    LENGTH_KEYS,
    Budget,
    GenerationRow,
    RoleSample,
    Sample,
    filled,
)
from dihal.inputs import BridgeabilitySummary, SeedSpread
from dihal.labels import (
    BASELINE,
    CHOSEN_K,
    CHOSEN_ON_VALIDATION,
    CONTROL,
    DIHAL,
    FULL_TRAINING_ROLES,
    NATIVE_ROLE,
    PROTOCOL_K,
)
from dihal.replace.control_hybrids import BuiltBridge
from dihal.results import (
    BaselineResult,
    BridgeMetrics,
    ComparisonResult,
    FullTrainingResult,
    TrainedBridge,
)
from dihal.rows import ROLE_PAIRS
from dihal.seeds import derive_seed
from dihal.training import sample_budget, train_model
from dihal.uncertainty import holm, paired_verdict, seed_spread


def reference_budget(bridge: BridgeMetrics, sampler_steps: int, seq_len: int) -> Budget:
    """The budget of DiHAL's bridge at l*: its denoiser size, tokens consumed, sampler steps."""
    return Budget(denoiser_parameters=int(bridge.denoiser_parameters),
                  train_tokens=int(bridge.train_tokens), sampler_steps=int(sampler_steps),
                  seq_len=seq_len)


def baseline(
    name: str,
    backbone,
    train_ids: torch.Tensor,
    reference: Budget,
    bridge_protocol: dict,
    cfg: BaselineRunConfig,
    workdir: Path,
    judge,
    progress: Callable[[str], None] | None = None,
    device: str = "cpu",
    reference_texts: list[str] | None = None,
    warn: Callable[[str], None] | None = None,
) -> BaselineResult:
    """The baseline stage: build `name` at DiHAL's size, check the budget, train it with the
    bridge's protocol (its loop, schedule and budget; lr and seed from `cfg`; resumable in
    workdir; `warn` gets the reason a damaged checkpoint is passed over), sample and score. Its
    row carries the budget it ran under."""

    n_seq, seq_len = train_ids.shape
    space = TokenSpace.of(backbone, train_ids, cfg.restrict_vocab)
    model = build_baseline(name, embeddings=space.embeddings, seq_len=seq_len,
                           target_params=reference.denoiser_parameters,
                           seed=derive_seed(cfg.seed, "baseline", name), bos_id=space.bos,
                           eos_id=space.eos)
    tcfg = replace(loop_config(BridgeProtocol(**bridge_protocol), device), lr=cfg.lr,
                   seed=cfg.seed)
    budget = Budget(denoiser_parameters=model.denoiser_parameters(),
                    train_tokens=sample_budget(n_seq, tcfg) * seq_len,
                    sampler_steps=reference.sampler_steps, seq_len=seq_len)
    check_budget(reference, budget, name)  # before spending any compute

    def log(entry: dict) -> None:
        if progress:
            progress(f"{name}: step {entry['step']}/{entry['total_steps']} loss {entry['loss']:.4f} "
                     f"({entry['elapsed_s']:.0f} s)")

    trained = train_model(model, baseline_loss(space.train_ids), n_seq, tcfg,
                          Path(workdir) / "checkpoints", log, protocol={"baseline": name},
                          device=device, warn=warn)
    features = judge.features(reference_texts) if reference_texts else None
    texts, metrics = _samples_and_metrics(name, model, backbone, space, cfg, reference, judge,
                                          features, device)
    total = getattr(model, "total_parameters", lambda: sum(p.numel() for p in model.parameters()))()
    row = replace(metrics, model=name, role=BASELINE, budget=budget,
                  total_parameters=int(total), train_steps=trained.step,
                  train_seconds=trained.wall_s,
                  final_loss=(trained.train_loss if trained.train_loss is not None
                              else float("nan")),
                  vocab_size=int(space.embeddings.shape[0]))
    hparams = {"baseline": name, "config": cfg.__dict__, "budget": budget.to_dict(),
               "reference": reference.to_dict(), "train_config": tcfg.to_dict()}
    return BaselineResult(name=name, row=row, texts=texts, tensors=model.state_dict(),
                          hparams=hparams)


@dataclass
class TokenSpace:
    """The token table a baseline works in: the backbone's embeddings, or (restrict_vocab) only
    the rows of the tokens the training data uses, plus BOS and EOS; `vocab` maps its ids back
    to the backbone's (None: the backbone's own ids)."""

    train_ids: torch.Tensor
    embeddings: torch.Tensor
    vocab: torch.Tensor | None
    bos: int
    eos: int

    @classmethod
    def of(cls, backbone, train_ids: torch.Tensor, restrict_vocab: bool) -> TokenSpace:
        emb = backbone.decoder.embed_tokens.weight.detach().float().cpu()
        if not restrict_vocab:
            return cls(train_ids, emb, None, backbone.bos_id, backbone.eos_id)
        vocab = torch.unique(torch.cat([train_ids.flatten(),
                                        torch.tensor([backbone.bos_id, backbone.eos_id])]))
        lookup = torch.full((emb.shape[0],), -1, dtype=torch.long)
        lookup[vocab] = torch.arange(len(vocab))
        return cls(lookup[train_ids], emb[vocab], vocab, int(lookup[backbone.bos_id]),
                   int(lookup[backbone.eos_id]))

    def to_backbone(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens if self.vocab is None else self.vocab[tokens]


def _samples_and_metrics(name: str, model, backbone, space: TokenSpace, cfg: BaselineRunConfig,
                         reference: Budget, judge, features, device: str
                         ) -> tuple[list[str], GenerationRow]:
    """A trained baseline's texts and metrics at the common temperature (cfg.temperature, the
    eval's; every row of the comparison decodes there), a baseline's row without its model,
    role and training figures; a recipe whose own default differs (CoDAR's 0.7) also gets its
    metrics there, as its `native` (an extra row); and its points of the temperature frontier,
    its `frontier` (baseline_frontier)."""
    import time

    def at(temperature: float | None, mauve: bool = True) -> tuple[list[str], GenerationRow]:
        """Samples at `temperature` (None: the recipe has none, it rounds deterministically),
        each time from the same seeded generator, and their metrics (MAUVE with `mauve`)."""
        start = time.perf_counter()
        gen = torch.Generator(device=device).manual_seed(derive_seed(cfg.seed, "sample", name))
        kw = {} if temperature is None else {"temperature": temperature}
        with torch.no_grad():
            tokens = model.sample(cfg.n_samples, cfg.length, reference.sampler_steps, gen,
                                  **kw).cpu()
        texts = texts_until_eos(backbone.tokenizer, space.to_backbone(tokens), backbone.eos_id,
                                prompt_len=0, bos_id=backbone.bos_id)
        return texts, GenerationRow.from_dict(
            {**text_metrics(texts, judge, seed=cfg.seed, reference=features if mauve else None,
                            ppl_length=common_ppl_length(cfg.length)),
             "temperature": temperature, "n_samples": cfg.n_samples,
             "sample_seconds": time.perf_counter() - start}, BASELINE_ROW)

    native = model.native_temperature()
    texts, metrics = at(None if native is None else cfg.temperature)
    measured = {metrics.temperature: metrics}
    if native is not None and native != cfg.temperature:
        measured[native] = at(native)[1]
        metrics = replace(metrics, native=measured[native])
    frontier = baseline_frontier(name, native is not None, cfg.frontier_temperatures, measured,
                                 lambda t: at(t, mauve=False)[1])
    return texts, replace(metrics, frontier=frontier)


def baseline_frontier(name: str, has_temperature: bool, temperatures: tuple[float, ...],
                      measured: dict[float | None, GenerationRow],
                      measure: Callable[[float], GenerationRow]) -> list[GenerationRow]:
    """A baseline's points of the temperature frontier (dihal.evaluate.frontier.point): one per
    temperature where the recipe has one (from `measured`, temperature -> metrics, where it
    holds that temperature: the common and the native one; else `measure(t)`); one point at
    temperature None for a recipe that rounds deterministically (its row's); none where
    `temperatures` is empty."""

    def make(t: float | None, metrics: GenerationRow, sampled: bool) -> GenerationRow:
        return replace(point(name, "baseline", t, metrics, sampled=sampled),
                       sample_seconds=metrics.sample_seconds if sampled else 0.0)

    if not temperatures:
        return []
    if not has_temperature:
        return [make(None, measured[None], False)]
    return points_at(temperatures, measured, measure, make)


# ---------------------------------------------------------------------------------------------
# The stages


def comparison(eval_rows: list[dict], bridge: BridgeMetrics, sampler_steps: int,
               baselines: dict[str, dict], missing: list[str],
               eval_frontier: list[dict] = ()) -> ComparisonResult:
    """The comparison stage: one table of DiHAL, the backbone and the baselines (`baselines`:
    name -> baseline row), with the budget each ran under (the backbone has none); and the
    temperature frontier: the eval's points (`eval_frontier`), then each baseline's. The eval's
    rows, points and the baselines' rows as their manifests hold them."""
    dihal_budget = dict(zip(BUDGET_COLUMNS, (bridge.denoiser_parameters, bridge.train_tokens,
                                             sampler_steps, None), strict=True))
    # the optimiser steps the bridge at l* took (DiHAL's rows only: the baselines are matched
    # on tokens, budgets_matched)
    steps = {"train_steps": bridge.train_steps}

    # a row without a column of LENGTH_KEYS measured none (no common length, no MAUVE
    # reference): None
    def measured(r: GenerationRow) -> GenerationRow:
        return r.select(COMPARISON_ROW, ("model", "role", *GENERATION_KEYS, "repetition",
                                         "mean_length", *LENGTH_KEYS))

    # DiHAL at the K chosen on validation: the same bridge, sampled with that K; the control
    # hybrids' rows and the backbone's carry their paired difference from DiHAL's Gen.PPL
    def budget(r: GenerationRow) -> dict:
        if r.role == DIHAL:
            return {**dihal_budget, **steps}
        if r.role == CHOSEN_K:
            return {**dihal_budget, **steps, "sampler_steps": r.sampler_steps}
        if r.role == CONTROL:  # what the eval recorded
            return {"denoiser_parameters": r.denoiser_parameters,
                    "train_tokens": r.train_tokens, "sampler_steps": r.sampler_steps, "seq_len": None}
        return dict.fromkeys(BUDGET_COLUMNS)

    rows = [replace(measured(r), **budget(r), layer=r.layer,
                    dihal_log_ppl_diff=r.dihal_log_ppl_diff,
                    dihal_log_ppl_diff_p=r.dihal_log_ppl_diff_p, dihal_verdict=r.dihal_verdict,
                    paired_samples=r.paired_samples)
            for r in (GenerationRow.from_dict(d, EVAL_ROW) for d in eval_rows)]
    runs = {n: GenerationRow.from_dict(d, BASELINE_ROW) for n, d in baselines.items()}
    for n, r in runs.items():
        rows.append(replace(measured(r), model=n, role=BASELINE, **r.budget.to_dict()))
        if r.native:  # the recipe's own temperature: an extra row, labelled, not ranked
            rows.append(replace(measured(r.native),
                                model=f"{n} (native T={r.native.temperature:g})",
                                role=NATIVE_ROLE, **r.budget.to_dict()))
    rows = filled(rows)  # every row has every column
    seq_len = next((r.seq_len for r in rows if r.seq_len), None)
    rows = [replace(r, seq_len=seq_len) if r.role in (DIHAL, CHOSEN_K, CONTROL) and r.train_tokens
            else r for r in rows]
    frontier = [*(GenerationRow.from_dict(p, FRONTIER_POINT) for p in eval_frontier),
                *(p for r in runs.values() for p in r.frontier or [])]
    return ComparisonResult(rows=rows, missing=missing, frontier=frontier)


def full_training(roles: dict[str, int], bridge_at: Callable[[int], TrainedBridge], backbone,
                  judge, cfg, progress: Callable[[str], None] | None = None, *,
                  reference_texts: list[str] | None = None, chosen: dict | None = None,
                  from_eval: list[dict] | None = None,
                  eval_samples: list[Sample] | None = None) -> FullTrainingResult:
    """The full_training stage: the full-budget bridge of each role's layer (`bridge_at` reuses
    or trains it, with the bridge stage's training seeds), evaluated like the bridge at l*
    (bridgeability, with the spread over seeds, and generation) at the protocol's K and at the
    (rule, K) `chosen` on validation at l* (dihal.replace.sampler_steps.choose_steps; one row where that is
    the protocol's K and default rule), each generation row labelled by its `sampler`; the
    chosen row carries the paired difference of its log Gen.PPL from the protocol row's.
    `from_eval`: the eval's rows, where the eval sampled this very bridge at l* with the same
    config and chosen (rule, K): l*'s generation rows are taken from them (the same samples),
    not drawn again; its rows say so (`from_eval`), and its samples are the eval's
    (`eval_samples`). Every role's samples are kept (the result's `samples`, each with its
    judge NLL and tokens), and the protocol rows carry the paired generation test of the roles
    against each other (paired_roles)."""

    rows, sampler, samples = [], {"chosen": chosen}, []
    reference = judge.features(reference_texts) if reference_texts else None
    for role, layer in roles.items():
        trained = bridge_at(layer)
        k0 = int(trained.hparams.protocol.sampler_steps)
        sampler.update(protocol_sampler_steps=k0, chosen_is_protocol=chosen is not None and (
            chosen["sampler_steps"], chosen["rule"]) == (k0, DEFAULT_SAMPLER_RULE))
        at_chosen = bool(chosen) and not sampler["chosen_is_protocol"]
        reused = _eval_rows(from_eval, layer, at_chosen)
        if reused is not None:
            hybrids, drawn = reused, eval_samples or []
        else:
            bridge = BuiltBridge.of(backbone, trained)  # restored once for both its samplers
            extra = _at_chosen(bridge, cfg, chosen) if at_chosen else []
            made = evaluate_generation(bridge, judge, cfg, progress=progress,
                                       with_backbone=False, reference=reference, extra=extra)
            hybrids, drawn = made.rows, made.samples
        samples += [RoleSample(role, layer, label, s)
                    for hybrid, label in zip(hybrids, (PROTOCOL_K, CHOSEN_ON_VALIDATION),
                                             strict=False)
                    for s in drawn if s.model == hybrid.model]
        rows += [FullTrainingRow(role, layer, **_bridge_columns(trained),
                                 from_eval=reused is not None, sampler=label, sampler_steps=hybrid.sampler_steps,
                                 rule=hybrid.rule, generation=hybrid.select(
                                     FULL_TRAINING_GENERATION,
                                     GENERATION_COLUMNS[FULL_TRAINING_GENERATION]))
                 for hybrid, label in zip(hybrids, (PROTOCOL_K, CHOSEN_ON_VALIDATION),
                                          strict=False)]
    samples = _scored(samples, judge)
    rows = filled_pairs(paired_roles(rows, samples, seed=cfg.seed))  # every row, every column
    return FullTrainingResult(rows, sampler=SamplerChoice.from_dict(sampler), samples=samples)


def _scored(samples: list[RoleSample], judge) -> list[RoleSample]:
    """Each sample with its judge NLL and token count (`nll`, `tokens`; None for an empty
    text, which the judge cannot score)."""
    texts = [s.sample.text for s in samples if s.sample.text.strip()]
    each = iter(judge.nll_each(texts) if texts else [])
    out = []
    for s in samples:
        nll, tokens = next(each) if s.sample.text.strip() else (None, None)
        out.append(replace(s, nll=nll, tokens=tokens))
    return out


def paired_roles(rows: list[FullTrainingRow], samples: list[RoleSample], *, seed: int = 0
                 ) -> list[FullTrainingRow]:
    """The rows with the paired generation test of l*, the oracle and the worst layer at the
    protocol's K: log Gen.PPL(first) - log Gen.PPL(second), token-weighted, over the samples both scored,
    paired by sample INDEX (the roles draw sample i with the same seed and uniforms;
    dihal.evaluate.ppl_difference.log_ppl_difference, paired), Holm-corrected over the pairs tested, and
    its verdict ("below": the first's Gen.PPL lower beyond the 95 % level). Written on the
    second role's protocol row (its `pair_tests`); a pair with fewer than 2 shared scored samples
    is not tested (NaN, "not distinguishable"). Covered by test_paired_roles_*."""

    def scored(role: str) -> dict[int, tuple[float, int]]:
        return {s.sample.index: (s.nll, s.tokens) for s in samples
                if s.role == role and s.sampler == PROTOCOL_K and s.tokens}

    target = {r.role: i for i, r in enumerate(rows) if r.sampler == PROTOCOL_K}
    tests = []
    for first, second in ROLE_PAIRS:
        if first not in target or second not in target:
            continue
        a, b = scored(first), scored(second)
        both = sorted(set(a) & set(b))
        try:
            d = log_ppl_difference([a[i] for i in both], [b[i] for i in both], paired=True,
                                   seed=seed)
        except ValueError:  # fewer than 2 pairs
            d = {k: float("nan") for k in ("diff", "low", "high", "p")}
        tests.append((first, second, d, len(both)))
    rows = list(rows)
    for (first, second, d, n), adj in zip(tests, holm([t[2]["p"] for t in tests]), strict=True):
        row = rows[target[second]]
        rows[target[second]] = replace(row, pair_tests={**row.pair_tests, first: RolePair(
            d["diff"], d["low"], d["high"], d["p"], adj, paired_verdict(d["diff"], adj), n)})
    return rows


def _eval_rows(rows: list[dict] | None, layer: int, at_chosen: bool
               ) -> list[GenerationRow] | None:
    """The eval's DiHAL rows of `layer` (at the protocol's K, and at the chosen K where
    `at_chosen`; `rows` as the eval's manifest holds them), or None where the eval has not got
    them."""

    rows = [GenerationRow.from_dict(r, EVAL_ROW) for r in rows or []]
    dihal = [r for r in rows if r.role == DIHAL and r.layer == layer]
    chosen = [r for r in rows if r.role == CHOSEN_K and r.layer == layer]
    if not dihal or (at_chosen and not chosen):
        return None
    return [dihal[0], *chosen[:1]] if at_chosen else dihal[:1]


def _at_chosen(bridge: BuiltBridge, cfg, chosen: dict) -> list[tuple]:
    """The extra model of evaluate_generation: the same bridge sampled at the chosen (rule, K)."""

    k, rule = chosen["sampler_steps"], chosen["rule"]
    return [(f"DiHAL (l={bridge.layer}, K={k} {rule}, chosen on validation at l*)", CHOSEN_K,
             bridge.hybrid(sampler_steps=k, rule=rule, eta=cfg.eta),
             {"sampler_steps": k, "rule": rule})]


def _bridge_columns(trained: TrainedBridge) -> dict:
    """A full-training bridge's measures (its kept seed), its training tokens, optimiser steps
    and seconds, and over its training seeds (the kept one and the replicates): how many, and
    per measure of SEED_MEASURES their mean, sd (ddof 1), min and max (None with one seed):
    FullTrainingRow's fields."""
    import math

    m, seeds = trained.metrics, [trained.metrics, *trained.seed_metrics]
    out = {"val_loss": m.val_loss, "t1_loss": m.t1_loss, "recon_error": m.recon_error,
           "hybrid_nll": m.hybrid_nll, "hybrid_nll_select": m.hybrid_nll_select,
           "hybrid_nll_judge": m.hybrid_nll_judge, "top1_agreement": m.top1_agreement,
           "train_tokens": m.train_tokens, "train_steps": m.train_steps, "train_seconds": m.seconds,
           "train_seconds_all_seeds": sum(s.seconds for s in seeds), "n_seeds": len(seeds)}
    spreads = {}
    for measure in SEED_MEASURES:
        values = [getattr(s, measure) for s in seeds]
        values = [math.nan if v is None else float(v) for v in values]
        measured = len(seeds) > 1 and any(not math.isnan(v) for v in values)
        spread = seed_spread([values], [m.layer])[0] if measured else {}
        spreads[measure] = SeedSpread(*(spread.get(k) for k in ("mean", "sd", "min", "max")))
    return {**out, "seed_columns": spreads}


def full_training_roles(bridgeability: BridgeabilitySummary) -> dict[str, int]:
    """role -> layer: l*, the oracle and the worst swept layer."""
    return dict(zip(FULL_TRAINING_ROLES, (bridgeability.l_star, bridgeability.oracle,
                                          bridgeability.worst), strict=True))
