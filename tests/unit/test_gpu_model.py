"""The device check's time model (benchmarks/gpu_model.py): it counts every step the GPU
profiles run, and its prediction from the check's own measurements (benchmarks/gpu_check.py's
step functions) matches a tiny run's real step times, on the CPU, within a factor of 3 (the
tolerance of a shared two-core machine: the check's measurements and the real steps run
minutes apart, and the real steps carry overheads the model leaves out: checkpoints, the
validation at initialisation, the accelerator's set-up)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_check  # noqa: E402
from gpu_model import locate_rows, profile_rows, training_rows, units_of  # noqa: E402

FACTOR = 3.0


def _units(**over) -> dict:
    one = {"value": 1.0, "per": "s", "source": "test"}
    u = {"forward": one, "pairs": {1: one, 15: one, 29: one}, "standardise": one,
         "bridge_step": {**one, "batch": 32}, "measure_bridge": {**one, "sequences": 128,
                                                                 "steps": 16},
         "geometry_layer": {**one, "tokens": 16384, "resamples": 100},
         "sequence_geometry": {**one, "tokens": 16384},
         "decode": {k: {**one, "batch": 128} for k in ("dihal", "backbone", "regression",
                                                       "layer_drop")},
         "baseline_step": {**one, "batch": 32}, "startup": one}
    return {**u, **over}


def test_the_model_counts_every_step_of_the_gpu_profiles():
    from dihal.replace.stage import default_sweep_layers
    from dihal.run.profiles import PROFILES

    rows = profile_rows(_units(), PROFILES["gpu"], 30, list(range(1, 30)))

    def count(prefix: str) -> float:
        (row,) = [r for r in rows if r["step"].startswith(prefix)]
        return row["count"]

    assert count("layer_score: 26 sequence samples") == 26 * 29 == 754  # 20 + 3 x 2 halves
    assert count("sweep: trainings (3 seeds + 1 control") == 29 * (3 + 1)
    assert count("sweep: measure_bridge") == 29 * 4  # after every training and replicate
    assert count("sweep: standardiser") == 2 * 29
    assert count("full bridges (l*, oracle, worst): trainings (3 seeds") == 9
    assert count("full bridges (l*, oracle, worst): measure_bridge") == 9
    assert count("eval's full-budget regression control at l*: trainings (0 seeds + 1") == 1
    # decoding at the profile's length: 544 samples in batches of 128 = 5, 128 positions,
    # DiHAL and the backbone at 3 temperatures, the regression hybrid, layer-drop and ridge
    assert count("eval: dihal sampling, 544 x 128") == 3 * 5 * 128
    assert count("eval: layer-drop and ridge") == 2 * 5 * 128
    assert count("eval: regression sampling") == 5 * 128
    assert count("sampler_steps: 2 rules") == 10
    assert count("geometry: 30 layers at 16,384 tokens, 100 resamples") == 30
    assert count("hidden_states: forward of the held-out split (73,728") == 73_728
    (sweep,) = [r for r in rows if r["step"].startswith("sweep: trainings")]
    assert sweep["each_s"] == 256  # 8192 sequences / 32 a step, at 1 s a step
    small = profile_rows(_units(), PROFILES["gpu-smollm2"], 30, default_sweep_layers(30, 10))
    assert sum(r["count"] for r in small if r["step"].startswith("sweep: trainings")) == 40
    # a unit measured at another size is scaled, and says so
    half = _units(sequence_geometry={"value": 1.0, "per": "s", "source": "cpu",
                                     "tokens": 8192})
    ls = [r for r in locate_rows(half, PROFILES["gpu"], 30) if r["step"].startswith("layer_s")]
    assert ls[0]["each_s"] == 2.0 and "scaled x2 (linear in tokens)" in ls[0]["source"]


class _Reader:
    """The dump's reader over arrays: the held-out split only (store_train false)."""

    def __init__(self, states: np.ndarray, ids: np.ndarray):
        self.states, self.ids, self.splits, self.directory = states, ids, ["val"], "memory"

    def n_layers(self):
        return self.states.shape[0]

    def shape(self, split):
        return self.states.shape

    def layer(self, split, layer):
        return self.states[layer]

    def input_ids(self, split):
        return self.ids

    def reference(self, split, n=None):
        return None


def test_the_model_predicts_a_tiny_runs_real_step_times(tmp_path, tiny_backbone):
    from dihal.config import BridgeProtocol, ExtractConfig, GeometryConfig, LayerScoreConfig
    from dihal.locate.stage import sequence_stability
    from dihal.replace.stage import train_layer

    bb = tiny_backbone
    gen = torch.Generator().manual_seed(0)
    train = torch.randint(5, bb.model.config.vocab_size, (48, 16), generator=gen).numpy()
    val = torch.randint(5, bb.model.config.vocab_size, (24, 16), generator=gen).numpy()
    train[:, 0] = val[:, 0] = bb.bos_id
    sizes = {"extract_batch": 16, "bridge": {"d_model": 32, "n_layers": 1, "n_heads": 2,
                                             "batch_size": 8, "eval_sequences": 8},
             "bridge_steps": 12, "geometry_tokens": 256, "resamples": 4}
    check = gpu_check.Check(tmp_path / "out", 10_000, "cpu")
    check.results["tiny"] = True
    store: dict = {}
    for name, fn, args in [("dump", gpu_check.dump, (check, bb, val, sizes, store)),
                           ("pairs", gpu_check.pairs, (check, bb, train, sizes, store)),
                           ("bridge", gpu_check.bridge, (check, bb, sizes, store, tmp_path)),
                           ("measure", gpu_check.measure, (check, bb, store, val)),
                           ("geometry", gpu_check.geometry, (check, bb, sizes, store))]:
        got = check.run(name, fn, *args)
        assert "error" not in got, got
    units = units_of(check.results)

    # one sweep partition: 3 seeds and the regression control at layer 2, as the sweep runs it
    proto = BridgeProtocol(**{**sizes["bridge"], "seeds": 3, "epochs": 2.0})
    predicted = sum(r["seconds"] for r in training_rows(
        units, proto.to_dict(), len(train), train.shape[1], [2], seeds=3, controls=1,
        what="sweep"))
    reader = _Reader(store["val_states"].float().numpy(), val)
    extract = ExtractConfig(batch_size=16, store_train=False)
    t = gpu_check.time.perf_counter()
    train_layer(bb, reader, 2, proto, tmp_path / "b", train_ids=train, extract=extract,
                keep_pairs=True)
    train_layer(bb, reader, 2, _control(proto), tmp_path / "c",
                train_ids=train, extract=extract, regression=True)
    real = gpu_check.time.perf_counter() - t
    assert FACTOR > real / predicted > 1 / FACTOR, (real, predicted)

    # layer_score's sequence resamples and split halves, every candidate layer
    geo = GeometryConfig(n_tokens=256, n_anchors=128, k_neighbors=32, n_pairs=4096)  # the check's
    # 10 samples (about half a second on a CPU): a burst of the machine's other work moves a
    # longer measurement less
    cfg = LayerScoreConfig(sequence_resamples=8, split_halves=1)
    prof = {"sequences": {"n_val": 24, "seq_len": 16}, "geometry": {"n_tokens": 256},
            "layer_score": {"sequence_resamples": 8, "split_halves": 1}}
    row = [r for r in locate_rows(units, prof, bb.n_layers) if r["step"].startswith("layer_s")]
    t = gpu_check.time.perf_counter()
    sequence_stability(reader, geo, list(range(1, bb.n_layers)), 1, cfg, backbone="t")
    real = gpu_check.time.perf_counter() - t
    assert row[0]["count"] == 10 * (bb.n_layers - 1)
    print(f"layer_score's sequence samples: real {real:.3f} s, predicted "
          f"{row[0]['seconds']:.3f} s")
    assert FACTOR > real / row[0]["seconds"] > 1 / FACTOR, (real, row[0])


def _control(proto):
    """The regression control's protocol: the bridge's, one sampler step."""
    from dataclasses import replace

    return replace(proto, sampler_steps=1)


def test_the_budget_step_measures_each_budget_beside_the_ridge_map_and_leaves_out_what_the_deadline_would_cut(
        tmp_path, tiny_backbone):
    bb = tiny_backbone
    gen = torch.Generator().manual_seed(1)
    train = torch.randint(5, bb.model.config.vocab_size, (32, 16), generator=gen).numpy()
    val = torch.randint(5, bb.model.config.vocab_size, (12, 16), generator=gen).numpy()
    train[:, 0] = val[:, 0] = bb.bos_id
    sizes = {"extract_batch": 16, "bridge": {"d_model": 32, "n_layers": 1, "n_heads": 2,
                                             "batch_size": 8, "eval_sequences": 8},
             "budgets": [2, 4, 10**10]}
    check = gpu_check.Check(tmp_path / "out", 10_000, "cpu")
    check.results["weights"] = "the tests' tiny Llama (random)"
    store: dict = {}
    for name, fn, args in [("dump", gpu_check.dump, (check, bb, val, sizes, store)),
                           ("pairs", gpu_check.pairs, (check, bb, train, sizes, store)),
                           ("budget", gpu_check.budget, (check, bb, sizes, store, val, tmp_path))]:
        got = check.run(name, fn, *args)
        assert "error" not in got, got
    assert [b["steps"] for b in got["budgets"]] == [2, 4]
    # ten billion steps cannot finish in the 10,000 s deadline at any pace (a microsecond a step
    # would take 10,000 s); a million could, on a fast machine, and the test would train them
    assert got["not_run"] == [10**10]
    assert got["weights_mean_anything"] is False
    assert got["ridge"]["hybrid_nll"] > 0 and got["backbone_nll"] > 0
    for b in got["budgets"]:
        assert b["hybrid_nll"] > 0 and b["ms_per_step"] > 0
        assert b["below_ridge"] == (b["hybrid_nll"] < got["ridge"]["hybrid_nll"])
        assert b["repeats"] == b["steps"] * 8 / got["sequences"]
