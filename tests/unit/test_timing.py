"""One timing per model: the cost table's decode is the only time per token the report quotes
(the eval's sampling and the sampler curve keep their own in their artifacts, unquoted), its
rounds' spread travels with it, and DiHAL's times are checked to rise with K within it."""


import pytest

from dihal.evaluate.cost import CostSubject, cost_rows
from dihal.report.build import build_report
from dihal.report.cost import answer_cost, break_even_sentence, timing_sentence
from dihal.report.inputs import ReportInputs
from tests.tiny import report_raw_with_cost


class _Timed:
    """A decode result with its wall time, as dihal.replace.hybrid.Generation reports it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


def _subject(name: str, k: int, times: list[float]) -> CostSubject:
    it = iter(times)
    return CostSubject(name, lambda n, length, **kw: _Timed(next(it)) if length > 4
                       else _Timed(0.0), sampler_steps=k, layer=2 if k else None,
                       price=lambda m: 1.0)


def test_cost_rows_keep_the_spread_of_the_rounds_and_order_in_k():
    from dihal.evaluate.cost import FlopModel, order_in_k

    model = FlopModel((1.0, 1.0, 1.0), 1.0, denoiser_step_flops=1.0)
    # 3 rounds of 4 x 8 = 32 tokens: seconds per round; medians 0.32, 0.64, 0.48 s
    subjects = [_subject("backbone", 0, [0.30, 0.32, 0.40]),
                _subject("DiHAL K=1", 1, [0.50, 0.64, 0.70]),
                _subject("DiHAL K=2", 2, [0.48, 0.45, 0.66])]
    rows = cost_rows(subjects, n=4, length=8, repeats=3, model=model)
    assert [r["ms_per_token"] for r in rows] == pytest.approx([10.0, 20.0, 15.0])
    assert [r["ms_per_token_low"] for r in rows] == pytest.approx([9.375, 15.625, 14.0625])
    assert [r["ms_per_token_high"] for r in rows] == pytest.approx([12.5, 21.875, 20.625])
    order = order_in_k(rows)
    # K = 2 is faster than K = 1 by its median, but K = 1's fastest round (15.6 ms) is faster
    # than K = 2's slowest (20.6 ms): an inversion within the noise
    assert order == {"K": [1, 2], "monotone": False, "within_noise": True,
                     "inversions": [(1, 2)]}
    # an inversion beyond the spread: K = 1's fastest round slower than K = 2's slowest
    far = [{**rows[1]}, {**rows[2], "ms_per_token_high": 15.0}]
    assert order_in_k(far)["within_noise"] is False
    assert order_in_k(rows[:2])["monotone"] is True


def test_the_report_quotes_one_time_per_model():
    """The eval's sampling (15.0 ms, 4x the backbone's) and the sampler curve (119.37 ms) timed
    the same hybrid otherwise: the report quotes only the cost table's 3.0 ms (1.5x), in the
    answers, the sampler section and the cost section alike."""
    raw = report_raw_with_cost(15.0)
    ev = [{**raw["evaluation"]["rows"][0], "ms_per_token": 15.0, "latency_vs_backbone": 4.0},
          {**raw["evaluation"]["rows"][1], "ms_per_token": 3.75}]
    curve = {**raw["sampler_curve"], "rows": [{**r, "ms_per_token": 119.37, "sampler_steps": 4}
                                              for r in raw["sampler_curve"]["rows"]]}
    x = ReportInputs.from_dicts(**{**raw, "evaluation": {**raw["evaluation"], "rows": ev},
                                   "sampler_curve": curve})
    text = timing_sentence(x)
    assert "and 1.50x its measured time" in answer_cost(x)[0]
    assert text.startswith("DiHAL at K = 4 generates at 3.00 ms per token against the "
                           "backbone's 2.00 (1.50x the backbone's time: slower; a cached "
                           "decode of 2 x 16 tokens in one batch, the median of 3 rounds)")
    assert "(1.50x in measured time)" in break_even_sentence(x)
    md = build_report(x).markdown
    assert "Generation costs 3.0 ms per token at K = 4" in md
    for other in ("15.0", "119.4", "4.00x", "3.75"):
        assert other not in md, other
    assert "one timing per model" in md
