"""Every supported decoder family, end to end on a tiny random model built from its config
class (tests/tiny.py build_model) and loaded as a declared backbone from its folder: the
hidden states, the upper layers replayed from stored states, the cached upper layers, the
backbone's own cached decoding, and the hybrid's. GPT-2 and GPT-NeoX are refused by name."""

import json
import shutil

import pytest
import torch

from dihal.backbones import REPLAY_TOLERANCE_NATS, load_backbone
from dihal.backbones import check_replay as check_replay_at_load
from dihal.bridge.data import Standardizer
from dihal.bridge.denoiser import build_denoiser
from dihal.bridge.process import BrownianBridge
from dihal.errors import UnsupportedArchitectureError
from dihal.net_configs import DenoiserConfig
from dihal.registry import SUPPORTED_ARCHITECTURES, BackboneSpec, declare
from dihal.replace.hybrid import Hybrid, decode_backbone
from tests.tiny import FAMILIES, REFUSED, build_model, check_replay

LAYER = 2
MODEL_TYPE = {"gemma3": "gemma3_text"}  # the tiny arch -> its config's model_type


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tmp_path_factory):
    """(arch, backbone): the tiny model of one family, declared from its folder and loaded."""
    arch = request.param
    folder = build_model(tmp_path_factory.mktemp(f"tiny-{arch}"), arch)
    spec = declare(f"tiny_{arch}", {"model": str(folder)}, "test")
    assert spec.source == "folder" and spec.n_layers == 4  # from config.json, no weights read
    bb = load_backbone(spec, cache_dir=tmp_path_factory.mktemp("cache"))
    return arch, bb


def test_every_family_is_declared_supported():
    assert {MODEL_TYPE.get(a, a) for a in FAMILIES} == set(SUPPORTED_ARCHITECTURES)


def test_replayed_upper_layers_equal_the_full_models_logits(family):
    """hs[0] is the embedding the decoder starts from (scaled where the family scales it);
    lower_states stops at the same values; run_upper(hs[l], l) == the full forward's logits
    (soft-capped where the family caps them) for every layer l."""
    arch, bb = family
    assert bb.model.config.model_type == MODEL_TYPE.get(arch, arch)
    full, hs = check_replay(bb)
    # the layers differ: a replay from the wrong layer is not the model
    assert not torch.allclose(bb.run_upper(hs[1], 2), full, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_load_probe_finds_the_replay_exact(family, dtype, tmp_path):
    """load_backbone's probe (check_replay: 16 tokens, cut at the middle layer)
    measures the replay as the model's own forward, in float32 and bfloat16, far inside the
    tolerance it refuses beyond."""
    arch, bb = family
    if dtype != torch.float32:
        bb = load_backbone(bb.spec, cache_dir=tmp_path, dtype=dtype)
    probe = check_replay_at_load(bb)
    assert set(probe) == {2}
    assert all(nats <= REPLAY_TOLERANCE_NATS[dtype] / 10 for _, nats in probe.values()), probe


def test_options_the_family_ignores_are_not_read(family, tmp_path):
    """The family's config.json given a `sliding_window` (4, shorter than the sequence) and a
    `final_logit_softcapping` where it has none (Gemma 2/3 have both): its forward reads them
    only where the family uses them (Mistral and Phi-3 slide every layer, Qwen2/3 only with
    `use_sliding_window`, Gemma 2/3 slide by `layer_types` and cap), and so does the replay."""
    arch, bb = family
    cfg = json.loads((bb.weights.path / "config.json").read_text())
    options = {k: v for k, v in {"sliding_window": 4, "final_logit_softcapping": 1.0}.items()
               if cfg.get(k) is None}
    folder = shutil.copytree(bb.weights.path, tmp_path / arch)
    (folder / "config.json").write_text(json.dumps({**cfg, **options}))
    check_replay(load_backbone(declare(f"odd_{arch}", {"model": str(folder)}, "test"),
                               cache_dir=tmp_path))


def test_cached_upper_layers_equal_uncached(family):
    """A prefix of 6 positions, then one position at a time through the cache, equals the
    full pass (the sequence is longer than the sliding window where there is one)."""
    _, bb = family
    ids = torch.randint(4, len(bb.tokenizer), (2, 10), generator=torch.Generator().manual_seed(1))
    full = bb.model(ids).logits
    h = bb.hidden_states(ids)[LAYER]
    cache = bb.new_cache()
    first = bb.run_upper(h[:, :6], LAYER, cache=cache)
    steps = [bb.run_upper(h[:, i : i + 1], LAYER, cache=cache, start_pos=i) for i in range(6, 10)]
    torch.testing.assert_close(torch.cat([first, *steps], 1), full, rtol=0, atol=1e-5)


def test_cached_decoding_equals_uncached(family):
    """The backbone sampled with its KV cache and recomputing everything gives the same
    tokens; so does the hybrid (bridge at LAYER with random weights, upper layers cached)."""
    _, bb = family
    a = decode_backbone(bb, 3, 8, seed=5, cached=True).tokens
    b = decode_backbone(bb, 3, 8, seed=5, cached=False).tokens
    assert torch.equal(a, b)
    ids = torch.randint(4, len(bb.tokenizer), (4, 12), generator=torch.Generator().manual_seed(2))
    hs = bb.hidden_states(ids)
    cfg = DenoiserConfig(d_in=bb.hidden_size, d_model=32, n_layers=2, n_heads=4, max_len=32,
                         time_embed_dim=16)
    den = build_denoiser(cfg, 0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in den.parameters():
            p.copy_(0.2 * torch.randn(p.shape, generator=g))
    hybrid = Hybrid(bb, den, BrownianBridge(), Standardizer.fit(hs[0]),
                    Standardizer.fit(hs[LAYER]), layer=LAYER, sampler_steps=3)
    cached = hybrid.decode(3, 8, seed=7, cached=True).tokens
    uncached = hybrid.decode(3, 8, seed=7, cached=False).tokens
    assert torch.equal(cached, uncached)
    assert cached.shape == (3, 9)


@pytest.mark.parametrize("arch", REFUSED)
def test_other_layouts_are_refused_by_name(arch, tmp_path):
    """GPT-2 and GPT-NeoX: refused when declared (from config.json) and at load, naming the
    family and the supported ones."""
    folder = build_model(tmp_path / arch, arch)
    with pytest.raises(UnsupportedArchitectureError, match=rf"model_type '{arch}'.*Llama.*OLMo 2"):
        declare(f"tiny_{arch}", {"model": str(folder)}, "test")
    spec = BackboneSpec(name="x", hf_id=str(folder), n_layers=4, source="folder")
    with pytest.raises(UnsupportedArchitectureError, match="GPT" if arch == "gpt2" else "NeoX"):
        load_backbone(spec, cache_dir=tmp_path)
