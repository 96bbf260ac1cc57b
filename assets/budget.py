# Note: no `from __future__ import annotations`: Dagster reads the config annotations.
"""The training-budget study, as assets: budget_<b>, one partition per candidate layer, on
top of that layer's sweep bridge (its protocol). The study's layers are the partitions
materialised (`python -m pipeline.budget` picks l*, one more shallow layer, a middle one and
the last). Not part of the main job: it trains every model at every budget of its config
(dihal.replace.budget). And budget_generation_<b>: DiHAL at l* and CoDAR trained at the study's
lowest and highest budget, sampled and scored (dihal.compare.budget_generation;
`python -m pipeline.budget --generation`)."""

import dagster as dg

from assets._stage import StageRun, stage_asset
from assets.configs import RUN_CONFIGS
from dihal.run.stages import asset_key
from storage import (
    BudgetGeneration,
    BudgetStudy,
    Corpus,
    HiddenStates,
    LayerScore,
    Sequences,
    SweepBridge,
)

BudgetRunConfig = RUN_CONFIGS["budget"]
BudgetGenerationRunConfig = RUN_CONFIGS["budget_generation"]


def study_tokens(run: StageRun, layer: int, budgets, batch_size: int):
    """The study's training sequences up to the largest of `budgets` (the Sequences stage's,
    extended by fresh ones packed from the same verified corpus shards: study_sequences), with
    the reader of the dump and the Sequences stage's config."""
    from dihal.config import CorpusConfig, SequenceConfig
    from dihal.locate.corpus import recorded_shards, separator_ids, verified_documents
    from dihal.replace.budget import study_sequences

    states, seqs, corpus = run.art(HiddenStates), run.art(Sequences), run.art(Corpus)
    _, sm, cm = run.require(states, seqs, corpus)
    seq_cfg, corpus_cfg = SequenceConfig(**sm.config), CorpusConfig(**cm.config)
    weights = run.resources.backbones.resolve(run.backbone, run.layout)
    tok = run.resources.backbones.load_tokenizer(run.backbone, run.layout)
    bos_id, eos_id = separator_ids(tok, weights.path)
    run.log(f"layer {layer}: packing the training sequences of budgets {list(budgets)}")
    recorded = recorded_shards(cm.info)
    tokens = study_sequences(
        lambda: verified_documents(corpus_cfg, recorded),
        tok, seq_cfg, seqs.token_ids(), budgets, batch_size, bos_id=bos_id, eos_id=eos_id)
    return tokens, states.reader(), seq_cfg


def _require(run: StageRun, estimate, weights: int) -> None:
    """Refuse (before any training) what the disk or the host memory cannot hold. The models
    are loaded already, so the memory free now, with what their weights hold, is set against
    the estimate, which counts those weights."""
    from dihal.run.preflight import available_memory, disk_free

    estimate.require(disk_free=disk_free(run.layout.root),
                     host_available=available_memory() + weights)


def study_of(run: StageRun, out: BudgetStudy, layer: int, cfg, protocol):
    """The compute of the study at `layer`: its training sequences (the Sequences stage's,
    extended by fresh ones packed from the same verified corpus shards), its estimate (logged,
    and refused before any training where the disk or the host memory cannot hold it), then
    every point not kept yet, each kept as soon as it exists."""
    def compute():
        from dihal.bridge.residual import ridge_started_denoiser
        from dihal.config import ExtractConfig
        from dihal.replace.budget import BudgetStudyConfig, study_layer
        from dihal.results import BudgetResult
        from dihal.run.estimates import estimate_study, host_weight_bytes

        tokens, reader, seq_cfg = study_tokens(run, layer, cfg.budgets, protocol.batch_size)
        (dump,) = run.require(run.art(HiddenStates))
        study = BudgetStudyConfig(layers=(layer,), budgets=cfg.budgets, residual=cfg.residual)
        model = run.model()
        weights = host_weight_bytes(model.model)
        estimate = estimate_study(study, protocol, n_layers=int(reader.attrs["n_layers"]),
                                  hidden=int(reader.attrs["hidden_size"]), seq_len=seq_cfg.seq_len,
                                  available=tokens.capacity, sweep_sequences=seq_cfg.n_train,
                                  stored="train" in reader.splits, weights_bytes=weights)
        run.log(f"layer {layer}: {estimate.summary()}")
        _require(run, estimate, weights)
        points = study_layer(
            model, reader, layer, study, protocol, tokens, ExtractConfig(**dump.config),
            out.checkpoints, device=run.device(), finished=out.kept_points(), say=run.log,
            on_point=out.keep_point,
            residual_factory=ridge_started_denoiser if cfg.residual else None)
        return BudgetResult(layer, tuple(points), estimate.info())

    return compute


def l_star_protocol(run: StageRun, cfg):
    """(l*, as the layer score picks it and the budget study takes it; l*'s sweep bridge; its
    protocol with one training seed, as the study trains its bridges, sampled at cfg's K where
    set)."""
    from dihal.replace.budget import study_protocol

    (score,) = run.require(run.art(LayerScore))
    layer = int(score.info["l_star"])
    sweep = run.art(SweepBridge, layer)
    (swept,) = run.require(sweep)
    return layer, sweep, study_protocol(swept.config, cfg)


def generation_of(run: StageRun, out: BudgetGeneration, layer: int, cfg, protocol):
    """The compute of generation at the budget's ends at l* = `layer`: the study's training
    sequences, its estimate (logged, and refused before any training where the disk or the host
    memory cannot hold it), then every row not kept yet, each kept with its samples as soon as
    it exists."""
    def compute():
        from dihal.compare.budget_generation import generate_at_budgets
        from dihal.config import ExtractConfig
        from dihal.results import BudgetGenerationResult
        from dihal.run.estimates import estimate_generation, host_weight_bytes

        tokens, reader, seq_cfg = study_tokens(run, layer, cfg.budgets, protocol.batch_size)
        (dump,) = run.require(run.art(HiddenStates))
        model, judge = run.model(), run.judge()
        weights = host_weight_bytes(model.model, judge.model)
        estimate = estimate_generation(
            cfg, protocol, layer=layer, hidden=int(reader.attrs["hidden_size"]),
            vocab=int(model.model.config.vocab_size), seq_len=seq_cfg.seq_len,
            available=tokens.capacity, sweep_sequences=seq_cfg.n_train,
            stored="train" in reader.splits, bos_id=int(model.bos_id), weights_bytes=weights)
        run.log(f"l* = {layer}: {estimate.summary()}")
        _require(run, estimate, weights)
        rows, samples = generate_at_budgets(
            model, judge, reader, layer, protocol, tokens, ExtractConfig(**dump.config),
            cfg, out.checkpoints, device=run.device(), finished=out.kept(), say=run.log,
            progress=run.throttled(), on_row=out.keep)
        return BudgetGenerationResult(layer, tuple(rows), samples, estimate.info())

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
        from dihal.replace.budget import study_protocol

        run, layer, cfg = StageRun(context, backbone), int(context.partition_key), config.to_dihal()
        # the protocol of this layer's sweep bridge, one training seed, measured at the study's
        # setting: the study's axis is the budget (its first budget of one pass over the sweep's
        # sequences is the sweep's bridge)
        sweep, out = run.art(SweepBridge, layer), run.art(BudgetStudy, layer)
        (swept,) = run.require(sweep)
        protocol = study_protocol(swept.config, cfg)
        return run.produce(out, {**cfg.__dict__, "protocol": protocol},
                           [run.art(HiddenStates), run.art(Sequences), run.art(Corpus), sweep],
                           study_of(run, out, layer, cfg, protocol), layer=layer)

    @stage_asset(backbone, "budget_generation", [asset_key("hidden_states", backbone),
                                                 asset_key("layer_score", backbone),
                                                 asset_key("bridge_sweep", backbone)],
                 kinds={"pytorch", "parquet"})
    def budget_generation(context: dg.AssetExecutionContext,
                          config: BudgetGenerationRunConfig) -> dg.MaterializeResult:
        """DiHAL at l* and CoDAR (the strongest baseline) trained at the budget study's lowest
        and highest budget, on its training sequences under l*'s sweep-bridge protocol (CoDAR
        at DiHAL's denoiser size, the same tokens and optimiser steps), each sampled and scored
        as the eval samples: Gen.PPL and diversity with their intervals. Each row is kept as
        soon as it exists: an interrupted run resumes."""
        from dihal.compare.baselines import VERSIONS

        run, cfg = StageRun(context, backbone), config.to_dihal()
        layer, sweep, protocol = l_star_protocol(run, cfg)
        out = run.art(BudgetGeneration)
        return run.produce(out, {**cfg.__dict__, "protocol": protocol, "layer": layer},
                           [run.art(HiddenStates), run.art(Sequences), run.art(Corpus),
                            run.art(LayerScore), sweep],
                           generation_of(run, out, layer, cfg, protocol), layer=layer,
                           judge=run.judge_identity(), recipe_version=VERSIONS["codar"])

    return [budget, budget_generation]
