"""Baselines at DiHAL's budget and the full-training comparison (METHOD.md s.2, s.5)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from dihal.baselines.base import Budget, baseline_loss, check_budget
from dihal.config import BaselineRunConfig  # noqa: F401 (re-exported)
from dihal.seeds import derive_seed
from dihal.training import TrainConfig, sample_budget, train_model


def reference_budget(bridge_metrics: dict, bridge_hparams_protocol: dict, seq_len: int) -> Budget:
    """The budget of DiHAL's bridge at l*: its denoiser size, tokens consumed, sampler steps."""
    return Budget(denoiser_parameters=int(bridge_metrics["denoiser_parameters"]),
                  train_tokens=int(bridge_metrics["train_tokens"]),
                  sampler_steps=int(bridge_hparams_protocol["steps"]), seq_len=seq_len)


def run_baseline(
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
) -> dict:
    """Build `name` at the reference size, check the budget, train (resumable), sample, score."""
    from dihal.baselines import build_baseline
    from dihal.evaluation import text_metrics, texts_until_eos

    n_seq, seq_len = train_ids.shape
    emb = backbone.decoder.embed_tokens.weight.detach().float().cpu()
    vocab = None
    if cfg.restrict_vocab:
        vocab = torch.unique(torch.cat([train_ids.flatten(),
                                        torch.tensor([backbone.bos_id, backbone.eos_id])]))
        lookup = torch.full((emb.shape[0],), -1, dtype=torch.long)
        lookup[vocab] = torch.arange(len(vocab))
        train_ids, emb = lookup[train_ids], emb[vocab]
    bos, eos = ((int(lookup[backbone.bos_id]), int(lookup[backbone.eos_id])) if vocab is not None
                else (backbone.bos_id, backbone.eos_id))
    model = build_baseline(name, embeddings=emb, seq_len=seq_len,
                           target_params=reference.denoiser_parameters,
                           seed=derive_seed(cfg.seed, "baseline", name), bos_id=bos, eos_id=eos)
    tcfg = TrainConfig(lr=cfg.lr, batch_size=int(bridge_protocol["batch_size"]),
                       epochs=float(bridge_protocol["epochs"]), seed=cfg.seed,
                       warmup_frac=float(bridge_protocol["warmup_frac"]),
                       weight_decay=float(bridge_protocol["weight_decay"]),
                       grad_clip=float(bridge_protocol["grad_clip"]), checkpoint_every=200)
    budget = Budget(denoiser_parameters=model.denoiser_parameters(),
                    train_tokens=sample_budget(n_seq, tcfg) * seq_len,
                    sampler_steps=reference.sampler_steps, seq_len=seq_len)
    check_budget(reference, budget, name)  # before spending any compute

    def log(entry: dict) -> None:
        if progress:
            progress(f"{name}: step {entry['step']}/{entry['total_steps']} loss {entry['loss']:.4f} "
                     f"({entry['elapsed_s']:.0f} s)")

    trained = train_model(model, baseline_loss(train_ids), n_seq, tcfg,
                          Path(workdir) / "checkpoints", log, protocol={"baseline": name},
                          device=device)
    gen = torch.Generator(device=device).manual_seed(derive_seed(cfg.seed, "sample", name))
    with torch.no_grad():
        tokens = model.sample(cfg.n_samples, cfg.length, reference.sampler_steps, gen).cpu()
    if vocab is not None:
        tokens = vocab[tokens]  # back to backbone ids
    texts = texts_until_eos(backbone.tokenizer, tokens, backbone.eos_id, prompt_len=0,
                            bos_id=backbone.bos_id)
    metrics = text_metrics(texts, judge)
    total = getattr(model, "total_parameters", lambda: sum(p.numel() for p in model.parameters()))()
    return {"model": name, **metrics, "budget": budget.to_dict(), "total_parameters": int(total),
            "train_steps": trained.step, "train_seconds": trained.wall_s,
            "final_loss": trained.train_loss if trained.train_loss is not None else float("nan"),
            "vocab_size": int(emb.shape[0]),
            "texts": texts, "module": model}
