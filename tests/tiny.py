"""The tests' shared helpers (plain functions and constants; the fixtures that use them are in
tests/conftest.py and each folder's conftest.py). No test module imports another test module:
what two of them share lives here.

- tiny randomly initialised backbones (every supported decoder family, and two refused layouts)
  with a tokenizer built in code, saved as ordinary Hugging Face folders so the real loading
  code path reads them; generated corpus shards;
- a toy bridge problem (toy_data) and hand-made bridges, sequences and state dumps of a tiny
  backbone;
- hand-made report inputs;
- the tiny world: the tiny run configs of every stage (TINY, PROTOCOL, TINY_RUN), the tiny
  profile, and a Dagster code location over a tiny model materialised in-process (World);
- serving: a Dagster web server (`dg dev`, `dagster dev`, the webserver, `make ui`) on a free
  local port, up until the block ends."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from dihal.inputs import GeometryRow, PredictorRow, ScoreRow
from dihal.run.profiles import PROFILES

ROOT = Path(__file__).resolve().parents[1]  # the repository

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


# the record of the judge that scored a made-up eval (dihal.generation_rows.JudgeInfo)
TINY_JUDGE_INFO = {"judge": "t/tiny", "revision": "local:t/tiny@sha256=0", "architecture": "Tiny",
                   "vocab_size": 64, "chunk_size": 64}
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


def hub_folder(path, splits: dict[str, list[dict]], fmt: str = "parquet"):
    """A dataset folder in the Hub's layout: data/<split>-00000-of-00001.<fmt>."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    (path / "data").mkdir(parents=True)
    for split, rows in splits.items():
        target = path / "data" / f"{split}-00000-of-00001.{'parquet' if fmt == 'parquet' else 'jsonl'}"
        if fmt == "parquet":
            pq.write_table(pa.Table.from_pylist(rows), target)
        else:
            target.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def hub_rows(n: int, seed: int = 0) -> list[dict]:
    """n generated documents as rows of a Hub dataset (fields doc, body, source)."""
    return [{"doc": d["id"], "body": d["text"], "source": d["source"]}
            for d in make_docs(n, seed=seed)]


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


# -- a toy bridge problem ------------------------------------------------------------------

TOY_D, TOY_T = 4, 8  # the toy problem's width and sequence length


def toy_denoiser_config():
    """A small denoiser for the toy problem."""
    from dihal.net_configs import DenoiserConfig

    return DenoiserConfig(d_in=TOY_D, d_model=32, n_layers=2, n_heads=2, max_len=TOY_T,
                          time_embed_dim=16)


def toy_data(n_seq: int, seed: int, mask: bool = False):
    """z0 = c A with a fixed orthogonal A: a bridge the denoiser can learn quickly."""
    from dihal.bridge.data import BridgeData

    D, T = TOY_D, TOY_T
    a = torch.linalg.qr(torch.randn(D, D, generator=torch.Generator().manual_seed(123)))[0]
    c = torch.randn(n_seq, T, D, generator=torch.Generator().manual_seed(seed))
    m = None
    if mask:  # right padding of random length, padded values zero
        lengths = torch.randint(
            2, T + 1, (n_seq,), generator=torch.Generator().manual_seed(seed + 1)
        )
        m = torch.arange(T)[None, :] < lengths[:, None]
        c = c * m[..., None]
    return BridgeData(c, c @ a, m)


# -- sequences, state dumps and bridges of a tiny backbone -------------------------------


def random_sequences(bb, n_train=6, n_val=3, T=10):
    """Random token sequences of the backbone's vocabulary (seeded): {"train", "val"}."""
    g = torch.Generator().manual_seed(0)
    V = len(bb.tokenizer)
    return {"train": torch.randint(4, V, (n_train, T), generator=g).numpy(),
            "val": torch.randint(4, V, (n_val, T), generator=g).numpy()}


def state_writer(path, bb, seqs, batch, fp="fp-1"):
    """A StateWriter at `path` for the backbone's states of `seqs`, in batches of `batch`."""
    from storage.states import StateSpec, StateWriter

    spec = StateSpec(n_layers=bb.n_layers, seq_len=seqs["train"].shape[1], hidden=bb.hidden_size,
                     n_seq={s: len(v) for s, v in seqs.items()}, batch_size=batch)
    return StateWriter(path, spec, fp, tokens=seqs, attrs=bb.info().to_dict())


def dump_states(bb, seqs, path, batch=2):
    """The backbone's hidden states of `seqs`, dumped and finalised under `path`; the dump's
    folder."""
    from dihal.locate.extract import ExtractConfig, extract_hidden_states

    w = state_writer(path / "work", bb, seqs, batch)
    extract_hidden_states(bb, seqs, w, ExtractConfig(batch_size=batch))
    w.finalize(path / "final")
    return path / "final"


def trained_bridge(bb, layer: int, objective=None, steps=4):
    """A TrainedBridge at `layer` of the backbone as the bridge stage saves one, made by hand:
    a random-weight denoiser, identity standardisers (no training)."""
    from dihal.config import BridgeProtocol
    from dihal.net_configs import DenoiserConfig
    from dihal.results import BridgeHparams, TrainedBridge

    cfg = DenoiserConfig(d_in=bb.hidden_size, d_model=32, n_layers=2, n_heads=4, max_len=32,
                         time_embed_dim=16)
    den = randomised_denoiser(cfg, seed=5)
    d = bb.hidden_size
    tensors = {f"denoiser.{k}": v for k, v in den.state_dict().items()}
    tensors.update({"cond_std.mean": torch.zeros(d), "cond_std.std": torch.ones(d),
                    "target_std.mean": torch.zeros(d), "target_std.std": torch.ones(d)})
    return TrainedBridge(tensors, BridgeHparams(layer, BridgeProtocol(sampler_steps=steps),
                                                objective=objective,
                                                denoiser_config=cfg))


# -- hand-made report inputs ----------------------------------------------------------------

PNG_1X1 = (  # a 1 x 1 PNG, base64
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


def png() -> bytes:
    import base64

    return base64.b64decode(PNG_1X1)


def spearman_row(predictor, rho, low, high, vs=""):
    """A bridgeability Spearman row: the same (rho, interval, verdict) for every target."""
    from dihal.rows import Spearman, SpearmanRow

    return SpearmanRow(predictor, {t: Spearman(rho, low, high, vs) for t in
                                   ("val_loss", "recon_error", "hybrid_nll")}).to_dict()


def gen_row(model, role, ppl, low, high, **extra):
    """A generation row (Gen.PPL and its interval, fixed diversity, MAUVE, lengths)."""
    return {"model": model, "role": role, "gen_ppl": ppl, "gen_ppl_low": low,
            "gen_ppl_high": high, "gen_ppl_mean": ppl, "diversity": 0.5, "mauve": 0.4,
            "repetition": 0.1, "mean_length": 8.0, **extra}


def geometry_row(layer: int, norm: str = "none", *, m_curv: float = 1.0, m_mono: float = 0.5,
                 k_eff: float = 3.0) -> GeometryRow:
    """A geometry row with the score's proxies given and the other columns made up."""
    return GeometryRow(layer, norm, m_curv, m_mono, m_mono_median=m_mono, m_mono_q05=0.1,
                       m_mono_min_eig=0.05, k_eff=k_eff, tr_sigma=6.0, lambda_max=2.0)


def score_row(layer: int, S: float, norm: str = "none", *, candidate: bool = True,
              rank: int | None = None) -> ScoreRow:
    """A layer score row with S given, its geometry and z-scores made up."""
    return ScoreRow(**geometry_row(layer, norm).to_dict(), z_curv=0.0, z_mono=0.0, z_keff=0.0,
                    S=S, candidate=candidate, rank=rank)


def predictor_row(layer: int, **values: float) -> PredictorRow:
    """A rival predictors' row: `values` by name, 0.5 for the others."""
    return PredictorRow(layer, **{n: values.get(n, 0.5) for n in PredictorRow.__dataclass_fields__
                                  if n != "layer"})


def report_inputs(*, spearman=None, regression=(), comparison=None, latency=2.0,
                  stability=None, **raw):
    """Hand-made ReportInputs of a tiny 4-layer backbone: l* = 2, oracle 3, worst 1 (`raw`:
    fields of report_raw's replaced, as storage reads them)."""
    from dihal.report.inputs import ReportInputs

    return ReportInputs.from_dicts(**{**report_raw(
        spearman=spearman, regression=regression, comparison=comparison, latency=latency,
        stability=stability), **raw})


def report_raw(*, spearman=None, regression=(), comparison=None, latency=2.0,
               stability=None) -> dict:
    """The tables and infos of report_inputs' backbone as storage reads them (the keywords of
    ReportInputs.from_dicts)."""
    from dihal.rows import DEPTH

    spearman = spearman if spearman is not None else [
        spearman_row("S_l (robust)", 0.9, 0.8, 1.0, "above"), spearman_row(DEPTH, 0.1, -0.2, 0.4)]
    comparison = comparison or [
        gen_row("dihal", "dihal", 50.0, 45.0, 55.0, denoiser_parameters=12345,
                train_tokens=65536, sampler_steps=4),
        gen_row("backbone", "backbone", 30.0, 28.0, 32.0),
        gen_row("sed", "baseline", 80.0, 70.0, 90.0), gen_row("codar", "baseline", 52.0, 40.0, 60.0)]
    geometry = [geometry_row(ll, n, m_curv=0.1 * ll, m_mono=0.2)
                for n in ("none", "robust") for ll in range(4)]
    score = [score_row(ll, 0.5 * ll, n, candidate=ll > 0)
             for n in ("none", "robust") for ll in range(4)]
    # how the eval sampled, as every eval row records it
    setting = {"cpu_threads": 2, "cpu_kernels": "AVX2", "start_token": "<s>", "start_token_id": 1}
    ev = [{"model": "dihal", "role": "dihal", "ms_per_token": 4.0, "latency_vs_backbone": latency,
           **setting},
          {"model": "backbone", "role": "backbone", "ms_per_token": 2.0,
           "latency_vs_backbone": 1.0, **setting}]
    image = png()
    return dict(
        backbone="tiny", backbone_info={"backbone": "tiny", "hf_id": "t/tiny", "revision": "abc",
                                        "origin": "hub", "architecture": "llama", "n_layers": 4,
                                        "hidden_size": 32, "vocab_size": 100,
                                        "n_parameters": 123_456, "device_map": None},
        configs={"layer_score": {"primary_norm": "robust"},
                 "geometry": {"n_tokens": 64, "n_anchors": 8, "k_neighbors": 4, "n_pairs": 10,
                              "n_resamples": 20},
                 "eval": {"n_samples": 4, "length": 6, "temperature": 1.0, "seed": 0}},
        geometry_rows=geometry, predictor_rows=[], score_rows=score,
        score={"l_star": 2, "selected": {"none": 1, "robust": 2},
               "spearman_vs_depth": {"none": 0.3, "robust": 0.2},
               "stability": stability if stability is not None else {},
               "sequence_stability": {}},
        bridgeability={"l_star": 2, "oracle": 3, "worst": 1, "swept_layers": [1, 2, 3],
                       "spearman": spearman, "regression": list(regression),
                       "primary": primary_test(), "seeds": {},
                       "oracle_by": {"by": {"hybrid_nll": {"oracle": 3, "worst": 1},
                                            "val_loss": {"oracle": 3, "worst": 1}},
                                     "chosen_by": "hybrid_nll", "oracle_disagree": False,
                                     "worst_disagree": False}},
        sweep_layers=[], sweep_protocol={"sampler_steps": 4},
        comparison={"rows": comparison, "missing": []},
        evaluation={"rows": ev, "judge": TINY_JUDGE_INFO},
        full_training=[],
        sampler_curve={"layer": 2, "rows": [curve_point()]},
        samples={"dihal": ["a b c"]}, plots={"proxies": image, "score": image, "scatter": image},
        backbones=[], artifacts="/tmp/x", fingerprints={"geometry_tiny": "f" * 64})


def curve_point(**fields) -> dict:
    """A point of the sampler-steps curve as its manifest stores it (`fields` replaced): K = 1
    of a bridge measured at K = 4."""
    return {"sampler_steps": 1, "rule": "ancestral", "recon_error": 0.5, "hybrid_nll": 3.0,
            "backbone_nll": 2.5, "top1_agreement": 0.5, "ms_per_token": 1.0,
            "measure_seconds": 0.1, "protocol_sampler_steps": 4, "from_bridge_metrics": False,
            "same_as_rule": None, **fields}


def primary_test(**fields) -> dict:
    """The primary test of report_raw's 3 swept layers as bridgeability stores it: too few
    layers for its floor to reach alpha (`fields` replaced)."""
    from dihal.uncertainty import PRIMARY_UNDECIDABLE

    return {"predictor": "S_l (robust)", "target": "hybrid_nll", "rho": 0.5,
            "rho_reference": 1.0, "diff": -0.5, "low": -1.5, "p": 0.8, "p_min": 0.17,
            "ties": 0.3, "undefined": 0.0, "n_boot": 10_000, "layers": 3, "alpha": 0.05,
            "verdict": PRIMARY_UNDECIDABLE, "p_min_all": 0.17, "layers_all": 3,
            "layers_needed": None, **fields}


def with_bridgeability(x, *, protocol=None, **info):
    """`x` with fields of its bridgeability summary (dihal.inputs.BridgeabilitySummary) replaced
    by `info`, and the sweep's protocol by `protocol`."""
    from dataclasses import replace

    return replace(x, bridges=replace(x.bridges, info=replace(x.bridges.info, **info),
                                      protocol=x.bridges.protocol if protocol is None else protocol))


def with_eval_rows(x, rows: list[dict]):
    """`x` with the eval's rows replaced by `rows` (as stored), its sampling setting too."""
    from dataclasses import replace

    from dihal.generation_inputs import SamplingSetting
    from dihal.generation_rows import generation_rows

    return replace(x, evaluate=replace(x.evaluate, rows=generation_rows(rows),
                                       setting=SamplingSetting.from_dict(rows[0])))


def report_inputs_with_cost(step_mflops, timed=True):
    """The hand-made inputs with a cost table (report_raw_with_cost)."""
    from dihal.report.inputs import ReportInputs

    return ReportInputs.from_dicts(**report_raw_with_cost(step_mflops, timed))


def report_raw_with_cost(step_mflops, timed=True) -> dict:
    """report_raw with a cost table: 4 blocks of 10 MFLOPs, a head of 5, a denoising step of
    `step_mflops`; DiHAL at l* = 2 samples with K = 4, the sweep too."""
    raw = report_raw()
    rows = [{"model": "backbone", "layer": None, "K": 0, "flops_per_token": 45e6,
             "ms_per_token": 2.0, "flops_vs_backbone": 1.0, "ms_vs_backbone": 1.0,
             "time_over_flops": 1.0}]
    if timed:
        f = 25e6 + 4 * step_mflops * 1e6
        rows.append({"model": "DiHAL (l=2, K=4)", "layer": 2, "K": 4, "flops_per_token": f,
                     "ms_per_token": 3.0, "flops_vs_backbone": f / 45e6, "ms_vs_backbone": 1.5,
                     "time_over_flops": 1.5 / (f / 45e6)})
    cost = {"flop_model": {"block_flops": [10e6] * 4, "head_flops": 5e6, "other_flops": 0.0,
                           "denoiser_step_flops": step_mflops * 1e6},
            "rows": rows, "n": 2, "length": 16, "flop_length": 16, "repeats": 3,
            "note": "FLOPs counted", "timing": "one timing of each model",
            "order_in_k": {"K": [4] if timed else [], "monotone": True, "within_noise": True,
                           "inversions": []}}
    sweep = [bridge_metrics(ll, hybrid_nll=3.0 + ll, backbone_nll=2.5) for ll in (1, 2, 3)]
    return {**raw, "evaluation": {**raw["evaluation"], "cost": cost}, "sweep_layers": sweep}


def bridge_metrics(layer: int, **measured):
    """A swept layer's BridgeMetrics with every field given (`measured` replacing some)."""
    from dihal.rows import BridgeMetrics

    return BridgeMetrics(**{
        "layer": layer, "val_loss": 0.3, "recon_error": 0.5, "hybrid_nll": 3.0,
        "backbone_nll": 2.0, "top1_agreement": 0.7, "hybrid_ppl": 9.0, "backbone_ppl": 7.0,
        "init_val_loss": 1.0, "train_loss": 0.2, "train_steps": 4, "train_tokens": 64,
        "seconds": 1.0, "resumed_from_step": 0, "denoiser_parameters": 100, "t1_loss": 0.6,
        "hybrid_nll_select": 3.0, "hybrid_nll_judge": 3.0, **measured})


# -- the tiny world: a tiny llama's graph through Dagster ---------------------------------

# Every stage small enough for seconds on a CPU: the public tiny preset (dihal.run.profiles)
TINY = PROFILES["tiny"]
PROTOCOL = TINY["bridge_sweep"]
# a wider denoiser that the baselines' recipes can match within 10 % (the comparison's world)
MATCHED_PROTOCOL = {"d_model": 64, "n_layers": 1, "n_heads": 2, "batch_size": 2,
                    "eval_sequences": 4, "sampler_steps": 4, "checkpoint_every": 50}
# the tiny Locate stages' run config (ops) of the tiny llama
TINY_RUN = {f"{stage}_llama": {"config": TINY[stage]}
            for stage in ("sequences", "hidden_states", "geometry")}
# ... and of its bridge sweep
SWEEP_RUN = {**TINY_RUN, "bridge_sweep_llama": {"config": PROTOCOL}}
LOCATE = ["corpus", "sequences_llama", "hidden_states_llama", "geometry_llama", "layer_score_llama"]
SWEPT = ("1", "2", "3")  # the tiny llama's candidate layers


def tiny_profile(path: Path, shard: Path, **stages: dict) -> Path:
    """Write the tiny profile (with `stages` replacing those stages' settings), reading the
    corpus from `shard`; its path (for DIHAL_PROFILE)."""
    import json

    path.write_text(json.dumps({**TINY, "corpus": {"paths": [str(shard)]}, **stages}))
    return path


def tiny_definitions(root: Path, model_dir: Path, **storage):
    """The code location of the tiny llama (4 layers, its own judge, one CPU thread) with its
    artifacts under `root` (`storage`: the storage resource's other settings)."""
    from pipeline.definitions import build_definitions
    from resources import BackboneResource, ComputeResource, JudgeResource, StorageResource

    return build_definitions(("llama",), n_layers={"llama": 4}, resources={
        "storage": StorageResource(root=str(root), **storage),
        "backbones": BackboneResource(paths={"llama": str(model_dir)}),
        "compute": ComputeResource(device="cpu", threads=1),
        "judge": JudgeResource(name=str(model_dir)),
    })


def materialize(defs, instance, keys, run_ops, partition=None, resources: dict | None = None,
                span: tuple[str, str] | None = None):
    """(result, [failure messages]) of materialising `keys` of `defs` in-process on
    `instance`, with the run config of `run_ops` that those keys take (and `resources`
    replacing those of `defs`); over the partition range `span` (first, last) in one run, as
    a batched backfill's run, where it is given."""
    import dagster as dg

    run_ops = {k: v for k, v in run_ops.items() if k in keys}
    tags = {} if span is None else {"dagster/asset_partition_range_start": span[0],
                                    "dagster/asset_partition_range_end": span[1]}
    res = dg.materialize(
        list(defs.assets) + list(defs.asset_checks), selection=keys, partition_key=partition,
        instance=instance, resources={**defs.resources, **(resources or {})},
        run_config={"ops": run_ops}, tags=tags,
        raise_on_error=False,
    )
    errors = [e.step_failure_data.error.to_string() for e in res.all_events
              if e.event_type_value == "STEP_FAILURE"]
    return res, errors


def materialized_metadata(result) -> dict:
    """{asset key: its materialisation's metadata} of a run's result."""
    return {e.asset_key.to_user_string(): e.step_materialization_data.materialization.metadata
            for e in result.get_asset_materialization_events()}


@dataclass
class World:
    """A tiny llama's code location, its artifact root and its corpus shard."""

    root: Path  # the artifact root
    shard: Path
    defs: object  # dagster.Definitions

    def materialize(self, keys: list[str], partition: str | None = None, instance=None,
                    resources: dict | None = None, span: tuple[str, str] | None = None, **ops):
        """(result, [failure messages]) of materialising `keys` in-process (on `instance`, or
        a new ephemeral one; with `resources` replacing the world's), with SWEEP_RUN's configs
        and `ops`."""
        import dagster as dg

        run = {**SWEEP_RUN, "corpus": {"config": {"paths": [str(self.shard)]}}, **ops}
        return materialize(self.defs, instance or dg.DagsterInstance.ephemeral(), keys, run,
                           partition, resources, span)

    def cached(self, res) -> dict[str, bool]:
        return {k: m["cached"].value for k, m in materialized_metadata(res).items()}

    def checks(self, res) -> dict:
        """{check name: its dagster AssetCheckEvaluation} of a run's result."""
        return {e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data
                for e in res.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}

    def path(self, *parts: str) -> Path:
        return self.root / "llama" / Path(*parts)


def make_world(folder: Path, model_dir: Path, artifacts: Path | None = None) -> World:
    """A World over the tiny model at `model_dir`: its corpus (120 generated documents) under
    `folder` (kept where it exists), its artifacts under `artifacts` (or folder/artifacts)."""
    shard = folder / "corpus" / "s0.json.gz"
    if not shard.exists():
        shard.parent.mkdir(parents=True, exist_ok=True)
        write_shard(shard, make_docs(120))
    root = artifacts or folder / "artifacts"
    return World(root.resolve(), shard, tiny_definitions(root, model_dir, verify_every_hours=24.0))


def copy_world(world: World, folder: Path, model_dir: Path) -> World:
    """A private copy of `world`'s artifacts under folder/artifacts, over the same shard and
    model: what `world` materialised is found there (cached), and damage stays private."""
    import shutil

    shutil.copytree(world.root, folder / "artifacts")
    w = make_world(folder, model_dir, folder / "artifacts")
    w.shard = world.shard
    return w


# -- a Dagster web server for the browser, GraphQL and door tests ---------------------------

SHOTS = ROOT / ".dihal" / "test-artifacts" / "ui"  # the browser tests' screenshots


def open_browser():
    """Headless Chromium through selenium (Debian's chromium and chromium-driver; .ci/run
    installs them). Where one is missing the calling test fails in CI (env CI set) and is
    skipped elsewhere, with what to install."""
    import pytest

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    missing = [n for n, p in (("chromium", chromium), ("chromium-driver", driver)) if p is None]
    try:
        from selenium import webdriver
    except ImportError:
        missing.append("selenium (pip)")
    if missing:
        msg = (f"the browser test needs {', '.join(missing)}: apt-get install chromium "
               "chromium-driver, pip install -e '.[dev]' (.ci/run does both)")
        pytest.fail(msg) if os.environ.get("CI") else pytest.skip(msg)
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
              "--window-size=1400,1000"):
        opts.add_argument(a)
    return webdriver.Chrome(options=opts, service=Service(driver))


def free_port() -> int:
    """A local TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Served:
    """A web server started by `serving`: its process (the leader of its own process group),
    its address and its log file."""

    proc: subprocess.Popen
    url: str
    log: Path

    def log_tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:]


def _group_alive(proc: subprocess.Popen) -> bool:
    """Whether any process of the group `proc` leads is left (the leader reaped first)."""
    proc.poll()
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to the process group led by `proc`; SIGKILL to what is left of it after
    `grace_s` (the leader may exit at once and leave its children behind: `dg dev`'s web
    server, daemon and code servers)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _group_alive(proc) and time.monotonic() < deadline:
        time.sleep(0.5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


@contextlib.contextmanager
def serving(command: list[str], log: Path, *, env: dict | None = None, cwd: Path = ROOT,
            deadline_s: float = 400, grace_s: float = 15) -> Iterator[Served]:
    """Start `command` (`dg dev`, `dagster dev`, `python -m dagster_webserver ...`, `python -m
    pipeline.ui`: anything taking `-h HOST -p PORT`) on a free local port in its own process
    group, its output to `log`; wait until it answers /server_info, failing with the log's end
    when the process exits or `deadline_s` passes first; on leaving the block, stop the whole
    process group (SIGTERM, SIGKILL to what is left after `grace_s`)."""
    port, name = free_port(), " ".join([Path(command[0]).name, *command[1:]])
    url = f"http://127.0.0.1:{port}"
    with open(log, "w") as out:
        proc = subprocess.Popen([*command, "-h", "127.0.0.1", "-p", str(port)], cwd=cwd,
                                env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        served = Served(proc, url, Path(log))
        try:
            deadline = time.monotonic() + deadline_s
            while True:
                try:
                    urllib.request.urlopen(f"{url}/server_info", timeout=2)
                    break
                except OSError:
                    if proc.poll() is not None:
                        raise AssertionError(f"{name} exited ({proc.returncode}) before "
                                             f"serving: {served.log_tail()}") from None
                    if time.monotonic() > deadline:
                        raise AssertionError(f"{name} did not serve in {deadline_s:.0f} "
                                             f"s: {served.log_tail()}") from None
                    time.sleep(1)
            yield served
        finally:
            _stop_group(proc, grace_s)


class ArrayReader:
    """A hidden-state dump in memory, one array of every layer ((n_layers, n_tokens, d) or
    (n_layers, n_seq, seq_len, d)) for any split, read as storage.states.StateReader reads one."""

    def __init__(self, layers):
        self.layers = layers

    def shape(self, split):
        return self.layers.shape

    def layer(self, split, layer):
        return self.layers[layer]


# ------------------------------------------------------------ hand-made budget-study points
BUDGET_STEPS = (128, 512, 2048)


def budget_point(model: str, layer: int, steps: int, nll: float):
    """One point of the budget study (dihal.rows.BudgetPoint) with made-up side measures."""
    from dihal.rows import BudgetPoint

    trains = model in ("bridge", "residual")
    return BudgetPoint(layer=layer, train_steps=steps, tokens=steps * 64,
                       distinct_tokens=min(steps * 64, 32768), model=model,
                       val_loss=0.5 if trains else None, t1_loss=0.7 if trains else None,
                       recon_error=0.3, hybrid_nll=nll, seconds=1.0)


def budget_study(bridge: dict[int, dict[int, float]], ridge: dict[int, float] | None = None,
                 residual: dict[int, dict[int, float]] | None = None, backbone: float = 3.0,
                 network: float | None = 4.5) -> list:
    """Bridge curves per layer; a ridge map of one NLL per layer at each of the bridge's
    budgets; the variant's curves; one backbone point per layer."""
    pts = []
    for layer, curve in bridge.items():
        pts += [budget_point("bridge", layer, s, v) for s, v in curve.items()]
        if ridge and layer in ridge:
            pts += [budget_point("ridge", layer, s, ridge[layer]) for s in curve]
        if network is not None:
            pts += [budget_point("network", layer, s, network) for s in curve]
        pts.append(budget_point("backbone", layer, 0, backbone))
    for layer, curve in (residual or {}).items():
        pts += [budget_point("residual", layer, s, v) for s, v in curve.items()]
    return pts


def budget_curve(*values: float) -> dict[int, float]:
    """Hybrid NLLs at BUDGET_STEPS, in order (fewer values: the first budgets only)."""
    return dict(zip(BUDGET_STEPS, values, strict=False))


# ---------------------------------------------------------------- hand-made frontier points
def frontier_point(model, role, t, ppl, div, **extra) -> dict:
    """A frontier point (dihal.evaluate.frontier.point) with a +-10 % Gen.PPL interval."""
    from dihal.evaluate.frontier import point
    from dihal.generation_rows import EVAL_ROW, GenerationRow

    metrics = GenerationRow.from_dict({"gen_ppl": ppl, "gen_ppl_low": ppl * 0.9,
                                       "gen_ppl_high": ppl * 1.1, "diversity": div,
                                       "diversity_spacy": div, "mean_judge_length": 20.0}, EVAL_ROW)
    return {**point(model, role, t, metrics, sampled=True).to_dict(), **extra}


def frontier_point_with_intervals(model, role, t, ppl, lo, hi, div, dlo, dhi) -> dict:
    """A frontier point with both its intervals given."""
    return {**frontier_point(model, role, t, ppl, div), "gen_ppl_low": lo, "gen_ppl_high": hi,
            "diversity_low": dlo, "diversity_high": dhi}
