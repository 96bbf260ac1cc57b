# Note: no `from __future__ import annotations`: Dagster reads the config annotations.
"""Replace, as assets: bridge_sweep_<b> (one partition per candidate layer) ->
bridgeability_<b>; bridge_<b> (the bridge at l*, full budget) -> eval_<b>."""

import json

import dagster as dg

from assets import _stage as st
from assets.configs import BridgeProtocolRunConfig, EvalRunConfig, FullBridgeRunConfig
from assets.staleness import bridgeability_upstream, swept_layers
from resources import BackboneResource, ComputeResource, JudgeResource, StorageResource
from storage import Manifest, write_manifest


def claim_workdir(workdir, fp: str, log) -> None:
    """Use `workdir` for the run with fingerprint `fp`: keep it (to resume) if it was started by
    the same fingerprint, else clear what another config left there."""
    import shutil

    stamp = workdir / "FINGERPRINT"
    if workdir.exists() and (not stamp.exists() or stamp.read_text().strip() != fp):
        log.info(f"discarding {workdir}: it was started under another config")
        shutil.rmtree(workdir)
    if stamp.exists():
        log.info(f"resuming from {workdir}")
    workdir.mkdir(parents=True, exist_ok=True)
    stamp.write_text(fp)


def train_and_save_bridge(context, backbone, layer, protocol, layout, workdir, backbones, compute, fp,
                    upstream, stage):
    """Train a bridge at `layer` into workdir (resumable), evaluate it, save it; the manifest."""
    import time

    from dihal.replace import evaluate_bridge, load_layer_data, train_layer_bridge
    from storage.bridges import save_bridge
    from storage.states import StateReader
    from storage.tables import write_table

    claim_workdir(workdir, fp, context.log)
    reader = StateReader(layout.hidden_states(backbone))
    data = load_layer_data(reader, layer, protocol)
    device = compute.resolved_device()
    t0 = time.monotonic()

    def progress(entry: dict) -> None:
        what = (f"val loss {entry['val_loss']:.4f}" if "val_loss" in entry
                else f"loss {entry['loss']:.4f}")
        context.log.info(f"layer {layer}: step {entry['step']}/{entry['total_steps']} {what} "
                         f"({entry['elapsed_s']:.0f} s)")

    denoiser, result = train_layer_bridge(data, protocol, workdir / "checkpoints",
                                          device=device, progress=progress)
    bb = backbones.load(backbone, layout, compute)
    metrics = evaluate_bridge(bb, denoiser.to(bb.device), data, protocol)
    from dihal.bridge.train import sample_budget

    tcfg = protocol.train_config(device)
    metrics.update({"layer": layer, "train_loss": result.train_loss, "steps": result.step,
                    # sequences consumed x sequence length: the budget baselines are matched to
                    "train_tokens": sample_budget(len(data.train), tcfg) * data.train.seq_len,
                    "seconds": round(time.monotonic() - t0, 1),
                    "resumed_from_step": result.resumed_from,
                    "denoiser_parameters": denoiser.param_count()})
    hparams = {"backbone": backbone, "layer": layer, "protocol": protocol.to_dict(),
               "denoiser_config": denoiser.cfg.to_dict(),
               "train_config": tcfg.to_dict(),
               "revision": bb.weights.revision, "fingerprint": fp}
    save_bridge(workdir, denoiser, data.cond_std, data.target_std, data.first_state, hparams)
    write_table(workdir / "curve.parquet", result.curve or [{"step": 0, "loss": float("nan")}])
    m = Manifest(stage=stage, backbone=backbone, fingerprint=fp, config=protocol.to_dict(),
                 upstream=upstream, info={"metrics": metrics, "metadata": {
                     k: (round(v, 5) if isinstance(v, float) else v) for k, v in metrics.items()}})
    write_manifest(workdir, m)
    return m


def replace_assets(backbone: str, n_layers: int) -> list:
    group = backbone
    hs_name, score_name = f"hidden_states_{backbone}", f"layer_score_{backbone}"
    sweep_name, bness_name = f"bridge_sweep_{backbone}", f"bridgeability_{backbone}"
    bridge_name, eval_name = f"bridge_{backbone}", f"eval_{backbone}"
    layers = dg.StaticPartitionsDefinition([str(ll) for ll in range(1, n_layers)])

    @dg.asset(name=sweep_name, deps=[hs_name], group_name=group, partitions_def=layers,
              kinds={"pytorch", "safetensors"}, code_version=st.CODE_VERSIONS["bridge_sweep"])
    def bridge_sweep(context: dg.AssetExecutionContext, config: BridgeProtocolRunConfig,
                     storage: StorageResource, backbones: BackboneResource,
                     compute: ComputeResource) -> dg.MaterializeResult:
        """A bridge per candidate layer under one fixed protocol, with its bridgeability:
        validation loss, reconstruction error, hybrid NLL, top-1 agreement."""
        from dihal.atomic import replace_dir

        layer = int(context.partition_key)
        layout = storage.layout()
        up = st.require_upstream(layout.hidden_states(backbone), hs_name)
        protocol = config.to_dihal()
        out = layout.bridge_sweep(backbone, layer)
        fp = st.stage_fingerprint("bridge_sweep", protocol.to_dict(), {hs_name: up.fingerprint},
                                  layer=layer)
        if (m := st.reuse(out, fp)) is not None:
            return st.result(m, out, cached=True)
        work = out.with_name(out.name + ".partial")
        m = train_and_save_bridge(context, backbone, layer, protocol, layout, work, backbones, compute,
                            fp, {hs_name: up.fingerprint}, "bridge_sweep")
        replace_dir(work, out)
        return st.result(m, out, cached=False)

    @dg.asset(name=bness_name, deps=[bridge_sweep, score_name], group_name=group,
              kinds={"parquet"}, code_version=st.CODE_VERSIONS["bridgeability"])
    def bridgeability(context: dg.AssetExecutionContext,
                      storage: StorageResource) -> dg.MaterializeResult:
        """Does the geometry score predict bridgeability? Spearman of S_l (each normalisation)
        and of the depth control -l against -val loss, -reconstruction error, -hybrid NLL."""
        from dihal.plots import plot_bridgeability
        from dihal.replace import bridgeability_table
        from storage import atomic_dir
        from storage.tables import read_rows, write_table

        layout = storage.layout()
        hs = st.require_upstream(layout.hidden_states(backbone), hs_name)
        score = st.require_upstream(layout.layer_score(backbone), score_name)
        swept = swept_layers(layout, backbone, n_layers, hs.fingerprint)
        if len(swept) < 3:
            raise dg.Failure(
                f"bridgeability needs >= 3 swept layers of the current hidden states, found "
                f"{len(swept)}. Run: dagster asset materialize --select {sweep_name} --partition L "
                f"for more layers L (or `python -m pipeline.main --backbone {backbone}`).")
        if len({json.dumps(m.config, sort_keys=True) for m in swept}) > 1:
            raise dg.Failure("the swept layers were trained under different protocols; "
                             "re-materialise the sweep with one config")
        upstream = bridgeability_upstream(score, swept, backbone)
        out = layout.bridgeability(backbone)
        fp = st.stage_fingerprint("bridgeability", {}, upstream)
        if (m := st.reuse(out, fp)) is not None:
            return st.result(m, out, cached=True, plot=st.png_markdown(out / "scatter.png", "S_l vs bridgeability"))
        layer_rows = [m.info["metrics"] for m in swept]
        score_rows = [r for r in read_rows(layout.layer_score(backbone) / "layer_score.parquet")
                      if r["candidate"]]
        table = bridgeability_table(layer_rows, score_rows)
        l_star = score.info["l_star"]
        summary = {"l_star": l_star, "oracle": table["oracle"], "worst": table["worst"],
                   "swept_layers": table["layers"]}
        m = Manifest(stage="bridgeability", backbone=backbone, fingerprint=fp, config={},
                     upstream=upstream, info={**summary, "spearman": table["rows"],
                                              "metadata": summary})
        with atomic_dir(out) as tmp:
            write_table(tmp / "layers.parquet", sorted(layer_rows, key=lambda r: r["layer"]))
            write_table(tmp / "spearman.parquet", table["rows"])
            plot_bridgeability(layer_rows, score_rows, tmp / "scatter.png",
                               f"{backbone}: score vs bridgeability (l* = {l_star})")
            write_manifest(tmp, m)
        cols = ["predictor", "spearman_vs_-val_loss", "spearman_vs_-recon_error",
                "spearman_vs_-hybrid_nll"]
        return st.result(
            m, out, cached=False,
            plot=st.png_markdown(out / "scatter.png", "S_l vs bridgeability"),
            spearman=st.table_markdown(table["rows"], cols, ".3f"),
            layers=st.table_markdown(sorted(layer_rows, key=lambda r: r["layer"]),
                                     ["layer", "val_loss", "recon_error", "hybrid_nll",
                                      "top1_agreement"]),
        )

    @dg.asset(name=bridge_name, deps=[score_name, hs_name], group_name=group,
              kinds={"pytorch", "safetensors"}, code_version=st.CODE_VERSIONS["bridge"])
    def bridge(context: dg.AssetExecutionContext, config: FullBridgeRunConfig,
               storage: StorageResource, backbones: BackboneResource,
               compute: ComputeResource) -> dg.MaterializeResult:
        """The bridge at the geometry-selected layer l*, trained with the full budget."""
        from dihal.atomic import replace_dir

        layout = storage.layout()
        hs = st.require_upstream(layout.hidden_states(backbone), hs_name)
        score = st.require_upstream(layout.layer_score(backbone), score_name)
        protocol = config.to_dihal()
        layer = int(score.info["l_star"])
        out = layout.bridge(backbone)
        upstream = {hs_name: hs.fingerprint, score_name: score.fingerprint}
        fp = st.stage_fingerprint("bridge", protocol.to_dict(), upstream, layer=layer)
        if (m := st.reuse(out, fp)) is not None:
            return st.result(m, out, cached=True)
        work = out.with_name(out.name + ".partial")
        m = train_and_save_bridge(context, backbone, layer, protocol, layout, work, backbones, compute,
                            fp, upstream, "bridge")
        replace_dir(work, out)
        return st.result(m, out, cached=False)

    @dg.asset(name=eval_name, deps=[bridge], group_name=group, kinds={"jsonl"},
              code_version=st.CODE_VERSIONS["eval"])
    def evaluation(context: dg.AssetExecutionContext, config: EvalRunConfig,
                   storage: StorageResource, backbones: BackboneResource,
                   compute: ComputeResource, judge: JudgeResource) -> dg.MaterializeResult:
        """Unconditional samples of the hybrid at l* and of the backbone (same count, length,
        temperature, seeds): Gen.PPL under the judge, diversity, repetition, latency."""
        from dihal.evaluation import evaluate_generation
        from storage import atomic_dir
        from dihal.atomic import atomic_write_text
        from storage.bridges import load_bridge
        from storage.tables import write_table

        layout = storage.layout()
        br = st.require_upstream(layout.bridge(backbone), bridge_name)
        cfg = config.to_dihal()
        out = layout.evaluation(backbone)
        fp = st.stage_fingerprint("eval", config.model_dump(), {bridge_name: br.fingerprint},
                                  judge=judge.name)
        if (m := st.reuse(out, fp)) is not None:
            return st.result(m, out, cached=True)
        bb = backbones.load(backbone, layout, compute)
        saved = load_bridge(layout.bridge(backbone), device=str(bb.device))
        scorer = judge.load(layout, compute)
        res = evaluate_generation(bb, saved, scorer, cfg, progress=context.log.info)
        m = Manifest(stage="eval", backbone=backbone, fingerprint=fp, config=config.model_dump(),
                     upstream={bridge_name: br.fingerprint},
                     info={"rows": res["rows"], "judge": scorer.info(),
                           "metadata": {"layer": saved["hparams"]["layer"],
                                        "judge": scorer.info().get("id")}})
        with atomic_dir(out) as tmp:
            write_table(tmp / "eval.parquet", res["rows"])
            atomic_write_text(tmp / "samples.jsonl", res["samples_jsonl"])
            write_manifest(tmp, m)
        return st.result(
            m, out, cached=False,
            table=st.table_markdown(res["rows"], ["model", "gen_ppl", "diversity", "repetition",
                                                  "mean_length", "ms_per_token"]),
            samples=dg.MetadataValue.md(res["preview_md"]),
        )

    reeval_job = dg.define_asset_job(
        f"reevaluate_{backbone}", selection=[bness_name, eval_name],
        description="Re-materialise the evaluation assets; the schedule runs it when stale.")

    @dg.schedule(job=reeval_job, cron_schedule="0 3 * * *", name=f"reevaluate_{backbone}_nightly",
                 default_status=dg.DefaultScheduleStatus.STOPPED)
    def reevaluate(context: dg.ScheduleEvaluationContext, storage: StorageResource):
        """Nightly: re-run bridgeability and eval when an upstream artifact changed since they
        were made (fingerprint mismatch); skip otherwise."""
        from assets.staleness import stale_assets

        stale = stale_assets(storage.layout(), backbone)
        if not stale:
            return dg.SkipReason(f"{bness_name} and {eval_name} are up to date")
        return dg.RunRequest(run_key=None, asset_selection=[dg.AssetKey(a) for a in stale],
                             tags={"reason": "stale: " + ", ".join(stale)})

    return [bridge_sweep, bridgeability, bridge, evaluation, reeval_job, reevaluate]
