"""Tiny randomly initialised backbones (every supported decoder family, and two refused
layouts) with a tokenizer built in code, saved as ordinary Hugging Face folders so the real
loading code path reads them."""

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


FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "olmo2")
REFUSED = ("gpt2", "gpt_neox")  # another layout: refused by name (dihal.registry)


def build_model(path: Path, arch: str = "llama", *, n_layers: int = 4, hidden: int = 32, seed: int = 0):
    """Save a tiny causal LM of the given architecture (FAMILIES, or REFUSED's gpt2 /
    gpt_neox) and its tokenizer. Where a family has a sliding window (Mistral, Phi-3 as
    configured here; Gemma 2/3 on alternate layers) it is shorter than the test sequences, so
    it bites. The gemma2/gemma3 ones have Gemma's pieces: a scaled embedding, sliding-window
    and global layers (Gemma 3: with their own rotary embeddings), soft-capped logits (Gemma 2:
    soft-capped attention too). OLMo 2 norms after attention and MLP, and q/k."""
    import transformers as tf

    path = Path(path)
    tok = build_tokenizer(path)
    common = dict(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=n_layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=256, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=True,
    )
    alternating = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layers)]
    torch.manual_seed(seed)
    if arch == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**common))
    elif arch == "mistral":
        model = tf.MistralForCausalLM(tf.MistralConfig(**common, sliding_window=4))
    elif arch == "qwen2":
        model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**common))
    elif arch == "qwen3":
        model = tf.Qwen3ForCausalLM(tf.Qwen3Config(**common, head_dim=hidden // 4))
    elif arch == "gemma2":
        model = tf.Gemma2ForCausalLM(tf.Gemma2Config(
            **common, head_dim=hidden // 4, sliding_window=4, final_logit_softcapping=5.0,
            attn_logit_softcapping=3.0, layer_types=alternating))
    elif arch == "gemma3":
        model = tf.Gemma3ForCausalLM(tf.Gemma3TextConfig(
            **common, head_dim=hidden // 4, sliding_window=4, final_logit_softcapping=5.0,
            layer_types=alternating))
    elif arch == "phi3":
        model = tf.Phi3ForCausalLM(tf.Phi3Config(**common, sliding_window=4))
    elif arch == "olmo2":
        model = tf.Olmo2ForCausalLM(tf.Olmo2Config(**common))
    elif arch == "gpt2":
        model = tf.GPT2LMHeadModel(tf.GPT2Config(
            vocab_size=len(tok), n_embd=hidden, n_layer=n_layers, n_head=4, n_positions=256,
            bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id))
    elif arch == "gpt_neox":
        model = tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(
            vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
            num_hidden_layers=n_layers, num_attention_heads=4, max_position_embeddings=256,
            bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id))
    else:
        raise ValueError(f"unknown tiny architecture {arch!r}: one of {FAMILIES + REFUSED}")
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


def check_replay(bb) -> tuple[torch.Tensor, torch.Tensor]:
    """Assert that hs[0] is the embedding, that run_upper(hs[l], l) equals the full forward's
    logits for every layer l, and that lower_states stops at the same values; (full logits,
    hidden states) of the 2 x 12 token batch it checked, for further checks."""
    ids = torch.randint(4, len(bb.tokenizer), (2, 12), generator=torch.Generator().manual_seed(0))
    full = bb.model(ids).logits
    hs = bb.hidden_states(ids)
    assert hs.shape == (bb.n_layers, 2, 12, bb.hidden_size)
    assert torch.equal(hs[0], bb.embed(ids))
    for layer in range(bb.n_layers):
        torch.testing.assert_close(bb.run_upper(hs[layer], layer), full, rtol=0, atol=1e-5)
        first, state = bb.lower_states(ids, layer)  # the forward stopped after block layer-1
        assert torch.equal(first, hs[0]) and torch.equal(state, hs[layer])
    return full, hs
