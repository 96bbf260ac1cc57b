"""The eval asset's samples side by side in the web UI: a Markdown table with a column per model
and a row per sample index, so that the samples drawn with the same seed and uniforms sit
together; cells cut, their newlines and pipes made safe for Markdown."""

from dihal.generation_rows import JudgeInfo, Sample, generation_rows
from dihal.results import EvalResult
from dihal.run.stages import CODE_VERSIONS
from storage import Evaluation, Markdown
from storage.artifacts.base import samples_table
from storage.manifest import Manifest


def _samples(models: list[str], n: int) -> list[Sample]:
    return [Sample(m, i, 0, f"{m} sample {i}") for m in models for i in range(n)]


def test_a_row_per_sample_index_and_a_column_per_model():
    samples = _samples(["DiHAL (l=1)", "backbone (AR reference)", "ridge (l=1)"], 6)
    table = samples_table(samples, n=4)
    lines = table.splitlines()
    assert lines[0] == "| sample | DiHAL (l=1) | backbone (AR reference) | ridge (l=1) |"
    assert lines[1] == "|---|---|---|---|"
    assert len(lines) == 2 + 4  # the first 4 indices only
    assert lines[3] == ("| 2 | DiHAL (l=1) sample 1 | backbone (AR reference) sample 1 | "
                        "ridge (l=1) sample 1 |")


def test_samples_are_aligned_by_index_and_cells_made_safe():
    samples = [
        Sample("a", 1, 0, "second of a"),
        Sample("b", 0, 0, "x | y\n\nnext line"),
        Sample("a", 0, 0, ""),
        Sample("b", 1, 0, "w" * 300),
    ]
    lines = samples_table(samples, chars=20).splitlines()
    assert lines[0] == "| sample | a | b |"
    assert lines[2] == "| 1 | (empty) | x \\| y / next line |"  # a's sample 0 is empty
    assert lines[3] == f"| 2 | second of a | {'w' * 19}\u2026 |"
    # a model with fewer samples leaves its cell blank, never shifts another's
    short = samples_table(samples[:3]).splitlines()
    assert short[3] == "| 2 | second of a |  |"


def test_the_eval_assets_metadata_shows_them_side_by_side(tmp_path):
    rows = [{"model": m, "role": r, "gen_ppl": 1.0, "diversity": 0.5, "repetition": 0.1,
             "ms_per_token": 2.0, "latency_vs_backbone": 1.0}
            for m, r in (("DiHAL (l=2)", "dihal"), ("backbone (AR reference)", "backbone"))]
    res = EvalResult(generation_rows(rows), _samples([r["model"] for r in rows], 8),
                     JudgeInfo("tiny-judge", "x", "Tiny", 32, 64), 2)
    art = Evaluation(tmp_path, "llama")
    art.write(Manifest(stage=art.stage, backbone="llama", fingerprint="e" * 64, config={},
                       code_version=CODE_VERSIONS[art.stage],
                       info={**res.info(), "metadata": res.metadata()}), res)
    meta = art.metadata(art.manifest())
    table = meta["samples_side_by_side"]
    assert isinstance(table, Markdown)
    assert table.text.splitlines()[0] == "| sample | DiHAL (l=2) | backbone (AR reference) |"
    assert table.text == samples_table(art.samples())
    assert isinstance(meta["samples"], Markdown)  # the per-model list stays
