"""Tiny randomly initialised backbones (Llama and Qwen3 layouts) with a tokenizer built in code,
saved as ordinary Hugging Face folders so the real loading code path reads them."""

from __future__ import annotations

from pathlib import Path

import torch

WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there one all we their been has when who will "
    "more no if out so said what up its about into than them can only other new some could "
    "time these two may then do first any my now such like our over man me even most made "
    "after also did many before must through back years where much your way well down should "
    "because each just those people how too little state good very make world still own see"
).split()


def build_tokenizer(path: Path):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    chars = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list(".,;:!?'\"()-0123456789")
    vocab = {t: i for i, t in enumerate(specials + WORDS + chars)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
        unk_token="<unk>",
    )
    fast.save_pretrained(path)
    return fast


def build_model(path: Path, arch: str = "llama", *, n_layers: int = 4, hidden: int = 32, seed: int = 0):
    """Save a tiny causal LM of the given architecture (llama | qwen3 | gemma3) and its
    tokenizer. The gemma3 one has Gemma 3's pieces: a scaled embedding, sliding-window and
    global layers with their own rotary embeddings (the window shorter than the test
    sequences, so it bites), and soft-capped logits."""
    from transformers import (
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    path = Path(path)
    tok = build_tokenizer(path)
    common = dict(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=n_layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=256, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    elif arch == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**common, head_dim=hidden // 4))
    elif arch == "gemma3":
        model = Gemma3ForCausalLM(Gemma3TextConfig(
            **common, head_dim=hidden // 4, sliding_window=4, final_logit_softcapping=5.0,
            layer_types=["sliding_attention" if i % 2 == 0 else "full_attention"
                         for i in range(n_layers)]))
    else:
        raise ValueError(arch)
    model.save_pretrained(path)
    return path


def write_shard(path: Path, docs: list[dict]) -> Path:
    import gzip
    import json

    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps(d) + "\n")
    return path


def make_docs(n: int, seed: int = 0, words: int = 60) -> list[dict]:
    import random

    rng = random.Random(seed)
    return [
        {"id": f"doc-{i:04d}", "source": rng.choice(["wiki", "books"]),
         "text": " ".join(rng.choice(WORDS) for _ in range(words)) + "."}
        for i in range(n)
    ]


def randomised_denoiser(cfg, seed: int = 0):
    """A bridge denoiser with every weight random (the zero-initialised output would hide bugs)."""
    from dihal.bridge.denoiser import build_denoiser

    model = build_denoiser(cfg, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return model.eval()
