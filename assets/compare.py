# Note: no `from __future__ import annotations`: Dagster reads the config annotations.
"""The comparison, as assets: baseline_<b> (one partition per baseline), comparison_<b>,
full_training_<b> (l*, oracle, worst under the full budget) and report_<b>."""

import json

import dagster as dg

from assets import _stage as st
from assets.configs import BaselineRunConfig, EvalRunConfig
from assets.replace import claim_workdir
from resources import BackboneResource, ComputeResource, JudgeResource, StorageResource
from storage import Manifest, atomic_dir, read_manifest, write_manifest

BASELINE_NAMES = ("diffusion-lm", "sed", "ld4lg", "codar")


def compare_assets(backbone: str) -> list:
    group = backbone
    seq_name, bridge_name, eval_name = f"sequences_{backbone}", f"bridge_{backbone}", f"eval_{backbone}"
    bness_name, score_name, geo_name = (f"bridgeability_{backbone}", f"layer_score_{backbone}",
                                        f"geometry_{backbone}")
    base_name, cmp_name = f"baseline_{backbone}", f"comparison_{backbone}"
    full_name, report_name = f"full_training_{backbone}", f"report_{backbone}"
    hs_name = f"hidden_states_{backbone}"

    @dg.asset(name=base_name, deps=[seq_name, bridge_name], group_name=group,
              partitions_def=dg.StaticPartitionsDefinition(list(BASELINE_NAMES)),
              kinds={"pytorch", "safetensors"}, code_version=st.CODE_VERSIONS["baseline"])
    def baseline(context: dg.AssetExecutionContext, config: BaselineRunConfig,
                 storage: StorageResource, backbones: BackboneResource, compute: ComputeResource,
                 judge: JudgeResource) -> dg.MaterializeResult:
        """A continuous-diffusion baseline at DiHAL's budget: same denoiser size (+-10%),
        training tokens, sampler steps, sequence length, judge and metric code."""
        import torch
        from safetensors.torch import save_model

        from dihal.compare import reference_budget, run_baseline
        from dihal.atomic import atomic_write_json, atomic_write_text, replace_dir
        from storage.tables import read_sequences

        name = context.partition_key
        layout = storage.layout()
        seqs = st.require_upstream(layout.sequences(backbone), seq_name)
        br = st.require_upstream(layout.bridge(backbone), bridge_name)
        ref = reference_budget(br.info["metrics"], br.config, seqs.config["seq_len"])
        cfg = config.to_dihal()
        out = layout.baseline(backbone, name)
        from dihal.baselines import VERSIONS

        fp = st.stage_fingerprint("baseline", {"name": name, **cfg.__dict__},
                                  {seq_name: seqs.fingerprint, bridge_name: br.fingerprint},
                                  judge=judge.name, recipe_version=VERSIONS[name])
        if (m := st.reuse(out, fp)) is not None:
            return st.result(m, out, cached=True)
        train_ids = torch.as_tensor(
            read_sequences(layout.sequences(backbone) / "sequences.parquet")["train"])
        bb = backbones.load(backbone, layout, compute)
        work = out.with_name(out.name + ".partial")
        claim_workdir(work, fp, context.log)
        res = run_baseline(name, bb, train_ids, ref, br.config, cfg, work, judge.load(layout, compute),
                           progress=st.throttled(context.log), device=str(bb.device))
        model, texts = res.pop("module"), res.pop("texts")
        save_model(model, str(work / "model.safetensors"))
        atomic_write_json(work / "hparams.json", {"baseline": name, "config": cfg.__dict__,
                                                  "budget": res["budget"], "reference": ref.to_dict()})
        atomic_write_text(work / "samples.jsonl", "".join(
            json.dumps({"model": name, "index": i, "text": t}) + "\n" for i, t in enumerate(texts)))
        m = Manifest(stage="baseline", backbone=backbone, fingerprint=fp,
                     config={"name": name, **cfg.__dict__},
                     upstream={seq_name: seqs.fingerprint, bridge_name: br.fingerprint},
                     info={"row": res, "samples": texts[:5], "metadata": {
                         k: res[k] for k in ("gen_ppl", "diversity", "repetition", "train_steps")}})
        write_manifest(work, m)
        replace_dir(work, out)
        return st.result(m, out, cached=False, budget=res["budget"],
                         samples=dg.MetadataValue.md("\n".join(f"- {json.dumps(t[:200])}" for t in texts[:5])))

    @dg.asset(name=cmp_name, deps=[eval_name, baseline], group_name=group, kinds={"parquet"},
              code_version=st.CODE_VERSIONS["comparison"])
    def comparison(context: dg.AssetExecutionContext, storage: StorageResource) -> dg.MaterializeResult:
        """Gen.PPL and diversity of DiHAL, the four baselines and the backbone, with budgets."""
        from storage.tables import write_table

        layout = storage.layout()
        ev = st.require_upstream(layout.evaluation(backbone), eval_name)
        br = st.require_upstream(layout.bridge(backbone), bridge_name)
        bases = {n: read_manifest(layout.baseline(backbone, n)) for n in BASELINE_NAMES}
        current = {n: m for n, m in bases.items()
                   if m is not None and m.upstream.get(bridge_name) == br.fingerprint}
        missing = [n for n in BASELINE_NAMES if n not in current]
        if missing:
            context.log.warning(f"baselines not materialised for the current bridge: {missing}")
        upstream = {eval_name: ev.fingerprint,
                    **{f"{base_name}[{n}]": m.fingerprint for n, m in current.items()}}
        out = layout.comparison(backbone)
        fp = st.stage_fingerprint("comparison", {}, upstream)
        if (m := st.reuse(out, fp)) is not None:
            return st.result(m, out, cached=True)
        ref_budget = {"denoiser_parameters": br.info["metrics"]["denoiser_parameters"],
                      "train_tokens": br.info["metrics"]["train_tokens"],
                      "sampler_steps": br.config["steps"], "seq_len": None}
        rows = []
        for r in ev.info["rows"]:
            is_ref = r["model"].startswith("backbone")
            rows.append({"model": r["model"], "gen_ppl": r["gen_ppl"], "diversity": r["diversity"],
                         "repetition": r["repetition"], "mean_length": r["mean_length"],
                         **({k: None for k in ref_budget} if is_ref else ref_budget)})
        for n, m in current.items():
            r = m.info["row"]
            rows.append({"model": n, "gen_ppl": r["gen_ppl"], "diversity": r["diversity"],
                         "repetition": r["repetition"], "mean_length": r["mean_length"], **r["budget"]})
        seq_len = next((r["seq_len"] for r in rows if r.get("seq_len")), None)
        for r in rows:
            if r["model"].startswith("DiHAL"):
                r["seq_len"] = seq_len
        m = Manifest(stage="comparison", backbone=backbone, fingerprint=fp, config={},
                     upstream=upstream, info={"rows": rows, "missing": missing,
                                              "metadata": {"models": len(rows), "missing": missing}})
        with atomic_dir(out) as tmp:
            write_table(tmp / "comparison.parquet", [{k: (None if v is None else str(v) if k == "model" else float(v)) for k, v in r.items()} for r in rows])
            write_manifest(tmp, m)
        return st.result(m, out, cached=False, table=st.table_markdown(
            rows, ["model", "gen_ppl", "diversity", "repetition", "denoiser_parameters",
                   "train_tokens", "sampler_steps"]))

    @dg.asset(name=full_name, deps=[bness_name, bridge_name], group_name=group,
              kinds={"pytorch", "parquet"}, code_version=st.CODE_VERSIONS["full_training"])
    def full_training(context: dg.AssetExecutionContext, config: EvalRunConfig,
                      storage: StorageResource, backbones: BackboneResource,
                      compute: ComputeResource, judge: JudgeResource) -> dg.MaterializeResult:
        """Bridges at l* (geometry), the oracle and the worst sweep layer under the full budget
        of bridge_<b>, evaluated the same way (bridgeability + generation)."""
        from assets.replace import train_and_save_bridge
        from dihal.evaluation import evaluate_generation
        from dihal.replace import BridgeProtocol
        from dihal.atomic import replace_dir
        from storage.bridges import load_bridge
        from storage.tables import write_table

        layout = storage.layout()
        bness = st.require_upstream(layout.bridgeability(backbone), bness_name)
        br = st.require_upstream(layout.bridge(backbone), bridge_name)
        hs = st.require_upstream(layout.hidden_states(backbone), hs_name)
        roles = {"geometry l*": bness.info["l_star"], "oracle": bness.info["oracle"],
                 "worst": bness.info["worst"]}
        upstream = {bness_name: bness.fingerprint, bridge_name: br.fingerprint}
        out = layout.full_training(backbone)
        fp = st.stage_fingerprint("full_training", config.model_dump(), upstream, judge=judge.name)
        if (m := st.reuse(out, fp)) is not None:
            return st.result(m, out, cached=True)
        protocol = BridgeProtocol(**br.config)
        ecfg = config.to_dihal()
        bb = backbones.load(backbone, layout, compute)
        scorer = judge.load(layout, compute)
        rows = []
        for role, layer in roles.items():
            if layer == br.info["metrics"]["layer"]:
                directory, metrics = layout.bridge(backbone), br.info["metrics"]
            else:
                directory = layout.full_training_bridge(backbone, layer)
                lfp = st.stage_fingerprint("bridge", protocol.to_dict(), {hs_name: hs.fingerprint}, layer=layer)
                mm = st.reuse(directory, lfp)
                if mm is None:
                    context.log.info(f"training the {role} bridge at layer {layer}")
                    work = directory.with_name(directory.name + ".partial")
                    mm = train_and_save_bridge(context, backbone, layer, protocol, layout, work,
                                               backbones, compute, lfp, {hs_name: hs.fingerprint}, "bridge")
                    replace_dir(work, directory)
                metrics = mm.info["metrics"]
            saved = load_bridge(directory, device=str(bb.device))
            gen = evaluate_generation(bb, saved, scorer, ecfg, progress=context.log.info)
            hybrid = gen["rows"][0]
            rows.append({"role": role, "layer": layer, "val_loss": metrics["val_loss"],
                         "recon_error": metrics["recon_error"], "hybrid_nll": metrics["hybrid_nll"],
                         "top1_agreement": metrics["top1_agreement"], "gen_ppl": hybrid["gen_ppl"],
                         "diversity": hybrid["diversity"], "repetition": hybrid["repetition"],
                         "train_tokens": metrics["train_tokens"]})
        m = Manifest(stage="full_training", backbone=backbone, fingerprint=fp,
                     config=config.model_dump(), upstream=upstream,
                     info={"rows": rows, "metadata": {"roles": {r["role"]: r["layer"] for r in rows}}})
        with atomic_dir(out) as tmp:
            write_table(tmp / "full_training.parquet", rows)
            write_manifest(tmp, m)
        return st.result(m, out, cached=False, table=st.table_markdown(
            rows, ["role", "layer", "val_loss", "hybrid_nll", "top1_agreement", "gen_ppl", "diversity"]))

    @dg.asset(name=report_name, deps=[cmp_name, full_name, bness_name, score_name, geo_name],
              group_name=group, kinds={"html"}, code_version=st.CODE_VERSIONS["report"])
    def report(context: dg.AssetExecutionContext, storage: StorageResource) -> dg.MaterializeResult:
        """One self-contained report (HTML with embedded plots, and Markdown)."""
        from dihal.reporting import build_report
        from dihal.atomic import atomic_write_text

        layout = storage.layout()
        parts = {n: st.require_upstream(d, n) for n, d in (
            (geo_name, layout.geometry(backbone)), (score_name, layout.layer_score(backbone)),
            (bness_name, layout.bridgeability(backbone)), (cmp_name, layout.comparison(backbone)),
            (full_name, layout.full_training(backbone)))}
        out = layout.report(backbone)
        fp = st.stage_fingerprint("report", {}, {n: m.fingerprint for n, m in parts.items()})
        if (m := st.reuse(out, fp)) is not None:
            return st.result(m, out, cached=True, report=dg.MetadataValue.path(str(out / "report.html")))
        rep = build_report(layout, backbone)
        m = Manifest(stage="report", backbone=backbone, fingerprint=fp, config={},
                     upstream={n: p.fingerprint for n, p in parts.items()}, info={"metadata": {}})
        with atomic_dir(out) as tmp:
            atomic_write_text(tmp / "report.html", rep.html())
            atomic_write_text(tmp / "report.md", rep.markdown())
            write_manifest(tmp, m)
        return st.result(m, out, cached=False, report=dg.MetadataValue.path(str(out / "report.html")),
                         report_md=dg.MetadataValue.path(str(out / "report.md")))

    return [baseline, comparison, full_training, report]
