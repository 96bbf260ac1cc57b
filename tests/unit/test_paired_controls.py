"""The paired comparison of each eval row against DiHAL's (dihal.evaluate.generation
.paired_against_first), each way it can come out, with a hand-made judge; and the judge memo
that lets it reuse the metrics' scores."""

import math

import pytest

from dihal.evaluate.generation import MemoJudge, paired_against_first
from dihal.generation_rows import EVAL_ROW, PAIRED_COLUMNS, GenerationRow, Sample


class CountingJudge:
    """NLL of a text: its per-word cost (the text's first word, a number) times its words."""

    def __init__(self) -> None:
        self.calls = 0

    def nll_each(self, texts):
        self.calls += len(texts)
        return [(float(t.split()[0]) * len(t.split()), len(t.split())) for t in texts]


def _samples(model, costs):
    return [Sample(model, i, 0, f"{c} w w" if c else "") for i, c in enumerate(costs)]


def _rows(*models):
    return [GenerationRow(EVAL_ROW, model=m) for m in models]


def test_paired_against_first_each_way():
    a = [1.0, 1.2, 0.9, 1.1, 1.0, 0.8]
    samples = (_samples("dihal", a) + _samples("worse", [c + 1.0 for c in a])
               + _samples("better", [c - 0.5 for c in a]) + _samples("same", a[::-1])
               + _samples("empty", [0, 0, 0, 0, 0, 2.0]))
    rows = _rows("dihal", "worse", "better", "same", "empty")
    rows = [r.to_dict() for r in paired_against_first(rows, samples, CountingJudge(), seed=0)]
    assert "dihal_verdict" not in rows[0]
    worse, better, same, empty = rows[1:]
    # DiHAL's Gen.PPL is lower than "worse"'s beyond the paired interval: log ratio -1
    assert worse["dihal_verdict"] == "below" and math.isclose(worse["dihal_log_ppl_diff"], -1.0)
    assert worse["dihal_log_ppl_diff_low"] <= -1.0 <= worse["dihal_log_ppl_diff_high"] < 0
    assert better["dihal_verdict"] == "above" and math.isclose(better["dihal_log_ppl_diff"], 0.5)
    # the same texts in another order: the same total, paired differences either way
    assert same["dihal_verdict"] == "not distinguishable"
    assert math.isclose(same["dihal_log_ppl_diff"], 0.0, abs_tol=1e-12)
    # one sample with text: no pair to resample, NaN and "not distinguishable"
    assert empty["paired_samples"] == 1 and empty["dihal_verdict"] == "not distinguishable"
    assert math.isnan(empty["dihal_log_ppl_diff"]) and set(PAIRED_COLUMNS) <= set(empty)


def test_the_memo_scores_each_text_once():
    judge = CountingJudge()
    memo = MemoJudge(judge)
    assert memo.nll_each(["1 a", "2 b b"]) == [(2.0, 2), (6.0, 3)]  # cost x words, words
    assert memo.nll_each(["2 b b", "1 a", "3 c"]) == [(6.0, 3), (2.0, 2), (6.0, 2)]
    assert judge.calls == 3


def test_the_paired_comparison_reuses_the_metrics_judge_pass(tiny_llama_dir, tmp_path):
    """With a one-pass judge (Judge.score_ids), the eval's memo keeps what the metrics' pass
    scored, so the paired comparison after it runs no judge: the same NLLs, no forward."""
    from dihal.evaluate.generation import ScoreMemo, text_metrics
    from dihal.evaluate.judge import load_judge

    judge = load_judge(str(tiny_llama_dir), cache_dir=tmp_path)
    memo = ScoreMemo(judge)
    texts = {"a": ["the man said", "", "people made good time"],
             "b": ["it was", "the world is very little", "good people"]}
    rows, samples = [], []
    for model, got in texts.items():
        text_metrics(got, memo, seed=0)
        rows.append(GenerationRow(EVAL_ROW, model=model))
        samples += [Sample(model, i, 0, t) for i, t in enumerate(got)]
    passes = []
    real = judge._forward
    judge._forward = lambda seqs, **kw: passes.append(len(seqs)) or real(seqs, **kw)
    rows = paired_against_first(rows, samples, memo, seed=0)
    assert passes == [] and rows[1].paired_samples == 2
    got, want = memo.nll_each(texts["b"]), judge.nll_each(texts["b"])
    assert [k for _, k in got] == [k for _, k in want]
    assert [n for n, _ in got] == pytest.approx([n for n, _ in want], rel=1e-6)
