"""The capacity planner: exact 8B counts and device maps from models on the meta device (nothing
8B-sized is ever allocated), and the storage arithmetic of the held-out-only state store."""

from __future__ import annotations

import dataclasses
import resource
import sys

import pytest
import torch

from dihal.run import capacity
from dihal.run.capacity import Workload

EIGHT_B = {"llama": 8.03e9, "qwen": 8.19e9}


@pytest.mark.parametrize("backbone", sorted(EIGHT_B))
def test_8b_counts_on_meta_match_the_published_sizes(backbone):
    config = capacity.load_model_config(backbone)
    count = capacity.parameter_count_on_meta(config)
    assert count.n_params == pytest.approx(EIGHT_B[backbone], rel=0.005)
    assert count.weight_bytes_bf16 == 2 * count.n_params
    model = capacity.meta_model(config)
    assert {p.device.type for p in model.parameters()} == {"meta"}
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_tied_embeddings_are_counted_once():
    count = capacity.parameter_count_on_meta(capacity.load_model_config("smollm2"))
    assert count.n_params == 134_515_008  # SmolLM2-135M: lm_head shares the embedding table


def test_a_model_on_a_real_device_is_refused():
    with pytest.raises(capacity.NotOnMetaError, match="real device"):
        capacity._check_on_meta(torch.nn.Linear(2, 2), "tiny")


@pytest.mark.parametrize("backbone", sorted(EIGHT_B))
def test_device_maps_of_the_8b_models(backbone):
    config = capacity.load_model_config(backbone)
    n = config["num_hidden_layers"]
    plans = capacity.device_maps(config)

    one = plans["1x141GB"]
    assert one.layers[0] == n and not one.spills

    two = plans["2x24GB"]
    assert two.layers[0] > 0 and two.layers[1] > 0 and two.layers[0] + two.layers[1] == n
    assert not two.spills and two.layers["cpu"] == two.layers["disk"] == 0
    assert two.gib[0] + two.gib[1] == pytest.approx(
        capacity.parameter_count_on_meta(config).weight_bytes_bf16 / capacity.GIB, rel=1e-6)
    assert max(two.gib[0], two.gib[1]) < 22


def test_state_store_of_a_tiny_workload_is_the_hand_count():
    w = Workload(seq_len=4, n_train=10, n_val=3)
    # 5 layers x (3 x 4 tokens) x 8 dims x 2 bytes, plus 12 int32 ids
    store = capacity.state_store_bytes(5, w.val_tokens, 8, w.state_bytes)
    assert store == 5 * 12 * 8 * 2 + 12 * 4 == 1008
    # the pairs (c, h_l) of 10 x 4 training tokens, 8 dims, float32
    assert capacity.pair_bytes(w.train_tokens, 8) == 2 * 40 * 8 * 4


def test_disk_does_not_grow_with_training_tokens_but_host_pairs_do():
    config = capacity.load_model_config("smollm2")
    small = capacity.capacity_rows(config, 4, Workload())
    big = capacity.capacity_rows(config, 4, dataclasses.replace(Workload(), n_train=4 * 8192))
    store = "disk: hidden-state store (held-out, all N layers)"
    pairs = "host: bridge training pairs (fp32)"
    assert big[store] == small[store]
    assert big["disk: total"] == small["disk: total"]
    assert big[pairs] == pytest.approx(4 * small[pairs])


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def test_building_the_meta_models_stays_small():
    """Rebuilt from scratch, the three models raise the peak RSS by well under the 15 GiB an
    allocated 8B model would take: below 2 GB run alone, at most +1 GB after other tests."""
    before = _peak_rss_bytes()
    capacity._meta_model.cache_clear()
    for backbone in ("smollm2", "llama", "qwen"):
        config = capacity.load_model_config(backbone)
        capacity.parameter_count_on_meta(config)
        capacity.device_maps(config)
    assert _peak_rss_bytes() < max(2e9, before + 1e9)


# --- the dump's peak device memory, measured on the CPU allocator --------------------------------

N_TINY, D_TINY, B_TINY, T_TINY = 8, 64, 4, 32


def _allocated_peak(fn) -> int:
    """Peak bytes allocated by `fn` beyond what existed before, from the profiler's memory
    events (the CPU allocator's running total of live allocations)."""
    import json

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    with __import__("tempfile").NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = json.load(open(f.name))["traceEvents"]
    totals = [e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]"]
    assert totals, "the profiler recorded no allocation"
    return max(totals)


@pytest.fixture(scope="module")
def bf16_backbone(tmp_path_factory):
    """A tiny Llama in bfloat16 (the GPU profile's backbone dtype) with more layers than the
    shared one, so that the states held after the forward pass dominate, as at 8B."""
    from dihal.backbones import load_backbone
    from tests.tiny import build_model

    folder = build_model(tmp_path_factory.mktemp("tiny-8"), "llama", n_layers=N_TINY,
                         hidden=D_TINY)
    return load_backbone("llama", path=folder, cache_dir=folder, dtype=torch.bfloat16)


class _Writer:
    """What extract_hidden_states needs of a StateWriter; it keeps nothing."""

    def __init__(self, reference_splits):
        self.reference_splits = reference_splits

    def is_done(self, split, b):
        return False

    def write_batch(self, *args):
        pass


@pytest.mark.parametrize("split", ["val", "train"])
def test_dump_peak_model_is_the_measured_peak_of_one_batch(bf16_backbone, split):
    """The model counts what extract_hidden_states holds: a bf16 batch of N states, their
    float32 copy, one layer's isfinite temporaries at a time, the final states of the
    reference. Measured on the CPU allocator, the peak is the model's to within 2%. (Before the
    correction the model counted the forward pass only, and the check ran isfinite over all
    layers at once: 11.25 x the states' float32 elements measured, against 6.25.)"""
    import numpy as np

    from dihal.locate.extract import ExtractConfig, extract_hidden_states

    bb = bf16_backbone
    ids = np.random.default_rng(0).integers(4, bb.model.config.vocab_size, (B_TINY, T_TINY))
    measured = _allocated_peak(lambda: extract_hidden_states(
        bb, {split: ids}, _Writer({"val"}), ExtractConfig(batch_size=B_TINY)))
    w = Workload(seq_len=T_TINY, extract_batch=B_TINY)
    phases = capacity.dump_phase_bytes(N_TINY, D_TINY, bb.model.config.intermediate_size,
                                       bb.model.config.vocab_size, w, dtype_bytes=2,
                                       reference=split == "val")
    assert measured == pytest.approx(max(phases.values()), rel=0.02), phases
    assert max(phases, key=phases.get) == "float"  # after the forward pass, not in it


def test_training_pairs_peak_model_is_within_ten_percent_of_the_measured(bf16_backbone):
    import numpy as np

    from dihal.locate.extract import ExtractConfig, layer_pairs

    bb = bf16_backbone
    ids = np.random.default_rng(1).integers(4, bb.model.config.vocab_size, (B_TINY, T_TINY))
    measured = _allocated_peak(lambda: layer_pairs(bb, ids, N_TINY - 1,
                                                   ExtractConfig(batch_size=B_TINY)))
    phases = capacity.pair_phase_bytes(D_TINY, bb.model.config.intermediate_size,
                                       Workload(seq_len=T_TINY, extract_batch=B_TINY))
    assert measured == pytest.approx(max(phases.values()), rel=0.10), phases


def test_dump_peak_at_8b_is_weights_plus_the_batch_of_states():
    """Llama-3.1-8B at the GPU profile: 32 x 64 x 128 x 4096 = 2^30 state elements per batch,
    held in bf16 and float32 (6 GiB) beside the final states (1/16 GiB) and 14.96 GiB of
    weights: 21.02 GiB (the table said 17.40 before, counting the forward pass only)."""
    config = capacity.load_model_config("llama")
    weights = capacity.parameter_count_on_meta(config).weight_bytes_bf16
    peak = capacity.dump_peak_bytes(config)
    assert peak == weights + 6 * 2**30 + 2**26
    assert peak / capacity.GIB == pytest.approx(21.02, abs=0.005)
    rows = capacity.capacity_rows(config)
    assert rows["GPU: extraction forward (bf16 weights + est. activations)"] == peak / capacity.GIB


def test_dump_peak_for_any_model_dims():
    """Any config: here SmolLM2's with its dims changed. The states' part scales with layers x
    hidden size x batch x length; float32 states (a CPU backbone) hold no bf16 copy."""
    base = capacity.load_model_config("smollm2")
    w = Workload(seq_len=128, extract_batch=64)
    one = 64 * 128
    for layers, hidden in ((30, 576), (12, 768), (40, 1024)):
        config = {**base, "num_hidden_layers": layers, "hidden_size": hidden,
                  "intermediate_size": 4 * hidden, "num_attention_heads": 8,
                  "num_key_value_heads": 4, "head_dim": hidden // 8}
        n_params = capacity.parameter_count_on_meta(config).n_params
        states = layers * one * hidden
        assert capacity.dump_peak_bytes(config, w) == 2 * n_params + 6 * states + 2 * one * hidden
        f32 = capacity.dump_peak_bytes(config, w, dtype_bytes=4)
        assert f32 == 4 * n_params + max(capacity.dump_phase_bytes(
            layers, hidden, 4 * hidden, base["vocab_size"], w, dtype_bytes=4).values())
