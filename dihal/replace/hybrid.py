"""The DiHAL hybrid (docs/method.md §3) and autoregressive sampling shared with the backbone.

    tokens -> E -> standardise -> bridge sampler -> de-standardise -> h_l_hat
           -> decoder layers l..N-1 -> final norm -> LM head -> logits

Generation is autoregressive over the hybrid. The cached path keeps one bridge K/V cache per
denoising step (an `IncrementalSampler` state) and one transformers cache for the upper layers,
and feeds each new token through both exactly once: the prefix is never recomputed. The
uncached path recomputes the whole sequence at every step; with eta = 0 both give the same
tokens.

Sampling is the same code for the hybrid and for the backbone reference row (docs/method.md
section 4): temperature, no top-p, and one uniform number per (sequence, position) drawn up
front from a generator seeded with `seed`, turned into a token by inverting the CDF of the
next-token distribution. So the tokens do not depend on the batch size or on the cached/uncached
path, only on the logits.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dihal.backbones import Backbone
from dihal.bridge.data import Standardizer
from dihal.bridge.process import BrownianBridge
from dihal.bridge.sampler import DEFAULT_RULE, IncrementalSampler, check_rule, sample
from dihal.seeds import derive_seed
from dihal.versions import cache_keyword

# A stepper receives every token id so far (B, T) and returns the next-token logits (B, V).
Stepper = Callable[[Tensor], Tensor]


# ---------------------------------------------------------------- sampling


def sample_next(logits: Tensor, temperature: float, u: Tensor) -> Tensor:
    """Next tokens (B,) from logits (B, V) and uniforms u (B,) in [0, 1).

    temperature > 0: the token whose CDF interval of softmax(logits / temperature) contains u
    (inverse-CDF sampling, in float64); temperature = 0: the argmax (u unused).
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature == 0:
        return logits.argmax(-1)
    cdf = torch.softmax(logits.double() / temperature, dim=-1).cumsum(-1)
    value = u.to(cdf.device, torch.float64).unsqueeze(-1) * cdf[:, -1:]
    # right=True: the first index whose CDF exceeds the value, so zero-probability tokens
    # (empty intervals) are never chosen.
    idx = torch.searchsorted(cdf, value, right=True).squeeze(-1)
    return idx.clamp_max(logits.shape[-1] - 1)


@dataclass(frozen=True)
class Generation:
    """Sampled token ids and how long the sampling took.

    tokens: (n, prompt_len + length) int64 on the CPU, the prompt (BOS by default) first.
    seconds: wall time of the whole decoding loop (every batch, prefix included; GPU work
        synchronised), without loading or warm-up.
    """

    tokens: Tensor
    prompt_len: int
    seconds: float
    batch_size: int

    @property
    def n(self) -> int:
        return self.tokens.shape[0]

    @property
    def length(self) -> int:
        return self.tokens.shape[1] - self.prompt_len

    @property
    def n_new_tokens(self) -> int:
        return self.n * self.length

    @property
    def n_batches(self) -> int:
        return -(-self.n // self.batch_size)

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second over all sequences (throughput)."""
        return self.n_new_tokens / self.seconds

    @property
    def seconds_per_token(self) -> float:
        """Wall seconds per generated token: 1 / tokens_per_s."""
        return self.seconds / self.n_new_tokens

    @property
    def seconds_per_step(self) -> float:
        """Wall seconds per decoding step of one batch (one new token in every sequence)."""
        return self.seconds / (self.n_batches * self.length)

    def timing(self) -> dict[str, float | int]:
        return {
            "n": self.n,
            "length": self.length,
            "batch_size": self.batch_size,
            "seconds": self.seconds,
            "tokens_per_s": self.tokens_per_s,
            "ms_per_token": 1e3 * self.seconds_per_token,
            "ms_per_step": 1e3 * self.seconds_per_step,
        }


def as_prompt_ids(prompt: Sequence[int] | Tensor | None, default: int) -> Tensor:
    ids = torch.tensor([default]) if prompt is None else torch.as_tensor(prompt).reshape(-1)
    if ids.numel() < 1:
        raise ValueError("the prompt needs at least one token")
    return ids.to(torch.long)


WARMUP_STEPS = 2  # decoding steps run before a timed decode (autoregress)
# the warm-up of the decodes in this context (no_warmup() turns it off where work is counted,
# not timed: FLOPs per token)
_WARMUP: contextvars.ContextVar[int] = contextvars.ContextVar("warmup_steps", default=WARMUP_STEPS)


@contextlib.contextmanager
def no_warmup():
    """Decodes inside run no warm-up steps (for counting their work, e.g. FLOPs per token)."""
    token = _WARMUP.set(0)
    try:
        yield
    finally:
        _WARMUP.reset(token)


def autoregress(
    make_stepper: Callable[[int, int], Stepper],
    prompt: Tensor,
    n: int,
    length: int,
    *,
    temperature: float,
    seed: int,
    batch_size: int | None,
    device: torch.device | str,
    warmup_steps: int | None = None,
) -> Generation:
    """Sample n sequences of `length` new tokens after `prompt` (P,), in batches.

    ``make_stepper(batch, batch_seed)`` returns a fresh stepper for one batch (its caches or
    noise generator live in the closure). The uniforms deciding every token are drawn up front
    from ``torch.Generator().manual_seed(seed)``: sequence i, position j uses u[i, j] whatever
    the batching. Before the clock starts, a throw-away stepper runs `warmup_steps` greedy
    steps on a batch of the same size (CUDA context, kernels and allocator caches start there,
    not in the measured ms/token); it draws no uniform, so the tokens do not depend on it.
    """
    if n < 1 or length < 1:
        raise ValueError(f"n and length must be >= 1, got n={n}, length={length}")
    warmup_steps = _WARMUP.get() if warmup_steps is None else warmup_steps
    batch_size = n if batch_size is None else batch_size
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    u = torch.rand(n, length, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    device = torch.device(device)
    if warmup_steps > 0:
        b = min(batch_size, n)
        step = make_stepper(b, derive_seed(seed, "warm-up"))
        ids = prompt.to(device).expand(b, -1)
        for _ in range(min(warmup_steps, length)):
            ids = torch.cat([ids, step(ids).argmax(-1).to(device, torch.long).unsqueeze(1)], dim=1)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    rows = []
    start_time = time.perf_counter()
    for start in range(0, n, batch_size):
        b = min(batch_size, n - start)
        step = make_stepper(b, derive_seed(seed, "batch", start))
        ids = prompt.to(device).expand(b, -1)
        for j in range(length):
            nxt = sample_next(step(ids), temperature, u[start : start + b, j])
            ids = torch.cat([ids, nxt.to(device, torch.long).unsqueeze(1)], dim=1)
        rows.append(ids.cpu())
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start_time
    return Generation(torch.cat(rows), prompt.numel(), seconds, batch_size)


# ---------------------------------------------------------------- the backbone reference


def backbone_stepper(backbone: Backbone, cached: bool = True) -> Stepper:
    """Next-token logits of the backbone itself: with its own KV cache (each new token once), or
    recomputing the whole sequence."""
    if not cached:
        return lambda ids: backbone.model(input_ids=ids, logits_to_keep=1).logits[:, -1]
    cache = backbone.new_cache()
    seen = 0

    def step(ids: Tensor) -> Tensor:
        nonlocal seen
        out = backbone.model(
            input_ids=ids[:, seen:], use_cache=True, logits_to_keep=1,
            **{cache_keyword(backbone.model): cache},
        )
        seen = ids.shape[1]
        return out.logits[:, -1]

    return step


@torch.no_grad()
def decode_backbone(
    backbone: Backbone,
    n: int,
    length: int,
    *,
    temperature: float = 1.0,
    seed: int,
    batch_size: int | None = None,
    cached: bool = True,
    prompt: Sequence[int] | Tensor | None = None,
) -> Generation:
    """The autoregressive reference row: the backbone sampled exactly like the hybrid."""
    return autoregress(
        lambda b, _seed: backbone_stepper(backbone, cached),
        as_prompt_ids(prompt, backbone.bos_id), n, length,
        temperature=temperature, seed=seed, batch_size=batch_size, device=backbone.device,
    )


def generate_backbone(backbone: Backbone, n: int, length: int, **kwargs) -> Tensor:
    """Tokens (n, 1 + length) of `decode_backbone` (same keyword arguments)."""
    return decode_backbone(backbone, n, length, **kwargs).tokens


# ---------------------------------------------------------------- the hybrid


class Hybrid:
    """Backbone with its layers 0..l-1 replaced by a bridge from hs[0] (docs/method.md §3).

    cond_std / target_std: the standardisations of c = hs[0] and of h_l the bridge was trained
    with. first_state: the raw h_l of position 0 when the bridge was trained with position 0
    pinned (every sequence starts with the same BOS, whose h_l is a constant of the backbone;
    see dihal/replace/stage.py): the condition there is then 0 in standardised units, as in training,
    and h_l_hat there is this vector instead of the bridge's output. With eta > 0 the bridge noise of generation comes from a generator per batch, seeded
    from (seed, batch start); the cached and uncached paths then draw it differently.
    rule: the sampler's update rule ("ancestral" | "marginal", dihal.bridge.sampler). The
    marginal rule's first-step noise is seeded per (batch seed, position) in generation and
    per (noise_seed, position) in `hidden`/`logits`: cached and uncached decoding give the same
    tokens, but the tokens depend on the batching (one draw per position for the whole batch).
    """

    def __init__(
        self,
        backbone: Backbone,
        denoiser: nn.Module,
        process: BrownianBridge,
        cond_std: Standardizer,
        target_std: Standardizer,
        layer: int,
        sampler_steps: int = 16,
        eta: float = 0.0,
        first_state: Tensor | None = None,
        rule: str = DEFAULT_RULE,
        noise_seed: int = 0,
    ) -> None:
        self.backbone = backbone
        self.layer = backbone.check_layer(layer)
        cfg = getattr(denoiser, "cfg", None)
        if cfg is not None and cfg.d_in != backbone.hidden_size:
            raise ValueError(
                f"the denoiser works on d_in={cfg.d_in} but {backbone.spec.name} has hidden "
                f"size {backbone.hidden_size}"
            )
        self.denoiser = denoiser.eval()
        self.process = process
        self.cond_std = cond_std
        self.target_std = target_std
        self.sampler_steps = sampler_steps
        self.eta = eta
        self.rule = check_rule(rule, eta)
        self.noise_seed = noise_seed
        if first_state is not None and first_state.shape != (backbone.hidden_size,):
            raise ValueError(
                f"first_state must be ({backbone.hidden_size},), got {tuple(first_state.shape)}"
            )
        self.first_state = first_state
        self.sampler = IncrementalSampler(denoiser, process, steps=sampler_steps, eta=eta,
                                          rule=rule)

    @property
    def _param(self) -> Tensor:
        return next(self.denoiser.parameters())

    @property
    def max_len(self) -> int | None:
        cfg = getattr(self.denoiser, "cfg", None)
        return None if cfg is None else cfg.max_len

    def condition(self, input_ids: Tensor, start_pos: int = 0) -> Tensor:
        """c = standardised hs[0] of positions [start_pos, ...), on the denoiser's device and
        dtype (0 at position 0 when it is pinned)."""
        e = self.backbone.embed(input_ids)
        c = self.cond_std.apply(e.to(self._param.device, self._param.dtype))
        if self.first_state is not None and start_pos == 0:
            c[:, 0] = 0.0
        return c

    def restore(self, z0: Tensor, start_pos: int = 0) -> Tensor:
        """h_l_hat: the de-standardised bridge output (the pinned state at position 0)."""
        h = self.target_std.invert(z0)
        if self.first_state is not None and start_pos == 0:
            h[:, 0] = self.first_state.to(h)
        return h

    @torch.no_grad()
    def predict(self, input_ids: Tensor, generator: torch.Generator | None = None,
                seed: int | None = None) -> Tensor:
        """z0_hat (B, T, d): the bridge's sample of h_l for whole sequences, in standardised
        units (what the reconstruction error compares with the true h_l; `seed`: the
        marginal rule's noise seed, default noise_seed)."""
        return sample(
            self.denoiser, self.condition(input_ids), self.process,
            steps=self.sampler_steps, eta=self.eta, generator=generator, rule=self.rule,
            seed=self.noise_seed if seed is None else seed,
        )

    @torch.no_grad()
    def hidden(self, input_ids: Tensor, generator: torch.Generator | None = None,
               seed: int | None = None) -> Tensor:
        """h_l_hat (B, T, d), de-standardised, for whole sequences: `predict` restored."""
        return self.restore(self.predict(input_ids, generator, seed))

    @torch.no_grad()
    def logits(self, input_ids: Tensor, generator: torch.Generator | None = None,
               seed: int | None = None) -> Tensor:
        """Logits (B, T, V) of whole sequences (no cache)."""
        return self.backbone.run_upper(self.hidden(input_ids, generator, seed), self.layer)

    def _generator(self, seed: int) -> torch.Generator | None:
        if self.eta == 0.0:
            return None
        return torch.Generator(device=self._param.device).manual_seed(seed)

    def stepper(self, cached: bool = True, seed: int = 0) -> Stepper:
        """Next-token logits of the hybrid for one batch (see `backbone_stepper`)."""
        generator = self._generator(seed)
        if not cached:
            return lambda ids: self.logits(ids, generator, seed)[:, -1]
        state = self.sampler.new_state(generator, seed)
        cache = self.backbone.new_cache()

        def step(ids: Tensor) -> Tensor:
            seen = state.length
            z0 = self.sampler.extend(state, self.condition(ids[:, seen:], seen))
            h = self.restore(z0, seen)
            return self.backbone.run_upper(h, self.layer, cache=cache, start_pos=seen)[:, -1]

        return step

    @torch.no_grad()
    def decode(
        self,
        n: int,
        length: int,
        *,
        temperature: float = 1.0,
        seed: int,
        batch_size: int | None = None,
        cached: bool = True,
        prompt: Sequence[int] | Tensor | None = None,
    ) -> Generation:
        """Sample n sequences of `length` tokens after `prompt` (default: the backbone's BOS),
        with the tokens and the wall time of the decoding loop."""
        prompt_ids = as_prompt_ids(prompt, self.backbone.bos_id)
        needed = prompt_ids.numel() + length - 1  # the last sampled token is never fed back
        if self.max_len is not None and needed > self.max_len:
            raise ValueError(
                f"{prompt_ids.numel()} prompt + {length} new tokens need {needed} positions but "
                f"the denoiser was built with max_len={self.max_len}"
            )
        return autoregress(
            lambda b, batch_seed: self.stepper(cached, batch_seed),
            prompt_ids, n, length,
            temperature=temperature, seed=seed, batch_size=batch_size,
            device=self.backbone.device,
        )

    def generate(self, n: int, length: int, **kwargs) -> Tensor:
        """Tokens (n, prompt_len + length) of `decode` (same keyword arguments)."""
        return self.decode(n, length, **kwargs).tokens


# ---------------------------------------------------------------- measures


def decode_texts(tokenizer, tokens: Tensor, prompt_len: int = 1) -> list[str]:
    """The generated part of each row as text, special tokens (BOS, EOS, chat markers) dropped."""
    return tokenizer.batch_decode(tokens[:, prompt_len:].tolist(), skip_special_tokens=True)


@torch.no_grad()
def next_token_nll(
    logits_fn: Callable[[Tensor], Tensor], input_ids: Tensor, mask: Tensor | None = None
) -> float:
    """Mean NLL (nats) of tokens 1..T-1, each predicted from the ones before it.

    logits_fn: ids (B, T) -> logits (B, T, V), e.g. `hybrid.logits` or
    `lambda ids: backbone.model(ids).logits`. mask (B, T), True on real tokens (right padding):
    a prediction counts when its target is real.
    """
    logits = logits_fn(input_ids)[:, :-1].float()
    targets = input_ids[:, 1:].to(logits.device)
    if mask is not None:
        targets = targets.masked_fill(~mask[:, 1:].to(logits.device), -100)
    return float(F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100))


def top1_agreement(
    hybrid_logits: Tensor, backbone_top1: Tensor, mask: Tensor | None = None
) -> float:
    """The fraction of positions whose most likely next token under the hybrid is the
    backbone's (`backbone_top1` (B, T): the argmax of its logits, as the dump keeps it)."""
    same = hybrid_logits.argmax(-1) == backbone_top1.to(hybrid_logits.device)
    if mask is not None:
        same = same[mask.to(same.device)]
    return float(same.float().mean())
