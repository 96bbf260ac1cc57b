"""The generation tables' rows (dihal.generation_rows.GenerationRow, dihal.generation_inputs
.FullTrainingRow) as each writer makes them: to_dict -> from_dict -> to_dict gives back the same
columns, values and order; a column a row has not stays absent, a stored None stays None."""

import json
import math
from dataclasses import replace

import pytest

from dihal.compare.stage import baseline_frontier, comparison, paired_roles
from dihal.evaluate.frontier import anchor_point, point
from dihal.generation_inputs import FullTrainingRow, RolePair, filled_pairs
from dihal.generation_rows import (
    BASELINE_ROW,
    COMPARISON_ROW,
    EVAL_ROW,
    FRONTIER_POINT,
    FULL_TRAINING_GENERATION,
    GENERATION_COLUMNS,
    TEXT_METRICS,
    Budget,
    GenerationRow,
    JudgeInfo,
    RoleSample,
    Sample,
    filled,
)
from dihal.inputs import SeedSpread
from dihal.labels import BASELINE, NATIVE_ROLE
from dihal.results import ComparisonResult, EvalResult
from dihal.rows import ABSENT, BridgeMetrics, Estimate
from tests.tiny import TINY_JUDGE_INFO


def _same(a: dict, b: dict) -> bool:
    """The same columns in the same order with the same values (NaN equal to NaN)."""
    return json.dumps(list(a.items()), default=repr) == json.dumps(list(b.items()), default=repr)


def _round_trip(row: GenerationRow) -> dict:
    stored = row.to_dict()
    again = GenerationRow.from_dict(stored, row.kind)
    assert again == row or _same(again.to_dict(), stored)
    assert _same(again.to_dict(), stored) and _same(GenerationRow.from_dict(stored).to_dict(),
                                                   stored)
    return stored


def _metrics(ppl: float, *, reference: bool = True) -> dict:
    """dihal.evaluate.generation.text_metrics's columns, in its order (MAUVE with its seeds
    where there is a reference, else its three NaN columns)."""
    out = {}
    for c in TEXT_METRICS:
        if c.startswith("mauve") and not reference and c not in ("mauve", "mauve_low",
                                                                 "mauve_high"):
            continue
        out[c] = ([1.0, 2.0] if c == "sample_nll" else [3, 4] if c == "sample_tokens"
                  else math.nan if c.startswith("mauve") and not reference
                  else False if c == "mauve_diagnostic" else 4 if c.endswith(("samples", "n_p"))
                  else ppl)
    return out


def _eval_row(model: str, role: str, ppl: float, **columns) -> GenerationRow:
    """A row as dihal.evaluate.generation.sample_and_score makes it, with `columns` after."""
    row = GenerationRow.from_dict(
        {"model": model, "role": role, **_metrics(ppl), "ms_per_token": 2.0, "ms_per_step": 1.0,
         "n_samples": 4, "length": 8, "temperature": 1.0, "start_token": "<s>",
         "start_token_id": 1, "cpu_threads": 1, "cpu_kernels": "AVX2"}, EVAL_ROW)
    return replace(row, **columns)


def _eval_rows() -> list[GenerationRow]:
    """The eval's rows as evaluate_generation leaves them: DiHAL (layer, K, rule), the
    backbone, the controls (their budget columns), each after DiHAL's with its paired
    difference, every row with every column."""
    paired = {"dihal_log_ppl_diff": Estimate(-0.1, -0.3, 0.1), "dihal_log_ppl_diff_p": 0.4,
              "dihal_verdict": "not distinguishable", "paired_samples": 4}
    return filled([
        _eval_row("DiHAL (l=2)", "dihal", 50.0, layer=2, sampler_steps=4, rule="ancestral",
                  latency_vs_backbone=2.0),
        _eval_row("backbone (AR reference)", "backbone", 30.0, latency_vs_backbone=1.0, **paired),
        _eval_row("layer-drop (l=2)", "control", 900.0, layer=2, sampler_steps=0, train_tokens=0,
                  denoiser_parameters=0, latency_vs_backbone=0.5, **paired),
        _eval_row("ridge (l=2)", "control", 400.0, layer=2, sampler_steps=0, ridge_lambda=1.0,
                  ridge_val_mse=0.2, train_tokens=256, denoiser_parameters=10,
                  latency_vs_backbone=0.5, **paired)])


def test_the_evals_rows_come_back_as_written_in_the_evals_column_order():
    rows = _eval_rows()
    for row in rows:
        stored = _round_trip(row)
        assert list(stored) == list(GENERATION_COLUMNS[EVAL_ROW])  # every row, every column
    assert rows[1].layer is None and rows[0].dihal_verdict is None  # filled: a stored None
    # without the controls a row keeps only its own columns (the backbone has no layer)
    backbone = _eval_row("backbone (AR reference)", "backbone", 30.0, latency_vs_backbone=1.0)
    assert backbone.layer is ABSENT and "layer" not in _round_trip(backbone)
    # no MAUVE reference: its three NaN columns only
    bare = GenerationRow.from_dict({"model": "m", "role": "dihal", **_metrics(5.0,
                                                                              reference=False)})
    assert "mauve_n_p" not in _round_trip(bare) and math.isnan(bare.to_dict()["mauve"])


def test_storage_writes_the_rows_columns_in_their_order(tmp_path):
    """eval.parquet and comparison.parquet take their columns from the first row's to_dict."""
    import pyarrow.parquet as pq

    from dihal.run.stages import CODE_VERSIONS
    from storage import Comparison, Evaluation
    from storage.manifest import Manifest

    def _manifest(art, result):
        return Manifest(stage=art.stage, backbone=art.backbone, fingerprint="f" * 64, config={},
                        code_version=CODE_VERSIONS[art.stage],
                        info={**result.info(), "metadata": result.metadata()})

    rows = _eval_rows()
    res = EvalResult(rows, [], JudgeInfo.from_dict({**TINY_JUDGE_INFO, "judge": "tiny-judge"}), 2)
    art = Evaluation(tmp_path, "llama")
    art.write(_manifest(art, res), res)
    assert pq.read_schema(art.path("eval.parquet")).names == list(rows[0].to_dict())
    cmp_ = _comparison()
    art = Comparison(tmp_path, "llama")
    art.write(_manifest(art, cmp_), cmp_)
    assert pq.read_schema(art.path("comparison.parquet")).names == list(cmp_.rows[0].to_dict())


def _baseline_row(name: str, native: float | None) -> GenerationRow:
    """A baseline's row as dihal.compare.stage.baseline makes it: its metrics at the common
    temperature, at its own (CoDAR's), its frontier points, its budget and training figures."""
    def at(t, ppl):
        return GenerationRow.from_dict({**_metrics(ppl), "temperature": t, "n_samples": 4,
                                        "sample_seconds": 1.5}, BASELINE_ROW)

    metrics = at(1.0 if native else None, 80.0)
    measured = {metrics.temperature: metrics}
    if native:
        measured[native] = at(native, 60.0)
        metrics = replace(metrics, native=measured[native])
    frontier = baseline_frontier(name, native is not None, (0.7, 1.0), measured,
                                 lambda t: at(t, 70.0))
    return replace(metrics, frontier=frontier, model=name, role="baseline",
                   budget=Budget(denoiser_parameters=10, train_tokens=256, sampler_steps=4,
                                 seq_len=16),
                   total_parameters=12, train_steps=8, train_seconds=3.0, final_loss=math.nan,
                   vocab_size=50)


def test_a_baselines_row_comes_back_with_its_native_row_and_frontier():
    codar, sed = _baseline_row("codar", 0.7), _baseline_row("sed", None)
    for row in (codar, sed):
        stored = _round_trip(row)
        assert list(stored) == [c for c in GENERATION_COLUMNS[BASELINE_ROW] if c in stored]
    assert codar.native.model is ABSENT and "model" not in codar.to_dict()["native"]
    assert "native" not in sed.to_dict()
    assert [p.kind for p in codar.frontier] == [FRONTIER_POINT] * 2
    assert [(p["temperature"], p["sampled"]) for p in codar.to_dict()["frontier"]] == [
        (0.7, False), (1.0, False)]
    assert codar.budget == Budget(denoiser_parameters=10, train_tokens=256, sampler_steps=4,
                                  seq_len=16)  # typed, stored as its four columns
    assert GenerationRow.from_dict({"model": "m", "budget": None}, BASELINE_ROW).to_dict() == {
        "model": "m", "budget": None}  # a budget stored as None reads back as stored


def _comparison() -> ComparisonResult:
    bridge = BridgeMetrics(layer=2, val_loss=0.3, recon_error=0.5, hybrid_nll=3.0,
                           backbone_nll=2.0, top1_agreement=0.7, hybrid_ppl=9.0,
                           backbone_ppl=7.0, init_val_loss=1.0, train_loss=0.2, train_steps=8,
                           train_tokens=256, seconds=1.0, resumed_from_step=0,
                           denoiser_parameters=10)
    eval_frontier = [point(r.model, r.role, 1.0, r, sampled=False) for r in _eval_rows()[:2]]
    return comparison([r.to_dict() for r in _eval_rows()], bridge, 4,
                      {n: _baseline_row(n, native).to_dict()
                       for n, native in (("codar", 0.7), ("sed", None))}, ["ld4lg"],
                      [p.to_dict() for p in eval_frontier])


def test_the_comparisons_rows_and_frontier_come_back_as_written():
    got = _comparison()
    assert [r.role for r in got.rows] == ["dihal", "backbone", "control", "control", BASELINE,
                                          NATIVE_ROLE, BASELINE]
    for row in got.rows:
        stored = _round_trip(row)
        assert list(stored) == list(GENERATION_COLUMNS[COMPARISON_ROW])  # every column
    assert got.rows[1].train_steps is None and got.rows[0].seq_len == 16
    for p in got.frontier:
        stored = _round_trip(p)
        assert list(stored) == [c for c in GENERATION_COLUMNS[FRONTIER_POINT] if c in stored]
    anchor = anchor_point(_metrics(30.0), 4)
    assert "sample_seconds" not in _round_trip(anchor) and anchor.n_samples == 4
    info = got.info()  # what the manifest holds, read back as the report reads it
    assert [GenerationRow.from_dict(r).to_dict() for r in info["rows"]] == info["rows"]


def _full_training_rows() -> list[FullTrainingRow]:
    """Full training's rows as dihal.compare.stage.full_training makes them: each role at the
    protocol's K and at the chosen (rule, K), its generation columns from its eval row, the
    paired tests of the roles on the second role's protocol row, every row every column."""
    gen = _eval_row("DiHAL (l=2)", "dihal", 50.0, layer=2, sampler_steps=4, rule="ancestral")
    seeds = {m: SeedSpread(None, None, None, None) for m in ("val_loss", "t1_loss", "hybrid_nll")}
    rows = [FullTrainingRow(role, layer, val_loss=0.3, t1_loss=0.4, recon_error=0.5,
                            hybrid_nll=3.0, hybrid_nll_select=3.1, hybrid_nll_judge=None,
                            top1_agreement=0.7, train_tokens=256, train_steps=8,
                            train_seconds=1.0, train_seconds_all_seeds=1.0, n_seeds=1,
                            seed_columns=seeds, from_eval=role == "geometry l*", sampler=sampler,
                            sampler_steps=steps, rule=rule, generation=gen.select(
                                FULL_TRAINING_GENERATION,
                                GENERATION_COLUMNS[FULL_TRAINING_GENERATION]))
            for role, layer in (("geometry l*", 2), ("oracle", 3), ("worst", 1))
            for sampler, steps, rule in (("protocol", 4, "ancestral"),
                                         ("chosen on validation", 2, "marginal"))]
    samples = [RoleSample(r, 1, "protocol", Sample("DiHAL", i, 0, "x"), nll=10.0 + i + k,
                          tokens=5) for k, r in enumerate(("geometry l*", "oracle", "worst"))
               for i in range(4)]
    return filled_pairs(paired_roles(rows, samples, seed=0))


def test_full_trainings_rows_come_back_as_written():
    rows = _full_training_rows()
    columns = None
    for row in rows:
        stored = row.to_dict()
        again = FullTrainingRow.from_dict(stored)
        assert again == row or _same(again.to_dict(), stored)
        assert _same(again.to_dict(), stored)
        assert columns is None or list(stored) == columns  # every row, every column
        columns = list(stored)
    assert columns[-14:] == [f"{s}_vs_{first}" for first in ("l_star", "oracle")
                             for s in ("log_ppl_diff", "log_ppl_diff_low", "log_ppl_diff_high",
                                       "p", "p_holm", "verdict", "pairs")]
    assert rows[0].pair_tests["geometry l*"] == RolePair()  # l*: no test, the columns None
    worst = next(r for r in rows if r.role == "worst" and r.sampler == "protocol")
    assert set(worst.pairs) == {"geometry l*", "oracle"} and worst.pairs["oracle"].pairs == 4
    assert "sample_nll" not in columns and "model" not in columns


def test_an_absent_column_is_not_a_stored_none_and_no_row_takes_a_column_it_has_not():
    row = GenerationRow(EVAL_ROW, model="m", role="dihal", layer=None)
    assert row.to_dict() == {"model": "m", "role": "dihal", "layer": None}
    assert filled([row, replace(row, sampler_steps=4)])[0].to_dict()["sampler_steps"] is None
    with pytest.raises(ValueError, match="seq_len"):  # an eval row has no budget's seq_len
        replace(row, seq_len=16).to_dict()
    with pytest.raises(ValueError, match="not_a_column"):
        GenerationRow.from_dict({"model": "m", "not_a_column": 1})
    with pytest.raises(ValueError, match="cpu_kernels"):
        GenerationRow.from_dict({"model": "m", "cpu_kernels": "AVX2"}, COMPARISON_ROW)
