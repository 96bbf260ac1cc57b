"""Prompted generation for the public API (dihal.api): greedy or sampled with a temperature and
top-p, from any model that gives next-token logits step by step (a
`dihal.replace.hybrid.Stepper`: the backbone, DiHAL's hybrid, a control hybrid).

The arguments mean what transformers' `generate` makes them mean: `max_new_tokens`,
`do_sample` (False: greedy, the argmax at every step), `temperature`, `top_p` (the smallest
set of most likely tokens whose probability reaches top_p), plus a `seed`. One uniform number
per (prompt, new token) is drawn up front from a generator seeded with `seed` and turned into a
token by inverting the CDF of the temperature-scaled, top-p-truncated next-token distribution,
as the eval samples (dihal.replace.hybrid.sample_next). So a seed gives the same tokens on
every call whatever the other prompts, two models called with one seed draw the same uniforms
(their samples are paired, as the eval's), and with top_p = 1 a prompt is continued exactly as
the eval's decoder would continue it. Pure compute, no Dagster.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from dihal.replace.hybrid import Stepper, sample_next
from dihal.seeds import derive_seed

PROGRESS_EVERY_S = 5.0  # a decode that runs longer says how far it is, this often


@dataclass(frozen=True)
class SamplingConfig:
    """How `generate` picks each new token; checked on construction."""

    max_new_tokens: int = 32
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    stop_at_eos: bool = True  # a continuation ends with its first EOS (kept in its ids)

    def __post_init__(self) -> None:
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) \
                or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {self.max_new_tokens!r}")
        if not isinstance(self.do_sample, bool):
            raise ValueError(f"do_sample must be True or False, got {self.do_sample!r}")
        if not (isinstance(self.temperature, int | float) and math.isfinite(self.temperature)
                and self.temperature > 0):
            raise ValueError(f"temperature must be a finite number > 0, got {self.temperature!r} "
                             "(greedy decoding is do_sample=False)")
        if not (isinstance(self.top_p, int | float) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r} (1: no truncation)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {self.seed!r}")


def nucleus(logits: Tensor, top_p: float, temperature: float = 1.0) -> Tensor:
    """`logits` (B, V) with every token outside the top-p set of softmax(logits / temperature)
    set to -inf: the most likely tokens, in order, until their probability reaches top_p (the
    most likely token always stays). top_p = 1 returns `logits` unchanged."""
    if top_p >= 1:
        return logits
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    ordered, order = probs.sort(dim=-1, descending=True, stable=True)
    before = ordered.cumsum(-1) - ordered  # the mass of the tokens ranked above each one
    keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, before < top_p)
    return logits.masked_fill(~keep.to(logits.device), float("-inf"))


def next_tokens(logits: Tensor, cfg: SamplingConfig, u: Tensor) -> Tensor:
    """The next token of each row of `logits` (B, V): the argmax without `do_sample`, else the
    token whose CDF interval of the top-p-truncated softmax(logits / temperature) holds u (B,)."""
    if not cfg.do_sample:
        return logits.argmax(-1)
    return sample_next(nucleus(logits, cfg.top_p, cfg.temperature), cfg.temperature, u)


def uniforms(n_prompts: int, cfg: SamplingConfig) -> Tensor:
    """u[i, j]: the uniform number that picks new token j of prompt i (float64)."""
    g = torch.Generator().manual_seed(cfg.seed)
    return torch.rand(n_prompts, cfg.max_new_tokens, generator=g, dtype=torch.float64)


def prompt_seed(seed: int, i: int) -> int:
    """The seed of prompt i's stepper (a marginal-rule bridge's first-step noise): the one the
    eval's decoder gives a batch starting at sequence i (dihal.replace.hybrid.autoregress)."""
    return derive_seed(seed, "batch", i)


@dataclass(frozen=True)
class Generated:
    """What `generate` returns for one model: per prompt, its token ids (BOS first), the new
    token ids (an EOS that ended one included), and the continuation as text (special tokens
    dropped); the wall time of the decoding loop over all prompts."""

    model: str
    prompt_ids: list[list[int]]
    new_ids: list[list[int]]
    texts: list[str]
    seconds: float
    settings: dict

    @property
    def sequences(self) -> list[list[int]]:
        """Prompt and continuation of each prompt, as transformers' generate returns them."""
        return [p + n for p, n in zip(self.prompt_ids, self.new_ids, strict=True)]

    @property
    def n_new_tokens(self) -> int:
        return sum(len(n) for n in self.new_ids)

    @property
    def ms_per_token(self) -> float:
        """Wall milliseconds per generated token (prompts fed in one step each, counted in)."""
        return 1e3 * self.seconds / max(self.n_new_tokens, 1)


@torch.no_grad()
def decode_prompts(make_stepper: Callable[[int], Stepper], prompts: Sequence[Tensor],
                   cfg: SamplingConfig, *, eos_id: int, device: torch.device | str,
                   progress: Callable[[str], None] | None = None,
                   label: str = "") -> tuple[list[list[int]], float]:
    """The new token ids after each prompt (P_i,) and the wall seconds of the loop. Each prompt
    runs on a fresh stepper, `make_stepper(prompt_seed(cfg.seed, i))`, which takes the whole
    prompt in its first step and one new token in each step after."""
    device = torch.device(device)
    u = uniforms(len(prompts), cfg)
    out: list[list[int]] = []
    start = said = time.perf_counter()
    for i, prompt in enumerate(prompts):
        step = make_stepper(prompt_seed(cfg.seed, i))
        ids = prompt.to(device, torch.long).unsqueeze(0)
        new: list[int] = []
        for j in range(cfg.max_new_tokens):
            token = next_tokens(step(ids), cfg, u[i, j : j + 1]).to(device, torch.long)
            ids = torch.cat([ids, token.view(1, 1)], dim=1)
            new.append(int(token))
            if cfg.stop_at_eos and new[-1] == eos_id:
                break
            if progress is not None and time.perf_counter() - said > PROGRESS_EVERY_S:
                said = time.perf_counter()
                progress(f"{label}prompt {i + 1}/{len(prompts)}: {j + 1}/{cfg.max_new_tokens} "
                         f"tokens ({said - start:.1f} s)")
        out.append(new)
        if progress is not None and len(prompts) > 1:
            said = time.perf_counter()
            progress(f"{label}prompt {i + 1}/{len(prompts)} done ({said - start:.1f} s)")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out, time.perf_counter() - start
