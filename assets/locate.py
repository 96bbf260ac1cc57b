# Note: no `from __future__ import annotations`: Dagster reads the config annotations.
"""Locate, as assets: corpus -> sequences_<b> -> hidden_states_<b> -> geometry_<b> ->
layer_score_<b>, one family per backbone (the corpus is shared). Each asset reuses its artifact
when its fingerprint (config + code version + upstream fingerprints) is unchanged."""

import dagster as dg

from assets._stage import StageRun, stage_asset
from assets.configs import (
    CorpusRunConfig,
    GeometryRunConfig,
    LayerScoreRunConfig,
    SequencesRunConfig,
    extract_run_config,
)
from dihal.errors import DihalError
from dihal.registry import get_spec
from dihal.run.stages import asset_key
from storage import Corpus, Geometry, HiddenStates, LayerScore, Sequences


@stage_asset(None, "corpus", kinds={"json"})
def corpus(context: dg.AssetExecutionContext, config: CorpusRunConfig) -> dg.MaterializeResult:
    """Dolma-format shards: resolved, hashed and validated (documents, empty and malformed
    lines counted). Default: the embedded sample in data/dolma_sample. The fingerprint holds
    the shards' content (sha256, or the URL), not where they lie. Or a Hugging Face text
    dataset (hf_dataset), streamed: its identity and the documents read."""
    from dihal.locate.corpus import content_identity, fingerprint_config, scan_corpus, shard_records

    run, cfg = StageRun(context, None), config.to_dihal()
    shards = shard_records(cfg)
    return run.produce(run.art(Corpus), fingerprint_config(cfg), [], lambda: scan_corpus(cfg, shards),
                       shards=content_identity(shards))


def locate_assets(backbone: str) -> list:
    """The Locate asset family of one backbone, with its checks."""
    ExtractRunConfig = extract_run_config(get_spec(backbone).state_dtype)  # noqa: N806

    @stage_asset(backbone, "sequences", [corpus], kinds={"parquet"})
    def sequences(context: dg.AssetExecutionContext, config: SequencesRunConfig) -> dg.MaterializeResult:
        """Fixed-length train/val token sequences, document-level split, packed with EOS, from
        the corpus's shards (refused where one changed since the corpus asset ran)."""
        from dihal.config import CorpusConfig
        from dihal.locate.corpus import make_sequences, recorded_shards, separator_ids

        run, cfg = StageRun(context, backbone), config.to_dihal()
        src = run.art(Corpus)
        (up,) = run.require(src)
        weights = run.resources.backbones.resolve(backbone, run.layout)

        def compute():
            tok = run.resources.backbones.load_tokenizer(backbone, run.layout)
            bos_id, eos_id = separator_ids(tok, weights.path)  # before a document is read
            return make_sequences(recorded_shards(up.info), CorpusConfig(**up.config), tok, cfg,
                                  bos_id=bos_id, eos_id=eos_id, revision=weights.revision)

        return run.produce(run.art(Sequences), cfg, [src], compute, revision=weights.revision)

    @stage_asset(backbone, "hidden_states", [sequences], kinds={"zarr"})
    def hidden_states(context: dg.AssetExecutionContext, config: ExtractRunConfig) -> dg.MaterializeResult:
        """hs[0..N-1] in Zarr (fp16, overflow-checked; float32 for a backbone whose states
        overflow fp16), resumable: of every held-out sequence,
        and of the training sequences unless store_train is false (then each bridge computes
        its own pairs)."""
        run, cfg = StageRun(context, backbone), config.to_dihal()
        seqs, out = run.art(Sequences), run.art(HiddenStates)
        (up,) = run.require(seqs)

        def compute():
            from dihal.locate.extract import dump_hidden_states, state_spec, stored

            ids, bb = stored(seqs.token_ids(), cfg), run.model()
            writer = out.writer(state_spec(bb, up.info["revision"], ids, cfg), tokens=ids,
                                attrs=bb.info().to_dict())
            return dump_hidden_states(bb, ids, writer, cfg, progress=run.throttled())

        return run.produce(out, cfg, [seqs], compute, dtype=run.resources.compute.dtype_name())

    @dg.asset_check(asset=hidden_states, name="finite_states", blocking=True,
                    required_resource_keys={"storage"})
    def finite_states(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        """Every stored state is finite (scanned layer by layer). Chunks holding NaN or inf
        mark the dump damaged: materialising it again writes those batches again."""
        try:
            bad = HiddenStates(context.resources.storage.layout(), backbone).non_finite()
        except DihalError as exc:  # missing, truncated or changed chunks
            return dg.AssetCheckResult(passed=False, metadata={"damaged": str(exc)})
        why = (f"failed: NaN or inf in {len(bad)} chunk(s) of the dump "
               f"({'; '.join(bad[:3])}). Materialise {asset_key('hidden_states', backbone)} "
               "again: it writes those batches again")
        return dg.AssetCheckResult(passed=not bad, description=why if bad else None,
                                   metadata={"non_finite": "; ".join(bad[:20]) or "none"})

    @dg.asset_check(asset=hidden_states, name="expected_shapes", blocking=True,
                    required_resource_keys={"storage"})
    def expected_shapes(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        """Shapes match the backbone (layers, hidden size) and the sequences (count, length)."""
        from storage.states import shape_problems

        layout = context.resources.storage.layout()
        try:
            reader = HiddenStates(layout, backbone).reader()
        except DihalError as exc:
            return dg.AssetCheckResult(passed=False, metadata={"damaged": str(exc)})
        want, got, ok = shape_problems(reader, Sequences(layout, backbone).require().config)
        return dg.AssetCheckResult(passed=ok, metadata={"expected": str(want), "found": str(got)})

    @stage_asset(backbone, "geometry", [hidden_states], kinds={"parquet"})
    def geometry(context: dg.AssetExecutionContext, config: GeometryRunConfig) -> dg.MaterializeResult:
        """Local curvature, global monotonicity and effective rank of every layer, under the
        none / rms / standardize / robust normalisations, on held-out tokens, with their
        token-bootstrap replicates; the rival predictors of every candidate layer."""
        run, cfg = StageRun(context, backbone), config.to_dihal()
        states = run.art(HiddenStates)

        def compute():
            from dihal.locate.stage import compute_geometry

            return compute_geometry(states.reader(), cfg, backbone=backbone,
                                    progress=run.throttled(2.0), device=run.device())

        return run.produce(run.art(Geometry), cfg, [states], compute)

    @stage_asset(backbone, "layer_score", [geometry, hidden_states], kinds={"parquet"})
    def layer_score(context: dg.AssetExecutionContext, config: LayerScoreRunConfig) -> dg.MaterializeResult:
        """S_l = z(m_curv) + z(m_mono) - z(k_eff) over candidate layers 1..N-1, per
        normalisation; l* = argmax S_l; agreement of S_l with the depth control -l; l*'s
        stability over the geometry's token-bootstrap replicates, and over resamples of whole
        held-out sequences and split halves (the geometry recomputed from the dump)."""
        from dihal.config import GeometryConfig

        run, cfg = StageRun(context, backbone), config.to_dihal()
        geo, states = run.art(Geometry), run.art(HiddenStates)
        gm, _ = run.require(geo, states)

        def compute():
            from dihal.locate.stage import score_layers

            return score_layers(geo.rows(), cfg, backbone=backbone, resamples=geo.resamples(),
                                reader=states.reader(), geometry=GeometryConfig(**gm.config),
                                progress=run.throttled(2.0), device=run.device())

        return run.produce(run.art(LayerScore), cfg, [geo, states], compute)

    return [sequences, hidden_states, finite_states, expected_shapes, geometry, layer_score]
