"""Evaluation of generated text (docs/method.md §4): the hybrid at l* and the backbone itself,
sampled the same way, scored by the same judge and metric code."""

from __future__ import annotations

from collections.abc import Callable

import torch

from dihal.config import EvalConfig  # noqa: F401 (re-exported)
from dihal.results import EvalResult, TrainedBridge


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
        self._tokens = {tuple(s): t for s, t in zip(ids, judge.token_nll_each(ids), strict=True)}

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
    log_ppl_difference and samples_for_power read); with `reference` (the judge's features of held-out corpus text), MAUVE against it
    on equal sample counts, with the k-means fit refitted under several seeds inside its
    interval (mauve_interval_seeds; `mauve_diagnostic` below 512 samples a side)."""
    import math

    from dihal.metrics import (
        diversity,
        diversity_spacy,
        gen_ppl,
        gen_ppl_first_tokens,
        judge_lengths,
        mauve_interval_seeds,
        mean_length,
        metric_intervals,
        repetition,
    )

    scorer = PrefixScorer(judge, texts) if hasattr(judge, "token_nll_each") else judge
    ppl = gen_ppl(scorer, texts)
    lengths = judge_lengths(judge, texts)
    out = {"gen_ppl": ppl.ppl, "gen_ppl_mean": ppl.mean_ppl, "judge_tokens": ppl.n_tokens,
           "empty_samples": ppl.n_empty, "diversity": diversity(texts),
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
                    "ppl_length_scored": first.gen.n_texts, "ppl_length_short": first.n_short})
    kept = [t for t in texts if t.strip()]
    if reference is not None and len(kept) >= 2 and len(reference) >= 2:
        n = min(len(kept), len(reference))  # equal counts a side
        out.update(mauve_interval_seeds(judge.features(kept[:n]), reference[:n], seed=seed))
    else:
        out.update(dict.fromkeys(("mauve", "mauve_low", "mauve_high"), math.nan))
    return out


def evaluate_generation(backbone, trained: TrainedBridge, judge, cfg: EvalConfig,
                        progress: Callable[[str], None] | None = None, *,
                        with_backbone: bool = True, reference=None) -> EvalResult:
    """The eval stage: sample from the hybrid (the bridge at its layer) and from the backbone,
    the same way; score both with the same judge and metric code (MAUVE against `reference`,
    the judge's features of held-out text, when given). `with_backbone=False` samples the hybrid only (callers that
    already have the backbone's row)."""
    from dihal.bridge import BrownianBridge
    from dihal.hybrid import Hybrid, decode_backbone
    from dihal.replace import restore_bridge

    bridge = restore_bridge(trained, device=str(backbone.device))
    hp = bridge["hparams"]
    layer = int(hp["layer"])
    proto = hp["protocol"]
    hybrid = Hybrid(backbone, bridge["denoiser"], BrownianBridge(sigma=proto["sigma"]),
                    bridge["cond_std"], bridge["target_std"], layer, steps=proto["steps"],
                    eta=cfg.eta, first_state=bridge["first_state"])
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
    rows, samples = sample_and_score(backbone, models, judge, cfg, progress, reference=reference)
    if with_backbone:
        hyb, ref = rows
        hyb["latency_vs_backbone"] = hyb["ms_per_step"] / ref["ms_per_step"]
        ref["latency_vs_backbone"] = 1.0
    return EvalResult(rows=rows, samples=samples, judge=judge.info(), layer=layer)


def sample_and_score(backbone, models: list[tuple[str, str, Callable]], judge, cfg: EvalConfig,
                     progress: Callable[[str], None] | None = None, *,
                     reference=None) -> tuple[list[dict], list[dict]]:
    """(rows, samples) of each (name, role, decode) in `models`: `decode()` returns a
    dihal.hybrid.Generation of cfg.n_samples x cfg.length tokens (e.g. `lambda:
    model.decode(cfg.n_samples, cfg.length, temperature=cfg.temperature, seed=cfg.seed,
    batch_size=cfg.batch_size)` for DiHAL's hybrid or a control hybrid of
    dihal.control_hybrids); every model's texts are cut at EOS and scored by the same judge
    and metric code, with the timing and the CPU threads and kernels of the run."""
    rows, samples = [], []
    on_cpu = backbone.device.type == "cpu"
    threads = torch.get_num_threads() if on_cpu else 0
    kernels = torch.backends.cpu.get_cpu_capability() if on_cpu else "n/a (GPU)"
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
        rows.append({"model": name, "role": role,
                     **text_metrics(texts, judge, seed=cfg.seed, reference=reference,
                                    ppl_length=common_ppl_length(cfg.length)),
                     "ms_per_token": timing["ms_per_token"], "ms_per_step": timing["ms_per_step"],
                     "n_samples": cfg.n_samples, "length": cfg.length,
                     "temperature": cfg.temperature, **start, "cpu_threads": threads,
                     "cpu_kernels": kernels})
        samples += [{"model": name, "index": i, "seed": cfg.seed, "text": t}
                    for i, t in enumerate(texts)]
    return rows, samples
