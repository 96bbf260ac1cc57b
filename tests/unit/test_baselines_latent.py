"""LD4LG and CoDAR: budget sizing at the SmolLM2 size, loss falls on a toy corpus, sampling is
shaped, in range, deterministic and makes exactly `steps` denoiser calls, CoDAR's decoder
temperature moves the samples' entropy the expected way."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from dihal.bridge.denoiser import build_denoiser
from dihal.compare.baselines import build_baseline, codar, ld4lg
from dihal.compare.baselines.base import baseline_loss
from dihal.compare.baselines.codar import CoDARConfig
from dihal.compare.baselines.decoder import DecoderConfig
from dihal.compare.baselines.ld4lg import LD4LGConfig
from dihal.net_configs import DenoiserConfig, TrainConfig
from dihal.training import sample_budget, train_model

V, D, T, BOS, EOS = 50, 16, 8, 0, 1
SMALL_DECODER = DecoderConfig(d_model=32, n_layers=1, n_heads=2)
SMALL = {
    "ld4lg": LD4LGConfig(n_latents=4, d_latent=16, d_ae=32, ae_heads=2, encoder_layers=1,
                         resampler_layers=1, decoder=SMALL_DECODER),
    "codar": CoDARConfig(decoder=SMALL_DECODER),
}
MODULES = {"ld4lg": ld4lg, "codar": codar}


def tiny_target(name: str) -> int:
    """The budget of a 2-layer, width-32 denoiser over this baseline's diffusion space."""
    d_in = SMALL[name].d_latent if name == "ld4lg" else D
    cfg = DenoiserConfig(d_in=d_in, d_model=32, n_layers=2, n_heads=1)
    return build_denoiser(cfg, 0).param_count()


def tiny(name: str, seed: int = 0, config=None):
    emb = torch.randn(V, D, generator=torch.Generator().manual_seed(0))
    return MODULES[name].build(emb, seq_len=T, target_params=tiny_target(name), seed=seed,
                               bos_id=BOS, eos_id=EOS, config=config or SMALL[name])


def toy_corpus(n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """[BOS] + one of 4 fixed random 7-token patterns, repeated."""
    patterns = torch.randint(2, V, (4, T - 1), generator=torch.Generator().manual_seed(1))
    ids = torch.cat([torch.full((n, 1), BOS), patterns[torch.arange(n) % 4]], dim=1)
    return ids, patterns


def mean_terms(model, ids: torch.Tensor) -> dict[str, float]:
    """Each loss term on a fixed batch, averaged over 4 fixed noise draws, in eval mode."""
    model.eval()
    out: dict[str, float] = {}
    with torch.no_grad():
        for k in range(4):
            for name, v in model.loss_terms(ids, torch.Generator().manual_seed(k)).items():
                out[name] = out.get(name, 0.0) + float(v) / 4
    return out


@pytest.fixture(scope="module", params=["ld4lg", "codar"])
def trained(request, tmp_path_factory):
    """(model, train result, tokens consumed, loss terms before and after on a fixed batch),
    trained once."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = tiny(request.param)
        ids, _ = toy_corpus()
        before = mean_terms(model, ids[:32])
        cfg = TrainConfig(lr=1e-2, batch_size=8, epochs=12.5, log_every=10)  # 100 steps
        result = train_model(model, baseline_loss(ids), len(ids), cfg,
                             tmp_path_factory.mktemp(request.param))
        after = mean_terms(model, ids[:32])
    finally:
        torch.set_num_threads(threads)
    return model, result, sample_budget(len(ids), cfg) * T, before, after


def test_loss_falls_on_a_toy_corpus(trained):
    model, result, train_tokens, before, after = trained
    assert result.step == 100 and train_tokens == 64 * 12.5 * T
    curve = [c.loss for c in result.curve]
    assert all(math.isfinite(c) for c in curve)
    assert curve[-1] < curve[0] / 3, curve
    read_out = "reconstruction" if model.name == "ld4lg" else "decoder"
    assert after[read_out] < 0.25 * before[read_out], (model.name, before, after)
    assert after["diffusion"] < 0.85 * before["diffusion"], (model.name, before, after)


def test_trained_greedy_samples_reproduce_the_patterns(trained):
    model, *_ = trained
    _, patterns = toy_corpus()
    s = model.sample(16, T, 10, torch.Generator().manual_seed(3), temperature=0.0)
    assert (s[:, 0] == BOS).float().mean() >= 0.75
    match = (s[:, None, 1:] == patterns[None]).all(-1).any(-1).float().mean()
    assert match >= 0.5, (model.name, s)


def unigram_entropy(ids: torch.Tensor) -> float:
    p = torch.bincount(ids.flatten(), minlength=V).float()
    p = p[p > 0] / p.sum()
    return float(-(p * p.log()).sum())


@pytest.mark.parametrize("trained", ["codar"], indirect=True)
def test_codar_decoder_temperature_orders_entropy(trained):
    model, *_ = trained
    assert model.cfg.temperature == 0.7
    cold = model.sample(32, T, 8, torch.Generator().manual_seed(4), temperature=0.2)
    hot = model.sample(32, T, 8, torch.Generator().manual_seed(4), temperature=2.0)
    assert unigram_entropy(cold) < unigram_entropy(hot) - 0.2
    assert len(cold.unique()) + 10 < len(hot.unique())


@pytest.mark.parametrize("name", ["ld4lg", "codar"])
def test_sample_is_shaped_in_range_deterministic_and_makes_steps_calls(name):
    model = tiny(name).eval()
    twin, other = tiny(name).state_dict(), tiny(name, seed=1).state_dict()
    assert all(torch.equal(v, twin[k]) for k, v in model.state_dict().items())  # seeded init
    assert not all(torch.equal(v, other[k]) for k, v in model.state_dict().items())
    calls = []
    model.denoiser.register_forward_hook(lambda *a: calls.append(1))
    a = model.sample(3, T, 5, torch.Generator().manual_seed(11), temperature=1.0)
    assert len(calls) == 5
    b = model.sample(3, T, 5, torch.Generator().manual_seed(11), temperature=1.0)
    c = model.sample(3, T, 5, torch.Generator().manual_seed(12), temperature=1.0)
    assert a.shape == (3, T) and a.dtype == torch.int64
    assert int(a.min()) >= 0 and int(a.max()) < V
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert model.sample(2, T - 3, 1, torch.Generator().manual_seed(0)).shape == (2, T - 3)
    with pytest.raises(ValueError, match="length must be an int"):
        model.sample(1, T + 1, 1, torch.Generator().manual_seed(0))
    # the weights are the whole state: a rebuilt model with them samples identically
    fresh = tiny(name, seed=99)
    fresh.load_state_dict(model.state_dict())
    again = fresh.eval().sample(3, T, 5, torch.Generator().manual_seed(11), temperature=1.0)
    assert torch.equal(again, a)


def test_ld4lg_two_phases_freeze_the_autoencoder(tmp_path):
    model = tiny("ld4lg", config=replace(SMALL["ld4lg"], autoencoder_steps=3))
    ids, _ = toy_corpus(16)
    cfg = TrainConfig(lr=1e-2, batch_size=4, epochs=1.0, checkpoint_every=3)  # 4 steps
    train_model(model, baseline_loss(ids), len(ids), cfg, tmp_path, stop_after=3)  # checkpointed
    mid = {k: v.clone() for k, v in model.state_dict().items()}
    assert int(mid["train_calls"]) == 3 and model.autoencoder_frozen()
    assert set(model.loss_terms(ids[:4], torch.Generator().manual_seed(0))) == {"diffusion"}
    resumed = train_model(model, baseline_loss(ids), len(ids), cfg, tmp_path)
    assert resumed.resumed_from == 3  # in phase 2
    end = model.state_dict()
    assert int(end["train_calls"]) == 4
    changed = {k for k in end if not torch.equal(end[k], mid[k])}
    assert changed, "phase 2 trains the denoiser"
    assert all(k.startswith("denoiser.") or k == "train_calls" for k in changed), changed


@pytest.fixture(scope="module")
def smollm2_table():
    return torch.randn(49152, 576, generator=torch.Generator().manual_seed(0)) * 0.05


@pytest.mark.parametrize("name", ["ld4lg", "codar"])
def test_build_meets_the_bridge_budget_at_smollm2_size(name, smollm2_table):
    target = build_denoiser(DenoiserConfig(d_in=576), 0).param_count()
    model = build_baseline(name, embeddings=smollm2_table, seq_len=128, target_params=target,
                           seed=0, bos_id=1, eos_id=2)
    assert model.name == name
    n = model.denoiser_parameters()
    assert n == sum(p.numel() for p in model.denoiser.parameters())
    assert abs(n - target) / target < 0.02, (n, target)
    assert model.denoiser.cfg.causal is False
    assert model.denoiser.cfg.head_dim % 2 == 0
    # decoders and (for LD4LG) the autoencoder come on top; the frozen table is no parameter
    assert n < model.total_parameters() < n + 8_000_000
    assert "table" not in model.state_dict()
