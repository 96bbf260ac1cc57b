"""One call for several models (dihal.api): the same prompts continued by each with the same
arguments and seed (so their samples are paired, as the eval's), and the continuations side
by side as plain text with each model's time per token. Pure compute, no Dagster.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence

from dihal.api.models import DihalHybrid, Prompt, TextModel, as_prompt_list
from dihal.api.sampling import Generated

WARMUP_TOKENS = 2  # greedy tokens each model decodes, untimed, before its timed call


def compare(models: Sequence[TextModel], prompts: Prompt | Sequence[Prompt], *,
            max_new_tokens: int = 32, sampler_steps: int | None = None, rule: str | None = None,
            warmup: bool = True, progress: Callable[[str], None] | None = None,
            **kwargs) -> list[Generated]:
    """Each model's `generate(prompts, max_new_tokens=..., **kwargs)` (do_sample, temperature,
    top_p, seed, stop_at_eos), in the order given, once every prompt is known to fit every
    model. `sampler_steps` and `rule` go to the DiHAL hybrids (the other models have no bridge
    sampler, the regression hybrid one step). With `warmup`, each model first decodes
    WARMUP_TOKENS greedy tokens of one prompt, untimed, so that its time per token leaves out
    what a first call costs once (allocations, kernels chosen)."""
    names = [m.name for m in models]
    if not models or len(set(names)) != len(names):
        raise ValueError(f"compare needs models with distinct names, got {names}")
    sampler = {k: v for k, v in (("sampler_steps", sampler_steps), ("rule", rule)) if v is not None}
    for m in models:  # every prompt fits every model, or nothing is generated
        m.encode_prompts(prompts, max_new_tokens)
    out = []
    for m in models:
        own = sampler if isinstance(m, DihalHybrid) and not m.regression else {}
        if warmup:
            m.generate(as_prompt_list(prompts)[:1], stop_at_eos=False, **own,
                       max_new_tokens=min(WARMUP_TOKENS, max_new_tokens))
        if progress is not None:
            progress(f"generating with {m.name}")
        gen = m.generate(prompts, max_new_tokens=max_new_tokens, progress=progress, **own,
                         **kwargs)
        if progress is not None:
            progress(f"{gen.model}: {gen.n_new_tokens} tokens in {gen.seconds:.2f} s "
                     f"({gen.ms_per_token:.1f} ms/token)")
        out.append(gen)
    return out


def side_by_side(generations: Sequence[Generated], tokenizer, *, width: int = 120) -> str:
    """Plain text: for each prompt, the prompt, then one column per model headed by its name
    and its time per token, holding its continuation wrapped to the column's width. A column
    is never narrower than its model's name: a name is not cut on a narrow terminal."""
    cols = len(generations)
    col = max(16, (width - 3 * (cols - 1)) // cols, *(len(g.model) for g in generations))
    blocks = []
    for i, prompt_ids in enumerate(generations[0].prompt_ids):
        prompt = tokenizer.decode(prompt_ids, skip_special_tokens=True)
        heads = [[g.model, f"{g.ms_per_token:.1f} ms/token"] for g in generations]
        bodies = [textwrap.wrap(g.texts[i].replace("\n", " / "), col)
                  or textwrap.wrap(no_text(g.new_ids[i], tokenizer), col) for g in generations]
        lines = [f"prompt {i + 1}: {prompt!r}"]
        for k in range(2):
            lines.append(" | ".join(h[k][:col].ljust(col) for h in heads).rstrip())
        lines.append("-+-".join("-" * col for _ in generations))
        for k in range(max(len(b) for b in bodies)):
            lines.append(" | ".join((b[k] if k < len(b) else "").ljust(col)
                                    for b in bodies).rstrip())
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def no_text(ids: list[int], tokenizer) -> str:
    """What a continuation without text holds: nothing, or special tokens only (shown)."""
    if not ids:
        return "(nothing)"
    shown = " ".join(str(t) for t in tokenizer.convert_ids_to_tokens(ids[:6]))
    return f"(no text: {len(ids)} special tokens, {shown}" + (" ...)" if len(ids) > 6 else ")")
