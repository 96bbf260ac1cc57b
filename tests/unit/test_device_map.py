"""A backbone spread over several GPUs (device_map="auto"): each block's states come back on
that block's device, because DiHAL calls the inner decoder (and hooks inside it), whose outputs
accelerate does not gather. Test doubles place states on two devices on the CPU: "meta" stands
for the GPU holding the embedding, "cpu" for a second GPU."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from dihal.backbones import load_backbone
from dihal.inputs import BackboneInfo, Placement
from dihal.locate import extract
from dihal.locate.extract import ExtractConfig, layer_pairs, stack_on_one_device


class SplitDecoder:
    """The decoder of a model split over two devices: the embedding and the first `split`
    states on "meta", the others on the CPU, as device_map leaves them."""

    def __init__(self, inner, split: int):
        self._inner, self._split = inner, split

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def __call__(self, **kwargs):
        out = self._inner(**kwargs)
        hs = tuple(h.to("meta") if i < self._split else h for i, h in enumerate(out.hidden_states))
        return SimpleNamespace(hidden_states=hs, last_hidden_state=out.last_hidden_state)


def test_stack_on_one_device_gathers_states_of_two_devices():
    a, b = torch.ones(2, 3), torch.zeros(2, 3, device="meta")
    with pytest.raises(RuntimeError, match="device"):
        torch.stack([b, a])  # what the code did
    both = stack_on_one_device([b, a])
    assert both.shape == (2, 2, 3) and both.device.type == "meta"
    on_cpu = stack_on_one_device([a, a * 2], "cpu")
    assert torch.equal(on_cpu, torch.stack([a, a * 2]))


def test_hidden_states_of_a_model_split_over_two_devices_are_stacked(tiny_backbone):
    bb = copy.copy(tiny_backbone)
    bb.decoder = SplitDecoder(tiny_backbone.decoder, split=2)
    ids = torch.randint(4, 100, (2, 7), generator=torch.Generator().manual_seed(0))
    hs, final = bb.hidden_states(ids, final=True)
    assert hs.shape == (bb.n_layers, 2, 7, bb.hidden_size)
    assert hs.device.type == "meta"  # the embedding's device (the first state's)
    torch.testing.assert_close(final, tiny_backbone.hidden_states(ids, final=True)[1])


class _Stop(Exception):
    pass


def test_training_pairs_of_a_model_split_over_two_devices_are_checked_on_one_device(monkeypatch):
    """layer_pairs stacks hs[0] (on the embedding's GPU) and hs[l] (on block l-1's GPU) to check
    them in one pass: the stack must gather them first."""
    c = torch.zeros(2, 5, 8, device="meta")
    h = torch.ones(2, 5, 8)
    double = SimpleNamespace(hidden_size=8, lower_states=lambda batch, layer: (c, h))
    seen = []

    def check(states, dtype, **kw):
        seen.append((states.device.type, tuple(states.shape), kw["layers"]))
        raise _Stop

    monkeypatch.setattr(extract, "check_states", check)
    with pytest.raises(_Stop):
        layer_pairs(double, np.zeros((2, 5), dtype=np.int64), 3, ExtractConfig(batch_size=2))
    assert seen == [("meta", (2, 2, 5, 8), (0, 3))]


def test_device_map_is_checked_and_the_placement_recorded(tiny_llama_dir, tmp_path):
    with pytest.raises(ValueError, match="DIHAL_DEVICE_MAP"):
        load_backbone("llama", path=tiny_llama_dir, cache_dir=tmp_path, device_map="everywhere")
    one = load_backbone("llama", path=tiny_llama_dir, cache_dir=tmp_path)
    assert one.info().device_map is None
    bb = load_backbone("llama", path=tiny_llama_dir, cache_dir=tmp_path, device_map="auto")
    assert bb.info().device_map == Placement("auto", {"cpu": bb.n_layers})
    stored = bb.info().to_dict()  # as the dump's manifest records it, and read back
    assert stored["device_map"] == {"mode": "auto", "blocks": {"cpu": bb.n_layers}}
    assert BackboneInfo.from_dict(stored) == bb.info()
    # what accelerate records for two GPUs (hf_device_map), summarised per device
    bb.model.hf_device_map = {"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": 0,
                              "model.layers.2": 1, "model.layers.3": 1, "model.norm": 1,
                              "model.rotary_emb": 1, "lm_head": 1}
    assert bb.info().device_map.blocks == {"cuda:0": 2, "cuda:1": 2}


def test_backbone_resource_reads_the_device_map_setting(monkeypatch):
    import importlib

    import resources

    monkeypatch.setenv("DIHAL_DEVICE_MAP", "auto")
    assert importlib.reload(resources).BackboneResource().device_map == "auto"
    monkeypatch.delenv("DIHAL_DEVICE_MAP")
    assert importlib.reload(resources).BackboneResource().device_map is None


def test_the_driver_offers_exactly_the_supported_device_maps_and_passes_one_on(monkeypatch):
    """--device-map is checked by the parser against dihal.backbones.DEVICE_MAPS, and reaches
    the backbone resource's default in the driver's code location (so every run's config)."""
    import pytest

    from dihal.backbones import DEVICE_MAPS
    from pipeline import main as driver

    assert tuple(driver.DEVICE_MAP_CHOICES) == tuple(DEVICE_MAPS)
    monkeypatch.delenv("DIHAL_DEVICE_MAP", raising=False)
    ap = driver.build_parser()
    assert ap.parse_args(["--device-map", "auto"]).device_map == "auto"
    assert ap.parse_args([]).device_map is None  # one device
    monkeypatch.setenv("DIHAL_DEVICE_MAP", "balanced")
    assert driver.build_parser().parse_args([]).device_map == "balanced"
    with pytest.raises(SystemExit):
        ap.parse_args(["--device-map", "everywhere"])
