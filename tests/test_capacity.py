"""The capacity planner: exact 8B counts and device maps from models on the meta device (nothing
8B-sized is ever allocated), and the storage arithmetic of the held-out-only state store."""

from __future__ import annotations

import dataclasses
import resource
import sys

import pytest
import torch

from dihal import capacity
from dihal.capacity import Workload

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
    assert capacity.state_store_bytes(5, 8, w) == 5 * 12 * 8 * 2 + 12 * 4 == 1008
    # the pairs (c, h_l) of 10 x 4 training tokens, 8 dims, float32
    assert capacity.pair_bytes(8, w) == 2 * 40 * 8 * 4


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
