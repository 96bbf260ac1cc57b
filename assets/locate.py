# Note: no `from __future__ import annotations`: Dagster reads the config annotations.
"""Locate, as assets: corpus -> sequences_<b> -> hidden_states_<b> -> geometry_<b> ->
layer_score_<b>, one family per backbone. Each asset reuses its artifact when its fingerprint
(config + code version + upstream fingerprints) is unchanged."""


import dagster as dg

from assets import _stage as st
from assets.configs import (
    CorpusRunConfig,
    ExtractRunConfig,
    GeometryRunConfig,
    LayerScoreRunConfig,
    SequencesRunConfig,
)
from resources import BackboneResource, ComputeResource, StorageResource
from storage import Manifest, atomic_dir, write_manifest


@dg.asset(group_name="corpus", code_version=st.CODE_VERSIONS["corpus"], kinds={"json"})
def corpus(
    context: dg.AssetExecutionContext, config: CorpusRunConfig, storage: StorageResource
) -> dg.MaterializeResult:
    """Dolma-format shards: resolved, hashed and validated (documents, empty and malformed
    lines counted). Default: the embedded sample in data/dolma_sample."""
    from dihal.corpus import CorpusStats, iter_documents, resolve_shards
    from storage.manifest import file_sha256

    cfg = config.to_dihal()
    out = storage.layout().corpus()
    shards = resolve_shards(cfg)
    identity = [s if "://" in s else f"{s}#{file_sha256(s)}" for s in shards]
    fp = st.stage_fingerprint("corpus", cfg, {}, shards=identity)
    if (m := st.reuse(out, fp)) is not None:
        return st.result(m, out, cached=True)
    stats = CorpusStats()
    for _ in iter_documents(shards, cfg, stats):
        pass
    if stats.documents == 0:
        raise dg.Failure(f"the corpus ({len(shards)} shards) holds no usable document: {stats.to_dict()}")
    if stats.malformed:
        context.log.warning(f"skipped {stats.malformed} malformed lines, e.g. {stats.malformed_examples[:3]}")
    m = Manifest(
        stage="corpus", backbone=None, fingerprint=fp, config=cfg.__dict__,
        info={"shards": identity, "stats": stats.to_dict(), "metadata": {
            "shards": len(shards), "documents": stats.documents,
            "malformed_lines": stats.malformed, "empty_documents": stats.skipped_empty,
            "by_source": dict(stats.by_source),
        }},
    )
    out.mkdir(parents=True, exist_ok=True)
    write_manifest(out, m)
    return st.result(m, out, cached=False)


def locate_assets(backbone: str) -> list:
    """The Locate asset family of one backbone, with its checks."""
    group = backbone
    seq_name, hs_name = f"sequences_{backbone}", f"hidden_states_{backbone}"
    geo_name, score_name = f"geometry_{backbone}", f"layer_score_{backbone}"

    @dg.asset(name=seq_name, deps=[corpus], group_name=group, kinds={"parquet"},
              code_version=st.CODE_VERSIONS["sequences"])
    def sequences(
        context: dg.AssetExecutionContext, config: SequencesRunConfig,
        storage: StorageResource, backbones: BackboneResource,
    ) -> dg.MaterializeResult:
        """Fixed-length train/val token sequences, document-level split, packed with EOS."""
        from dihal.corpus import CorpusConfig, iter_documents, pack_sequences
        from storage.tables import write_table

        layout = storage.layout()
        up = st.require_upstream(layout.corpus(), "corpus")
        cfg = config.to_dihal()
        weights = backbones.resolve(backbone, layout)
        out = layout.sequences(backbone)
        fp = st.stage_fingerprint("sequences", cfg, {"corpus": up.fingerprint},
                                  revision=weights.revision)
        if (m := st.reuse(out, fp)) is not None:
            return st.result(m, out, cached=True)
        tok = backbones.load_tokenizer(backbone, layout)
        bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        ccfg = CorpusConfig(**{**up.config, "paths": tuple(up.config["paths"])})
        shards = [s.split("#")[0] for s in up.info["shards"]]
        packed = pack_sequences(iter_documents(shards, ccfg), tok, cfg,
                                bos_id=bos, eos_id=tok.eos_token_id)
        rows = {"split": [], "index": [], "input_ids": [], "doc_ids": [], "sources": []}
        for split, p in packed.items():
            for i, ids in enumerate(p.input_ids):
                rows["split"].append(split)
                rows["index"].append(i)
                rows["input_ids"].append(ids)
                rows["doc_ids"].append(p.doc_ids[i])
                rows["sources"].append(p.sources[i])
        n_docs = {s: len({d for ds in p.doc_ids for d in ds}) for s, p in packed.items()}
        m = Manifest(
            stage="sequences", backbone=backbone, fingerprint=fp, config=cfg.__dict__,
            upstream={"corpus": up.fingerprint},
            info={"revision": weights.revision, "bos_id": bos, "eos_id": tok.eos_token_id,
                  "metadata": {"train_sequences": cfg.n_train, "val_sequences": cfg.n_val,
                               "seq_len": cfg.seq_len, "train_documents": n_docs["train"],
                               "val_documents": n_docs["val"],
                               "tokens": (cfg.n_train + cfg.n_val) * cfg.seq_len}},
        )
        with atomic_dir(out) as tmp:
            write_table(tmp / "sequences.parquet", rows)
            write_manifest(tmp, m)
        return st.result(m, out, cached=False)

    @dg.asset(name=hs_name, deps=[sequences], group_name=group, kinds={"zarr"},
              code_version=st.CODE_VERSIONS["hidden_states"])
    def hidden_states(
        context: dg.AssetExecutionContext, config: ExtractRunConfig, storage: StorageResource,
        backbones: BackboneResource, compute: ComputeResource,
    ) -> dg.MaterializeResult:
        """hs[0..N-1] of every sequence in Zarr (fp16, overflow-checked); resumable."""

        from dihal.extract import extract_hidden_states
        from storage.states import StateSpec, StateWriter
        from storage.tables import read_sequences

        layout = storage.layout()
        up = st.require_upstream(layout.sequences(backbone), seq_name)
        cfg = config.to_dihal()
        out = layout.hidden_states(backbone)
        fp = st.stage_fingerprint("hidden_states", cfg, {seq_name: up.fingerprint},
                                  dtype=str(compute.torch_dtype()))
        if (m := st.reuse(out, fp)) is not None:
            return st.result(m, out, cached=True)
        seqs = read_sequences(layout.sequences(backbone) / "sequences.parquet")
        bb = backbones.load(backbone, layout, compute)
        info = bb.info()
        if info["revision"] != up.info["revision"]:
            raise dg.Failure(f"{seq_name} was tokenised for {up.info['revision']} but the loaded "
                             f"weights are {info['revision']}: re-materialise {seq_name}.")
        spec = StateSpec(n_layers=bb.n_layers, seq_len=seqs["train"].shape[1],
                         hidden=bb.hidden_size, n_seq={s: len(v) for s, v in seqs.items()},
                         batch_size=cfg.batch_size, dtype=cfg.dtype)
        writer = StateWriter(layout.hidden_states_partial(backbone), spec, fp, tokens=seqs,
                             attrs={**info, "fingerprint": fp})
        if writer.n_done():
            context.log.info(f"resuming: {writer.n_done()} batches already on disk")
        report = extract_hidden_states(bb, seqs, writer, cfg, progress=st.throttled(context.log))
        m = Manifest(
            stage="hidden_states", backbone=backbone, fingerprint=fp, config=cfg.__dict__,
            upstream={seq_name: up.fingerprint},
            info={"backbone": info, "spec": spec.__dict__, "metadata": {
                "backbone_id": info["hf_id"], "revision": info["revision"],
                "shape_train": str((spec.n_layers, spec.n_seq["train"], spec.seq_len, spec.hidden)),
                "shape_val": str((spec.n_layers, spec.n_seq["val"], spec.seq_len, spec.hidden)),
                "dtype": cfg.dtype, "tokens_per_s": round(report.tokens_per_s, 1),
                "batches_resumed": report.batches_skipped,
                "max_abs_state": round(report.max_abs, 1),
                "fp16_headroom": round(65504.0 / max(report.max_abs, 1e-9), 2),
            }},
        )
        write_manifest(writer.workdir, m)
        writer.finalize(out)
        return st.result(m, out, cached=False)

    @dg.asset_check(asset=hidden_states, name="finite_states", blocking=True)
    def finite_states(storage: StorageResource) -> dg.AssetCheckResult:
        """Every stored state is finite (scanned layer by layer)."""
        import numpy as np

        from storage.states import StateReader

        reader = StateReader(storage.layout().hidden_states(backbone))
        bad = []
        for split in reader.splits:
            for layer in range(reader.n_layers()):
                if not np.isfinite(reader.layer(split, layer)).all():
                    bad.append(f"{split}/layer {layer}")
        return dg.AssetCheckResult(passed=not bad, metadata={"non_finite": ", ".join(bad) or "none"})

    @dg.asset_check(asset=hidden_states, name="expected_shapes", blocking=True)
    def expected_shapes(storage: StorageResource) -> dg.AssetCheckResult:
        """Shapes match the backbone (layers, hidden size) and the sequences (count, length)."""
        from storage import read_manifest
        from storage.states import StateReader

        layout = storage.layout()
        reader = StateReader(layout.hidden_states(backbone))
        bb = reader.attrs
        seq_cfg = read_manifest(layout.sequences(backbone)).config
        want = {"train": (bb["n_layers"], seq_cfg["n_train"], seq_cfg["seq_len"], bb["hidden_size"]),
                "val": (bb["n_layers"], seq_cfg["n_val"], seq_cfg["seq_len"], bb["hidden_size"])}
        got = {s: reader.shape(s) for s in reader.splits}
        ids_ok = all(reader.input_ids(s).shape == want[s][1:3] for s in want if s in got)
        return dg.AssetCheckResult(passed=got == want and ids_ok,
                                   metadata={"expected": str(want), "found": str(got)})

    @dg.asset(name=geo_name, deps=[hidden_states], group_name=group, kinds={"parquet"},
              code_version=st.CODE_VERSIONS["geometry"])
    def geometry(
        context: dg.AssetExecutionContext, config: GeometryRunConfig, storage: StorageResource,
    ) -> dg.MaterializeResult:
        """Local curvature, global monotonicity and effective rank of every layer, under the
        none / rms / standardize normalisations, on held-out tokens."""
        from dihal.locate import compute_geometry
        from dihal.plots import plot_proxies
        from storage.states import StateReader
        from storage.tables import write_table

        layout = storage.layout()
        up = st.require_upstream(layout.hidden_states(backbone), hs_name)
        cfg = config.to_dihal()
        out = layout.geometry(backbone)
        fp = st.stage_fingerprint("geometry", cfg, {hs_name: up.fingerprint})
        if (m := st.reuse(out, fp)) is not None:
            return st.result(m, out, cached=True, plot=st.png_markdown(out / "proxies.png", "proxies"))
        res = compute_geometry(StateReader(layout.hidden_states(backbone)), cfg,
                               backbone=backbone, progress=st.throttled(context.log, 2.0))
        m = Manifest(
            stage="geometry", backbone=backbone, fingerprint=fp,
            config={**cfg.__dict__, "normalizations": list(cfg.normalizations)},
            upstream={hs_name: up.fingerprint},
            info={"seconds": round(res.seconds, 2), "metadata": {
                "layers": len({r["layer"] for r in res.rows}), "tokens": cfg.n_tokens,
                "seconds": round(res.seconds, 2)}},
        )
        with atomic_dir(out) as tmp:
            write_table(tmp / "geometry.parquet", res.rows)
            write_table(tmp / "positions.parquet", {
                "sample": list(range(len(res.positions))), "split": ["val"] * len(res.positions),
                "sequence": res.positions[:, 0].tolist(), "position": res.positions[:, 1].tolist()})
            write_table(tmp / "plan.parquet", {
                "kind": ["anchor"] * len(res.plan.anchors) + ["pair"] * len(res.plan.pairs),
                "i": res.plan.anchors.tolist() + res.plan.pairs[:, 0].tolist(),
                "j": [-1] * len(res.plan.anchors) + res.plan.pairs[:, 1].tolist()})
            plot_proxies(res.rows, tmp / "proxies.png", f"{backbone}: geometry proxies per layer")
            write_manifest(tmp, m)
        return st.result(
            m, out, cached=False, plot=st.png_markdown(out / "proxies.png", "proxies"),
            table=st.table_markdown([r for r in res.rows if r["norm"] == cfg.normalizations[0]],
                                    ["layer", "m_curv", "m_mono", "k_eff"]),
        )

    @dg.asset(name=score_name, deps=[geometry], group_name=group, kinds={"parquet"},
              code_version=st.CODE_VERSIONS["layer_score"])
    def layer_score(
        context: dg.AssetExecutionContext, config: LayerScoreRunConfig, storage: StorageResource,
    ) -> dg.MaterializeResult:
        """S_l = z(m_curv) + z(m_mono) - z(k_eff) over candidate layers 1..N-1, per
        normalisation; l* = argmax S_l; agreement of S_l with the depth control -l."""
        from dihal.locate import score_summary
        from dihal.plots import plot_scores
        from storage.tables import read_rows, write_table

        layout = storage.layout()
        up = st.require_upstream(layout.geometry(backbone), geo_name)
        out = layout.layer_score(backbone)
        fp = st.stage_fingerprint("layer_score", config.model_dump(), {geo_name: up.fingerprint})
        if (m := st.reuse(out, fp)) is not None:
            return st.result(m, out, cached=True, plot=st.png_markdown(out / "score.png", "S_l"))
        rows = read_rows(layout.geometry(backbone) / "geometry.parquet")
        summary = score_summary(rows, primary_norm=config.primary_norm)
        m = Manifest(
            stage="layer_score", backbone=backbone, fingerprint=fp, config=config.model_dump(),
            upstream={geo_name: up.fingerprint},
            info={"l_star": summary["l_star"], "selected": summary["selected"],
                  "spearman_vs_depth": summary["spearman_vs_depth"], "metadata": {
                      "l_star": summary["l_star"], "primary_norm": config.primary_norm,
                      "l_star_by_norm": summary["selected"],
                      "spearman_S_vs_depth": summary["spearman_vs_depth"],
                  }},
        )
        with atomic_dir(out) as tmp:
            write_table(tmp / "layer_score.parquet", summary["rows"])
            plot_scores(summary["rows"], summary["selected"], tmp / "score.png",
                        f"{backbone}: layer score, l* = {summary['l_star']} ({config.primary_norm})")
            write_manifest(tmp, m)
        return st.result(m, out, cached=False, plot=st.png_markdown(out / "score.png", "S_l"))

    return [sequences, hidden_states, finite_states, expected_shapes, geometry, layer_score]
