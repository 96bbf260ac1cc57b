# Note: no `from __future__ import annotations`: Dagster reads the config annotations.
"""The training-budget study, as an asset: budget_<b>, one partition per candidate layer, on
top of that layer's sweep bridge (its protocol). The study's layers are the partitions
materialised (`python -m pipeline.budget` picks l*, one more shallow layer, a middle one and
the last). Not part of the main job: it trains every model at every budget of its config
(dihal.replace.budget)."""

import dagster as dg

from assets._stage import StageRun, stage_asset
from assets.configs import RUN_CONFIGS
from dihal.stages import asset_key
from storage import BudgetStudy, Corpus, HiddenStates, Sequences, SweepBridge

BudgetRunConfig = RUN_CONFIGS["budget"]


def study_of(run: StageRun, out: BudgetStudy, layer: int, cfg, protocol):
    """The compute of the study at `layer`: its training sequences (the Sequences stage's,
    extended by fresh ones packed from the same verified corpus shards), its estimate (logged,
    and refused before any training where the disk or the host memory cannot hold it), then
    every point not kept yet, each kept as soon as it exists."""
    def compute():
        from dihal.bridge.residual import ridge_started_denoiser
        from dihal.config import CorpusConfig, ExtractConfig, SequenceConfig
        from dihal.locate.corpus import iter_documents, separator_ids, verified_shards
        from dihal.preflight import available_memory, disk_free
        from dihal.replace.budget import (
            BudgetStudyConfig,
            estimate_study,
            study_layer,
            study_sequences,
        )
        from dihal.results import BudgetResult

        states, seqs, corpus = run.art(HiddenStates), run.art(Sequences), run.art(Corpus)
        dump, sm, cm = run.require(states, seqs, corpus)
        reader, seq_cfg, corpus_cfg = states.reader(), SequenceConfig(**sm.config), CorpusConfig(**cm.config)
        weights = run.resources.backbones.resolve(run.backbone, run.layout)
        tok = run.resources.backbones.load_tokenizer(run.backbone, run.layout)
        bos_id, eos_id = separator_ids(tok, weights.path)
        run.log(f"layer {layer}: packing the training sequences of budgets {list(cfg.budgets)}")
        tokens = study_sequences(
            lambda: iter_documents(verified_shards(corpus_cfg, cm.info["shards"]), corpus_cfg),
            tok, seq_cfg, seqs.token_ids(), cfg.budgets, protocol.batch_size, bos_id=bos_id,
            eos_id=eos_id)
        study = BudgetStudyConfig(layers=(layer,), budgets=cfg.budgets, residual=cfg.residual)
        estimate = estimate_study(study, protocol, n_layers=int(reader.attrs["n_layers"]),
                                  hidden=int(reader.attrs["hidden_size"]), seq_len=seq_cfg.seq_len,
                                  available=tokens.capacity, sweep_sequences=seq_cfg.n_train,
                                  stored="train" in reader.splits)
        run.log(f"layer {layer}: {estimate.summary()}")
        estimate.require(disk_free=disk_free(run.layout.root), host_available=available_memory())
        points = study_layer(
            run.model(), reader, layer, study, protocol, tokens, ExtractConfig(**dump.config),
            out.checkpoints, device=run.device(), finished=out.kept_points(), say=run.log,
            on_point=out.keep_point,
            residual_factory=ridge_started_denoiser if cfg.residual else None)
        return BudgetResult(layer, tuple(points), estimate.info())

    return compute


def budget_assets(backbone: str, n_layers: int) -> list:
    layers = dg.StaticPartitionsDefinition([str(ll) for ll in range(1, n_layers)])

    @stage_asset(backbone, "budget", [asset_key("hidden_states", backbone),
                                      asset_key("bridge_sweep", backbone)], partitions=layers,
                 kinds={"pytorch", "parquet"})
    def budget(context: dg.AssetExecutionContext, config: BudgetRunConfig) -> dg.MaterializeResult:
        """How the bridge's answers move with its training budget, at one layer: the bridge,
        the network control and our ridge-started residual bridge trained for each budget of
        optimiser steps (fresh corpus tokens where the corpus holds them), the ridge map fitted
        on the same tokens, each measured as the sweep measures its bridges; the backbone's
        NLL is the floor. Each point is kept as soon as it exists: an interrupted study
        resumes."""
        from dataclasses import replace

        from dihal.config import BridgeProtocol

        run, layer, cfg = StageRun(context, backbone), int(context.partition_key), config.to_dihal()
        # the protocol of this layer's sweep bridge, one training seed: the study's axis is the
        # budget (its first budget of one pass over the sweep's sequences is the sweep's bridge)
        sweep, out = run.art(SweepBridge, layer), run.art(BudgetStudy, layer)
        (swept,) = run.require(sweep)
        protocol = replace(BridgeProtocol(**swept.config), seeds=1, seed_layers=())
        return run.produce(out, {**cfg.__dict__, "protocol": protocol},
                           [run.art(HiddenStates), run.art(Sequences), run.art(Corpus), sweep],
                           study_of(run, out, layer, cfg, protocol), layer=layer)

    return [budget]
