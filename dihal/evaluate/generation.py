"""Evaluation of generated text (docs/method.md §4): the hybrid at l* and the backbone itself,
sampled the same way, scored by the same judge and metric code."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from dihal.config import (
    DEFAULT_SAMPLER_RULE,
    EvalConfig,  # noqa: F401 (re-exported)
)
from dihal.evaluate.cost import COST_LENGTH, COST_TIMED_LENGTH, CostSubject, eval_cost
from dihal.evaluate.frontier import anchor_point, point, points_at
from dihal.evaluate.metrics import (
    diversity,
    diversity_spacy,
    empty_rate,
    gen_ppl,
    gen_ppl_first_tokens,
    judge_lengths,
    mauve_interval_seeds,
    mean_length,
    metric_intervals,
    repetition,
)
from dihal.evaluate.ppl_difference import log_ppl_difference
from dihal.generation_inputs import CostTable, SamplerChoice
from dihal.generation_rows import EVAL_ROW, GenerationRow, Sample, filled
from dihal.labels import CHOSEN_K, CONTROL
from dihal.results import EvalResult, TrainedBridge
from dihal.rows import Estimate

if TYPE_CHECKING:
    from dihal.replace.control_hybrids import BuiltBridge


def texts_until_eos(tokenizer, tokens: torch.Tensor, eos_id: int, prompt_len: int = 1,
                    bos_id: int | None = None) -> list[str]:
    """Each sample's text up to (not including) its first EOS, special tokens dropped.
    With `bos_id`, a leading BOS is dropped first (whole-sequence samplers reproduce the BOS
    that starts every training sequence; where BOS = EOS it must not end the text)."""
    out = []
    for row in tokens[:, prompt_len:].tolist():
        if bos_id is not None and row and row[0] == bos_id:
            row = row[1:]
        if eos_id in row:
            row = row[: row.index(eos_id)]
        out.append(tokenizer.decode(row, skip_special_tokens=True))
    return out


def held_out_texts(tokenizer, val_ids, length: int, eos_id: int) -> list[str]:
    """The reference texts MAUVE compares samples with: each held-out sequence's first
    `length` tokens after its BOS, up to its first EOS (as samples are cut)."""
    import torch

    tokens = torch.as_tensor(val_ids)[:, : 1 + length]
    return [t for t in texts_until_eos(tokenizer, tokens, eos_id, prompt_len=1) if t.strip()]


def common_ppl_length(length: int) -> int:
    """The judge-token length L at which every row's length-controlled Gen.PPL is scored: half
    the sampled length (the eval's and the baselines' `length`, 64 by default: L = 32), so that
    most samples of every model reach it although samples are cut at EOS; the same rule for
    every row, so rows sampled at the same length are scored at the same L."""
    return max(1, int(length) // 2)


class PrefixScorer:
    """A judge's scores of `texts` from one pass, for gen_ppl and gen_ppl_first_tokens: a
    sequence asked for later (a text's ids, or their first L + 1) is scored from the pass over
    the text it starts (a causal judge's first L token losses do not depend on what follows;
    equal up to float rounding of another batch). A sequence that starts no text is scored
    by the judge."""

    def __init__(self, judge, texts: list[str]) -> None:
        self.judge = judge
        ids = [judge.encode(t) for t in texts if t.strip()]
        if hasattr(judge, "score_ids"):  # the features MAUVE reads come from the same pass
            tokens, feats = judge.score_ids(ids)
            self._features = {tuple(s): f for s, f in zip(ids, feats, strict=True)}
        else:
            tokens, self._features = judge.token_nll_each(ids), {}
        self._tokens = {tuple(s): t for s, t in zip(ids, tokens, strict=True)}

    def features(self, texts: Sequence[str]):
        """The judge's features of `texts` (Judge.features), from the scoring pass where a text
        was in it, else from the judge (an empty text, which that pass skips, gives the state
        of the judge's BOS alone)."""
        if not self._features:
            return self.judge.features(texts)
        ids = [tuple(self.encode(t)) for t in texts]
        missing = list(dict.fromkeys(t for t, i in zip(texts, ids, strict=True)
                                     if i not in self._features))
        if missing:
            got = self.judge.features(missing)
            self._features.update((tuple(self.encode(t)), f)
                                  for t, f in zip(missing, got, strict=True))
        return torch.stack([self._features[i] for i in ids])

    def encode(self, text: str) -> list[int]:
        return self.judge.encode(text)

    def _prefix(self, seq: tuple[int, ...]):
        got = self._tokens.get(seq)
        if got is not None:
            return got
        return next((t[: len(seq) - 1] for s, t in self._tokens.items()
                     if len(s) > len(seq) and s[: len(seq)] == seq), None)

    def nll_of_ids_each(self, sequences) -> list[tuple[float, int]]:
        found = [self._prefix(tuple(s)) for s in sequences]
        missing = [list(s) for s, f in zip(sequences, found, strict=True) if f is None]
        scored = iter(self.judge.nll_of_ids_each(missing) if missing else [])
        return [(float(f.sum()), int(f.numel())) if f is not None else next(scored)
                for f in found]

    def nll_each(self, texts) -> list[tuple[float, int]]:
        return self.nll_of_ids_each([self.encode(t) for t in texts])


def text_metrics(texts: list[str], judge, *, seed: int = 0, reference=None,
                 ppl_length: int | None = None) -> dict:
    """Gen.PPL (token-weighted, and the mean of per-sample perplexities), diversity (ours, and
    with spaCy's tokens as LD4LG), repetition and length (words, judge tokens) of `texts`,
    with intervals over samples (seeded); with `ppl_length`, Gen.PPL on each sample's first
    `ppl_length` judge tokens (samples shorter than that left out and counted), with its
    interval; each scored sample's judge NLL and token count (`sample_nll`, `sample_tokens`: what
    log_ppl_difference and samples_for_effect read); with `reference` (the judge's features of held-out corpus text), MAUVE against it
    on equal sample counts, with the k-means fit refitted under several seeds inside its
    interval (mauve_interval_seeds; `mauve_diagnostic` below 512 samples a side).

    An empty sample is a failure, counted in every metric's row: the empty rate with its
    interval (`empty_rate`, metrics.empty_rate); Gen.PPL is over the non-empty samples (an
    empty one has no judge token), read beside that rate; diversity pools the n-grams of every
    sample (an empty one adds none) and its jackknife leaves out every sample in turn;
    "samples reaching L" is out of every sample (`ppl_length_empty` the empty ones); MAUVE
    compares every sample, an empty one by the judge's features of an empty text, so that a
    model that often ends at once is that far from held-out text."""
    import math

    scorer = PrefixScorer(judge, texts) if hasattr(judge, "token_nll_each") else judge
    ppl = gen_ppl(scorer, texts)
    lengths = judge_lengths(judge, texts)
    out = {"gen_ppl": ppl.ppl, "gen_ppl_mean": ppl.mean_ppl, "judge_tokens": ppl.n_tokens,
           **empty_rate(texts), "diversity": diversity(texts),
           "diversity_spacy": diversity_spacy(texts), "repetition": repetition(texts),
           "mean_length": mean_length(texts),
           "mean_judge_length": sum(lengths) / len(lengths),
           **metric_intervals(texts, ppl, seed=seed),
           "sample_nll": [a for a, _ in ppl.per_text], "sample_tokens": [b for _, b in ppl.per_text]}
    if ppl_length is not None:
        first = gen_ppl_first_tokens(scorer, texts, ppl_length)  # from the same judge pass
        at = metric_intervals(texts, first.gen, seed=seed)
        out.update({"gen_ppl_at_length": first.gen.ppl,
                    "gen_ppl_at_length_low": at["gen_ppl_low"],
                    "gen_ppl_at_length_high": at["gen_ppl_high"], "ppl_length": ppl_length,
                    "ppl_length_scored": first.gen.n_texts, "ppl_length_short": first.n_short,
                    "ppl_length_empty": first.gen.n_empty})
    kept = [t for t in texts if t.strip()]
    if reference is not None and len(kept) >= 2 and len(reference) >= 2:
        n = min(len(texts), len(reference))  # equal counts a side, the empty samples among them
        out.update(mauve_interval_seeds(scorer.features(texts[:n]), reference[:n], seed=seed))
    else:
        out.update(dict.fromkeys(("mauve", "mauve_low", "mauve_high"), math.nan))
    return out


def evaluate_generation(bridge: BuiltBridge, judge, cfg: EvalConfig,
                        progress: Callable[[str], None] | None = None, *,
                        with_backbone: bool = True, reference=None,
                        extra: Sequence[tuple[str, str, Any, dict]] = ()) -> EvalResult:
    """The eval stage: sample from the hybrid (the bridge at its layer, at its protocol's K)
    and from the backbone,
    the same way; score both with the same judge and metric code (MAUVE against `reference`,
    the judge's features of held-out text, when given). `with_backbone=False` samples the hybrid only (callers that
    already have the backbone's row). `extra`: more models, each (name, role, model with
    `decode` (dihal.replace.control_hybrids.ControlModel), columns added to its row), sampled and
    scored the same way after them; every row after DiHAL's then carries the paired
    difference of log Gen.PPL against DiHAL's (`paired_against_first`)."""
    from dihal.replace.hybrid import decode_backbone

    backbone, layer, hybrid = bridge.backbone, bridge.layer, bridge.hybrid(eta=cfg.eta)
    kw = dict(temperature=cfg.temperature, seed=cfg.seed, batch_size=cfg.batch_size, cached=True)
    # On the CPU the samples depend on the thread count and on the vector instructions torch's
    # kernels use (AVX-512, AVX2, ...: its CPU capability): float sums in another order move the
    # logits by ~1e-6, enough to flip an occasional sampled token (SmolLM2, 64 x 64 tokens: 2 of
    # 64 backbone samples differ between 1 and 2 threads, and between AVX-512 and AVX2 kernels,
    # which moved DiHAL's Gen.PPL from 779.8 to 894.8 between two machines). Same config, threads
    # and kernels: the same samples, bit for bit. Both are recorded with each row.
    models = [(f"DiHAL (l={layer})", "dihal", lambda: hybrid.decode(cfg.n_samples, cfg.length, **kw))]
    if with_backbone:
        models.append(("backbone (AR reference)", "backbone",
                       lambda: decode_backbone(backbone, cfg.n_samples, cfg.length, **kw)))
    for name, role, model, _ in extra:
        models.append((name, role, lambda m=model: m.decode(cfg.n_samples, cfg.length, **kw)))
    scorer = (ScoreMemo(judge) if hasattr(judge, "score_ids") else MemoJudge(judge)) if extra else judge
    rows, samples = sample_and_score(backbone, models, scorer, cfg, progress, reference=reference)
    rows[0] = replace(rows[0], layer=layer, sampler_steps=bridge.protocol_sampler_steps, rule=hybrid.rule)
    first_extra = len(rows) - len(extra)
    rows[first_extra:] = [replace(row, **columns) for row, (_, _, _, columns)
                          in zip(rows[first_extra:], extra, strict=True)]
    if with_backbone:
        ref = rows[1]
        rows = [replace(r, latency_vs_backbone=1.0 if r is ref else
                        r.ms_per_step / ref.ms_per_step) for r in rows]
    if extra:
        rows = filled(paired_against_first(rows, samples, scorer, seed=cfg.seed))
    return EvalResult(rows=rows, samples=samples, judge=judge.info(), layer=layer)


class MemoJudge:
    """A judge whose per-text scores are kept, so that scoring the same texts again (the
    paired comparison after the metrics) costs nothing; everything else is the judge's."""

    def __init__(self, judge) -> None:
        self._judge, self._nll = judge, {}

    def nll_each(self, texts: Sequence[str]) -> list[tuple[float, int]]:
        todo = list(dict.fromkeys(t for t in texts if t not in self._nll))
        if todo:
            self._nll.update(zip(todo, self._judge.nll_each(todo), strict=True))
        return [self._nll[t] for t in texts]

    def __getattr__(self, name: str):
        return getattr(self._judge, name)


class ScoreMemo(MemoJudge):
    """A MemoJudge over a judge with one-pass scoring (Judge.score_ids): every sequence's
    token NLLs and features are kept by its ids, so the metrics' pass (PrefixScorer) serves
    the paired comparison after it, which then runs no judge at all."""

    def __init__(self, judge) -> None:
        super().__init__(judge)
        self._scored: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}

    def score_ids(self, sequences) -> tuple[list[torch.Tensor], torch.Tensor]:
        todo = list(dict.fromkeys(tuple(s) for s in sequences if tuple(s) not in self._scored))
        if todo:
            tokens, feats = self._judge.score_ids([list(t) for t in todo])
            self._scored.update(zip(todo, zip(tokens, feats, strict=True), strict=True))
        got = [self._scored[tuple(s)] for s in sequences]
        feats = (torch.stack([f for _, f in got]) if got
                 else torch.zeros(0, self._judge.model.config.hidden_size))
        return [t for t, _ in got], feats

    def token_nll_each(self, sequences) -> list[torch.Tensor]:
        return self.score_ids(sequences)[0]

    def nll_each(self, texts: Sequence[str]) -> list[tuple[float, int]]:
        tokens = self.token_nll_each([self._judge.encode(t) for t in texts])
        return [(float(t.sum()), int(t.numel())) for t in tokens]


def paired_against_first(rows: list[GenerationRow], samples: list[Sample], judge, *,
                         seed: int = 0) -> list[GenerationRow]:
    """The rows, each after the first with log Gen.PPL(first) - log Gen.PPL(row) (token-weighted)
    with a paired bootstrap interval and p-value over the samples both scored (dihal.evaluate
    .ppl_difference.log_ppl_difference, paired = True: the models draw sample i with the same seed and the
    same uniforms, so sample i of one is paired with sample i of the other), and its verdict:
    "below" (the first's Gen.PPL is lower beyond the 95 % level), "above", or "not
    distinguishable"; NaN and "not distinguishable" where fewer than 2 samples pair up."""

    def scored(model: str) -> dict[int, tuple[float, int]]:
        mine = [s for s in samples if s.model == model and s.text.strip()]
        each = judge.nll_each([s.text for s in mine])
        return {s.index: e for s, e in zip(mine, each, strict=True) if e[1] > 0}

    first, out = scored(rows[0].model), rows[:1]
    for row in rows[1:]:
        other = scored(row.model)
        both = sorted(set(first) & set(other))
        try:
            d = log_ppl_difference([first[i] for i in both], [other[i] for i in both],
                                   paired=True, seed=seed)
        except ValueError:  # fewer than 2 pairs
            d = {"diff": float("nan"), "low": float("nan"), "high": float("nan"),
                 "p": float("nan"), "verdict": "not distinguishable"}
        out.append(replace(row, dihal_log_ppl_diff=Estimate(d["diff"], d["low"], d["high"]),
                           dihal_log_ppl_diff_p=d["p"], dihal_verdict=d["verdict"],
                           paired_samples=len(both)))
    return out




def evaluate_with_controls(backbone, trained: TrainedBridge, judge, cfg: EvalConfig,
                           progress: Callable[[str], None] | None = None, *, reference=None,
                           reader, train_pairs: Callable, regression: TrainedBridge | None = None,
                           regression_note: str | None = None, chosen: dict | None = None,
                           cost_steps: Sequence[int] = (1, 2, 4, 8, 16),
                           anchor_texts: Sequence[str] = ()) -> EvalResult:
    """The eval stage with DiHAL's controls: DiHAL at its protocol's K and the
    backbone (evaluate_generation), then, sampled and scored the same way (count, length,
    temperature, seed, judge):
    - DiHAL at the (rule, K) chosen on validation (`chosen`: dihal.replace.sampler_steps.choose_steps of the
      sampler-steps curve), where that differs from the protocol's (K, default rule);
    - the regression hybrid: `regression`, the regression control at the bridge's layer (the
      eval's: trained with the bridge's full budget; its row is labelled with its budget and
      records its train_tokens; None: no row, and the result says why: `regression_note`);
    - the layer-drop hybrid (hs[0] into block l, BOS pinned as DiHAL's);
    - the ridge hybrid, fitted on the layer's training pairs (`train_pairs()`, raw, as the
      bridge stage builds them) in the bridge's standardisation, its penalty chosen on the
      held-out pairs of `reader`.
    Each row after DiHAL's carries the paired difference of its log Gen.PPL from DiHAL's.
    `anchor_texts`: held-out corpus text cut like the samples, scored as the temperature
    frontier's anchor (temperature_frontier).
    The result's `cost`: FLOPs and measured ms per generated token of the backbone, DiHAL at
    each K of `cost_steps` and each control (controls_cost), and the FLOP model."""

    from dihal.replace.control_hybrids import BuiltBridge

    bridge = BuiltBridge.of(backbone, trained)  # restored once: every row, point and cost below
    extra, notes = control_models(bridge, cfg, progress, reader=reader,
                                  train_pairs=train_pairs, regression=regression, chosen=chosen,
                                  regression_note=regression_note)
    result = evaluate_generation(bridge, judge, cfg, progress, reference=reference, extra=extra)
    frontier = temperature_frontier(bridge, judge, cfg, result.rows, progress,
                                    anchor_texts=anchor_texts)
    if progress:
        progress("cost per generated token: FLOPs and timed decodes")
    cost = controls_cost(bridge, [(n, m, c["sampler_steps"]) for n, role, m, c in extra
                                  if role == CONTROL],
                         steps=cost_steps, length=min(cfg.length, COST_LENGTH), seed=cfg.seed,
                         timed_length=min(cfg.length, COST_TIMED_LENGTH))
    return replace(result, controls=SamplerChoice.from_dict(notes),
                   cost=CostTable.from_dict(cost), frontier=frontier)


def temperature_frontier(bridge: BuiltBridge, judge, cfg: EvalConfig,
                         rows: list[GenerationRow], progress: Callable[[str], None] | None = None,
                         *, anchor_texts: Sequence[str] = ()) -> list[GenerationRow]:
    """The eval's points of the temperature frontier (dihal.evaluate.frontier): DiHAL (the bridge at its
    protocol's K, default rule) and the backbone at each of cfg.frontier_temperatures, sampled
    and scored as their main rows (`rows`: evaluate_generation's, DiHAL's first, the
    backbone's second) but without MAUVE; at cfg.temperature the point is the main row's (not
    sampled again). Each sampled point records its wall time (`sample_seconds`: sampling and
    scoring). With `anchor_texts` (held-out text cut like the samples), its first
    cfg.n_samples scored the same way are the frontier's anchor (frontier.anchor_point)."""
    import time

    from dihal.replace.hybrid import decode_backbone

    backbone, hybrid = bridge.backbone, bridge.hybrid(eta=cfg.eta)
    decoders = {"dihal": hybrid.decode, "backbone": lambda *a, **k: decode_backbone(backbone, *a, **k)}
    out = []
    for row in (r for r in rows if r.role in decoders):
        def measure(t: float, row=row) -> GenerationRow:
            kw = dict(temperature=t, seed=cfg.seed, batch_size=cfg.batch_size, cached=True)
            decode, start = decoders[row.role], time.perf_counter()
            scored, _ = sample_and_score(
                backbone, [(f"{row.model} at T={t:g}", row.role,
                            lambda: decode(cfg.n_samples, cfg.length, **kw))],
                judge, replace(cfg, temperature=t), progress)
            return replace(scored[0], sample_seconds=time.perf_counter() - start)

        def make(t: float, metrics: GenerationRow, sampled: bool, row=row) -> GenerationRow:
            return replace(point(row.model, row.role, t, metrics, sampled=sampled),
                           sample_seconds=metrics.sample_seconds if sampled else 0.0)

        out += points_at(cfg.frontier_temperatures, {cfg.temperature: row}, measure, make)
    if anchor_texts and cfg.frontier_temperatures:
        texts = list(anchor_texts)[: cfg.n_samples]
        out.append(anchor_point(text_metrics(texts, judge, seed=cfg.seed,
                                             ppl_length=common_ppl_length(cfg.length)),
                                len(texts)))
    return out


def control_models(bridge: BuiltBridge, cfg: EvalConfig,
                   progress: Callable[[str], None] | None = None, *, reader,
                   train_pairs: Callable, regression: TrainedBridge | None = None,
                   chosen: dict | None = None,
                   regression_note: str | None = None) -> tuple[list[tuple], dict]:
    """The extra rows of evaluate_with_controls: [(name, role, model, columns)] for DiHAL at
    the chosen (rule, K) where it is not the protocol's, the regression, layer-drop and ridge
    hybrids; and the notes on what was (not) there."""
    from dihal.replace.control_hybrids import (
        fit_layer_ridge,
        layer_drop_hybrid,
        regression_hybrid,
        ridge_hybrid,
    )

    backbone, trained = bridge.backbone, bridge.trained
    layer, k0 = bridge.layer, bridge.protocol_sampler_steps
    extra, notes = [], {"protocol_sampler_steps": k0, "chosen": chosen}
    if chosen is not None and (chosen["sampler_steps"], chosen["rule"]) != (k0, DEFAULT_SAMPLER_RULE):
        extra.append((f"DiHAL (l={layer}, K={chosen['sampler_steps']} {chosen['rule']}, chosen on "
                      "validation)", CHOSEN_K,
                      bridge.hybrid(sampler_steps=chosen["sampler_steps"], rule=chosen["rule"], eta=cfg.eta),
                      {"layer": layer, "sampler_steps": chosen["sampler_steps"], "rule": chosen["rule"]}))
    elif chosen is not None:
        notes["chosen_is_protocol"] = True
    if regression is not None:
        if regression.layer != layer:
            raise ValueError(f"the regression control is of layer {regression.layer}, the bridge "
                             f"of layer {layer}")
        tokens = int(regression.metrics.train_tokens)
        budget = ("full budget" if tokens == int(trained.metrics.train_tokens)
                  else f"{tokens:,} training tokens")
        extra.append((f"regression (l={layer}, {budget})", CONTROL,
                      regression_hybrid(backbone, regression),
                      {"layer": layer, "sampler_steps": 1, "train_tokens": tokens,
                       "denoiser_parameters": int(regression.metrics.denoiser_parameters)}))
    else:
        notes["regression"] = regression_note or f"no regression control of layer {layer}"
    if progress:
        progress(f"fitting the ridge map hs[0] -> h_{layer} on the training pairs")
    ridge = fit_layer_ridge(reader, bridge, train_pairs=train_pairs)
    modules = bridge.modules
    first = modules["first_state"]
    first = first.to(backbone.device) if first is not None else None
    extra.append((f"layer-drop (l={layer})", CONTROL, layer_drop_hybrid(backbone, layer, first),
                  {"layer": layer, "sampler_steps": 0, "train_tokens": 0, "denoiser_parameters": 0}))
    extra.append((f"ridge (l={layer})", CONTROL,
                  ridge_hybrid(backbone, layer, ridge, modules["cond_std"], modules["target_std"],
                               first),
                  {"layer": layer, "sampler_steps": 0, "ridge_lambda": ridge.lam,
                   "ridge_val_mse": ridge.val_mse, "train_tokens": ridge.fit_tokens,
                   "denoiser_parameters": ridge.parameters}))
    return extra, notes


def controls_cost(bridge: BuiltBridge, controls: list[tuple[str, Any, int]], *,
                  steps: Sequence[int], length: int, seed: int = 0,
                  timed_length: int | None = None) -> dict:
    """dihal.evaluate.cost.eval_cost of the backbone, DiHAL at each K of `steps` (default rule) and
    each control hybrid (name, model, its denoiser steps: 1 for the regression hybrid, else 0)."""
    from functools import partial

    from dihal.replace.hybrid import decode_backbone

    backbone, layer = bridge.backbone, bridge.layer
    dihal = {k: bridge.hybrid(sampler_steps=k) for k in sorted(set(steps))}
    # the backbone and DiHAL at each K are priced by the FLOP model (proved equal to the count
    # in tests/unit/test_cost.py); the controls, of other networks, are counted
    subjects = [CostSubject("backbone", partial(decode_backbone, backbone),
                            price=lambda m: m.backbone()),
                *(CostSubject(f"DiHAL (l={layer}, K={k})", h.decode, k, layer,
                              price=lambda m, k=k: m.hybrid(layer, k))
                  for k, h in dihal.items()),
                *(CostSubject(name, m.decode, k, layer) for name, m, k in controls)]

    return eval_cost(backbone, next(iter(dihal.values())).denoiser, subjects, length=length,
                     seed=seed, timed_length=timed_length or COST_TIMED_LENGTH)


def cpu_setting(backbone) -> tuple[int, str]:
    """(CPU threads, CPU kernels) that `backbone`'s samples are drawn with: on the CPU they
    depend on both (sample_eval); (0, "n/a (GPU)") on a GPU."""
    if backbone.device.type != "cpu":
        return 0, "n/a (GPU)"
    return torch.get_num_threads(), torch.backends.cpu.get_cpu_capability()


def sample_and_score(backbone, models: list[tuple[str, str, Callable]], judge, cfg: EvalConfig,
                     progress: Callable[[str], None] | None = None, *,
                     reference=None) -> tuple[list[GenerationRow], list[Sample]]:
    """(rows, samples) of each (name, role, decode) in `models`: `decode()` returns a
    dihal.replace.hybrid.Generation of cfg.n_samples x cfg.length tokens (e.g. `lambda:
    model.decode(cfg.n_samples, cfg.length, temperature=cfg.temperature, seed=cfg.seed,
    batch_size=cfg.batch_size)` for DiHAL's hybrid or a control hybrid of
    dihal.replace.control_hybrids); every model's texts are cut at EOS and scored by the same judge
    and metric code, with the timing and the CPU threads and kernels of the run."""
    rows, samples = [], []
    threads, kernels = cpu_setting(backbone)
    # the unconditional start token every sample is drawn from (the backbone's BOS; an Instruct
    # model's may be a chat-turn opener such as SmolLM2's <|im_start|>): the report states it
    start = {"start_token": backbone.tokenizer.convert_ids_to_tokens(int(backbone.bos_id)),
             "start_token_id": int(backbone.bos_id)}
    for name, role, decode in models:
        if progress:
            progress(f"sampling {cfg.n_samples} x {cfg.length} tokens from {name}")
        gen = decode()
        texts = texts_until_eos(backbone.tokenizer, gen.tokens, backbone.eos_id, gen.prompt_len)
        if progress:
            progress(f"scoring {name} with the judge")
        timing = gen.timing()
        rows.append(GenerationRow.from_dict(
            {"model": name, "role": role,
             **text_metrics(texts, judge, seed=cfg.seed, reference=reference,
                            ppl_length=common_ppl_length(cfg.length)),
             "ms_per_token": timing["ms_per_token"], "ms_per_step": timing["ms_per_step"],
             "n_samples": cfg.n_samples, "length": cfg.length, "temperature": cfg.temperature,
             **start, "cpu_threads": threads, "cpu_kernels": kernels}, EVAL_ROW))
        samples += [Sample(name, i, cfg.seed, t) for i, t in enumerate(texts)]
    return rows, samples
