"""The checks on the science: each passes on a sound result and fails on the fault it is for."""

import json

from dihal.rows import BridgeMetrics
from dihal.run.checks import (
    budgets_matched,
    enough_layers,
    loss_fell,
    names_fingerprints,
    samples_readable,
)


def _metrics(val_loss, init_val_loss):
    return BridgeMetrics(layer=2, val_loss=val_loss, recon_error=0.5, hybrid_nll=3.0,
                         backbone_nll=2.0, top1_agreement=0.5, hybrid_ppl=20.0, backbone_ppl=7.4,
                         init_val_loss=init_val_loss, train_loss=0.6, train_steps=10, train_tokens=100,
                         seconds=1.0, resumed_from_step=0, denoiser_parameters=10)


def test_loss_fell():
    assert loss_fell(_metrics(0.4, 1.0))[0]
    ok, found = loss_fell(_metrics(1.2, 1.0))  # training made it worse
    assert not ok and found["ratio"] == 1.2


def test_enough_layers():
    assert enough_layers([1, 2, 3, 5, 9])[0]
    assert not enough_layers([1, 2, 3])[0]


ROWS = [
    {"model": "DiHAL (l=1)", "role": "dihal", "denoiser_parameters": 1000, "train_tokens": 640,
     "sampler_steps": 16, "seq_len": None},
    {"model": "backbone (AR reference)", "role": "backbone", "denoiser_parameters": None,
     "train_tokens": None, "sampler_steps": None, "seq_len": None},
    {"model": "sed", "role": "baseline", "denoiser_parameters": 1090, "train_tokens": 640,
     "sampler_steps": 16, "seq_len": 128},
]


def test_budgets_matched():
    assert budgets_matched(ROWS)[0]
    too_big = [*ROWS[:2], {**ROWS[2], "denoiser_parameters": 1200}]
    ok, found = budgets_matched(too_big)
    assert not ok and "sed: denoiser_parameters 1200 vs 1000" in found["problems"]
    fewer_steps = [*ROWS[:2], {**ROWS[2], "sampler_steps": 8}]
    assert not budgets_matched(fewer_steps)[0]
    assert not budgets_matched(ROWS[1:])[0]  # no DiHAL row
    # the control hybrids (no budget) and DiHAL at the chosen K (other steps) are not checked
    controls = [*ROWS, {"model": "ridge (l=3)", "role": "control", "denoiser_parameters": None,
                        "train_tokens": None, "sampler_steps": None, "seq_len": None},
                {**ROWS[0], "model": "DiHAL (K=2)", "role": "dihal (chosen K)", "sampler_steps": 2}]
    assert budgets_matched(controls)[0]


def _lines(texts_by_model):
    return [json.dumps({"model": m, "index": i, "text": t})
            for m, texts in texts_by_model.items() for i, t in enumerate(texts)]


def test_samples_readable():
    assert samples_readable(_lines({"DiHAL": ["a b", ""], "backbone": ["c", "d"]}), 2)[0]
    assert not samples_readable(_lines({"DiHAL": ["", ""], "backbone": ["c", "d"]}), 2)[0]  # all empty
    assert not samples_readable(_lines({"DiHAL": ["a"], "backbone": ["c", "d"]}), 2)[0]  # one missing
    ok, found = samples_readable(_lines({"DiHAL": ["a", "b"]}) + ["{torn"], 2)
    assert not ok and found["unreadable_lines"] == 1


def test_names_fingerprints():
    fps = {"geometry_x": "a" * 64, "comparison_x": "b" * 64}
    assert names_fingerprints(f"| geometry_x | {'a' * 16} |\n| comparison_x | {'b' * 16} |", fps)[0]
    ok, found = names_fingerprints(f"| geometry_x | {'a' * 16} |", fps)
    assert not ok and found["missing"] == "comparison_x"
