"""The hybrid: plumbing exact with an oracle bridge; cached decoding == uncached decoding, with
each new token processed once; the backbone reference sampled by the same code."""

import pytest
import torch
from torch import nn

from dihal.bridge.data import Standardizer
from dihal.bridge.denoiser import build_denoiser
from dihal.bridge.process import BrownianBridge
from dihal.net_configs import DenoiserConfig
from dihal.replace.hybrid import (
    Hybrid,
    decode_backbone,
    decode_texts,
    generate_backbone,
    next_token_nll,
    sample_next,
    top1_agreement,
)

LAYER = 2


@pytest.fixture(scope="module")
def stds(tiny_backbone):
    ids = torch.randint(4, len(tiny_backbone.tokenizer), (4, 16),
                        generator=torch.Generator().manual_seed(0))
    hs = tiny_backbone.hidden_states(ids)
    return Standardizer.fit(hs[0]), Standardizer.fit(hs[LAYER])


def random_denoiser(d_in: int, seed: int = 0):
    """A fresh denoiser has a zero output layer (constant z0_hat): give every weight a random
    value so that h_l_hat, and hence the tokens, depend on the whole prefix."""
    cfg = DenoiserConfig(d_in=d_in, d_model=32, n_layers=2, n_heads=4, max_len=32,
                         time_embed_dim=16)
    model = build_denoiser(cfg, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.2 * torch.randn(p.shape, generator=g))
    return model


def make_hybrid(backbone, stds, denoiser=None, steps=4, eta=0.0):
    denoiser = denoiser if denoiser is not None else random_denoiser(backbone.hidden_size)
    return Hybrid(backbone, denoiser, BrownianBridge(), *stds, layer=LAYER, sampler_steps=steps, eta=eta)


class OracleBridge(nn.Module):
    """Recovers the tokens from c (nearest embedding row) and returns the true standardised
    h_l: a perfect bridge for whole sequences."""

    def __init__(self, backbone, stds):
        super().__init__()
        self.bb, self.stds = backbone, stds
        self.dummy = nn.Parameter(torch.zeros(1))

    def forward(self, x_t, t, c):
        emb = self.bb.decoder.embed_tokens.weight
        ids = torch.cdist(self.stds[0].invert(c), emb.unsqueeze(0)).argmin(-1)
        return self.stds[1].apply(self.bb.hidden_states(ids)[LAYER])


class Counting(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner, self.cfg, self.positions = inner, inner.cfg, 0

    def new_cache(self):
        return self.inner.new_cache()

    def forward(self, x_t, t, c, **kwargs):
        self.positions += x_t.shape[0] * x_t.shape[1]
        return self.inner(x_t, t, c, **kwargs)


def test_hybrid_with_an_exact_bridge_reproduces_the_backbone(tiny_backbone, stds):
    bb = tiny_backbone
    hybrid = make_hybrid(bb, stds, OracleBridge(bb, stds), steps=3)
    ids = torch.randint(4, len(bb.tokenizer), (2, 9), generator=torch.Generator().manual_seed(3))
    full = bb.model(ids).logits
    torch.testing.assert_close(hybrid.logits(ids), full, rtol=0, atol=1e-4)
    assert top1_agreement(hybrid.logits(ids), full.argmax(-1)) == 1.0
    assert next_token_nll(hybrid.logits, ids) == pytest.approx(
        next_token_nll(lambda x: bb.model(x).logits, ids), abs=1e-5)


def test_cached_and_uncached_hybrid_decoding_give_identical_tokens(tiny_backbone, stds):
    hybrid = make_hybrid(tiny_backbone, stds)
    kw = dict(temperature=1.0, seed=7, batch_size=2)
    cached = hybrid.decode(3, 12, cached=True, **kw)
    uncached = hybrid.generate(3, 12, cached=False, **kw)
    assert cached.tokens.shape == (3, 13) and cached.tokens.dtype == torch.long
    assert (cached.tokens[:, 0] == tiny_backbone.bos_id).all()
    assert torch.equal(cached.tokens, uncached)
    # the sampled tokens vary (the test would be vacuous on a constant model)
    assert len(set(cached.tokens[:, 1:].flatten().tolist())) > 5
    # the cached logits of the sampled sequence equal the full-sequence ones
    step = hybrid.stepper(cached=True)
    ids = cached.tokens[:1]
    last = [step(ids[:, : j + 1]) for j in range(ids.shape[1])]
    torch.testing.assert_close(torch.stack(last, 1), hybrid.logits(ids), rtol=0, atol=1e-4)
    assert cached.seconds > 0 and cached.n_new_tokens == 36 and cached.n_batches == 2


def test_cached_decoding_processes_each_token_once(tiny_backbone, stds, monkeypatch):
    bb = tiny_backbone
    denoiser = Counting(random_denoiser(bb.hidden_size))
    hybrid = make_hybrid(bb, stds, denoiser, steps=4)
    upper = []
    run_upper = bb.run_upper
    monkeypatch.setattr(bb, "run_upper", lambda h, layer, **kw: upper.append(h.shape[1])
                        or run_upper(h, layer, **kw))
    hybrid.generate(2, 6, seed=0, prompt=[bb.bos_id, 10, 11])
    fed = 3 + 6 - 1  # the prompt, then every sampled token but the last
    warm = 3 + 1  # the warm-up's 2 steps (hybrid.WARMUP_STEPS): the prompt, one token
    assert denoiser.positions == 4 * 2 * (warm + fed)  # 4 denoising steps x batch 2
    assert upper == [3, 1] + [3] + [1] * 5


def test_decoding_is_reproducible_and_independent_of_batching(tiny_backbone, stds):
    hybrid = make_hybrid(tiny_backbone, stds)
    a = hybrid.generate(3, 8, seed=1, batch_size=3)
    assert torch.equal(a, hybrid.generate(3, 8, seed=1, batch_size=1))
    assert not torch.equal(a, hybrid.generate(3, 8, seed=2, batch_size=3))


def test_stochastic_bridge_decoding_is_reproducible(tiny_backbone, stds):
    hybrid = make_hybrid(tiny_backbone, stds, eta=1.0)
    assert torch.equal(hybrid.generate(2, 5, seed=4), hybrid.generate(2, 5, seed=4))


def test_too_long_for_the_denoiser_fails_before_decoding(tiny_backbone, stds):
    with pytest.raises(ValueError, match="max_len=32"):
        make_hybrid(tiny_backbone, stds).generate(1, 40, seed=0)


def test_backbone_reference_cached_equals_uncached(tiny_backbone):
    kw = dict(temperature=1.0, seed=3, batch_size=2)
    cached = decode_backbone(tiny_backbone, 3, 10, **kw)
    assert torch.equal(cached.tokens, generate_backbone(tiny_backbone, 3, 10, cached=False, **kw))
    assert cached.tokens.shape == (3, 11)
    assert cached.timing()["ms_per_token"] > 0
    texts = decode_texts(tiny_backbone.tokenizer, cached.tokens)
    assert len(texts) == 3 and all("<s>" not in t for t in texts)


def test_greedy_backbone_decoding_follows_the_argmax(tiny_backbone):
    bb = tiny_backbone
    tokens = generate_backbone(bb, 1, 6, temperature=0.0, seed=0)
    logits = bb.model(tokens).logits
    assert torch.equal(logits[0, :-1].argmax(-1), tokens[0, 1:])


def test_inverse_cdf_sampling():
    logits = torch.log(torch.tensor([[0.0, 0.5, 0.5]])).expand(4, 3)
    u = torch.tensor([0.0, 0.25, 0.5, 0.99])
    assert sample_next(logits, 1.0, u).tolist() == [1, 1, 2, 2]
    assert sample_next(torch.tensor([[0.0, 3.0, 1.0]]), 0.0, torch.zeros(1)).tolist() == [1]
    # frequencies follow softmax(logits / temperature)
    logits = torch.tensor([[0.0, 1.0, 2.0]])
    draws = sample_next(logits.expand(20000, 3), 2.0, torch.rand(20000, generator=torch.Generator().manual_seed(0)))
    freq = torch.bincount(draws, minlength=3) / 20000
    torch.testing.assert_close(freq, torch.softmax(logits[0] / 2.0, -1), rtol=0, atol=0.015)
    with pytest.raises(ValueError):
        sample_next(logits, -1.0, torch.zeros(1))


def test_next_token_nll_and_top1_agreement_by_hand(tiny_backbone):
    bb = tiny_backbone
    ids = torch.randint(4, len(bb.tokenizer), (2, 7), generator=torch.Generator().manual_seed(5))
    assert next_token_nll(lambda x: bb.model(x).logits, ids) == pytest.approx(
        float(bb.model(ids, labels=ids).loss.detach()), abs=1e-5)
    # uniform logits: log V per prediction; masked targets are left out
    uniform = lambda x: torch.zeros(*x.shape, 8)  # noqa: E731
    mask = torch.tensor([[True, True, True, False, False, False, False]] * 2)
    assert next_token_nll(uniform, ids % 8, mask) == pytest.approx(torch.log(torch.tensor(8.0)).item())
    a = torch.tensor([[[0.0, 1.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])
    b = torch.tensor([[[0.0, 2.0], [0.0, 2.0], [3.0, 0.0], [3.0, 0.0]]])
    assert top1_agreement(a, b.argmax(-1)) == 0.5
    assert top1_agreement(a, b.argmax(-1), torch.tensor([[True, False, True, False]])) == 1.0


class Recording(Counting):
    """Counting, and keeps the conditions it was given."""

    def __init__(self, inner):
        super().__init__(inner)
        self.conds = []

    def forward(self, x_t, t, c, **kwargs):
        self.conds.append((kwargs.get("start_pos", 0), c.clone()))
        return super().forward(x_t, t, c, **kwargs)


def test_pinned_first_state_replaces_position_zero(tiny_backbone, stds):
    bb = tiny_backbone
    ids = torch.randint(4, len(bb.tokenizer), (2, 6), generator=torch.Generator().manual_seed(6))
    ids[:, 0] = bb.bos_id
    first = bb.hidden_states(ids[:1, :1])[LAYER][0, 0]
    rec = Recording(random_denoiser(bb.hidden_size))
    free = make_hybrid(bb, stds, rec).hidden(ids)  # the same bridge, nothing pinned
    pinned = Hybrid(bb, rec, BrownianBridge(), *stds, layer=LAYER, sampler_steps=4, first_state=first)
    rec.conds.clear()
    h = pinned.hidden(ids)
    assert torch.equal(h[:, 0], first.expand(2, -1))
    assert not torch.allclose(h[:, 1:], free[:, 1:])  # the zeroed condition at 0 is seen later
    assert all(float(c[:, 0].abs().max()) == 0.0 for _, c in rec.conds)
    kw = dict(seed=2, batch_size=2)
    assert torch.equal(pinned.generate(2, 8, **kw), pinned.generate(2, 8, cached=False, **kw))
    # in cached decoding, only the chunk that holds position 0 is zeroed there
    assert all(float(c[:, 0].abs().max()) > 0 for start, c in rec.conds if start > 0)
    with pytest.raises(ValueError, match="first_state"):
        Hybrid(bb, rec, BrownianBridge(), *stds, layer=LAYER, first_state=first[:3])


def test_marginal_rule_cached_decoding_equals_uncached(tiny_backbone, stds):
    hybrid = Hybrid(tiny_backbone, random_denoiser(tiny_backbone.hidden_size), BrownianBridge(),
                    *stds, layer=LAYER, sampler_steps=4, rule="marginal")
    kw = dict(temperature=1.0, seed=7, batch_size=2)
    cached = hybrid.decode(3, 12, cached=True, **kw)
    assert torch.equal(cached.tokens, hybrid.generate(3, 12, cached=False, **kw))
    # the rule changes the samples (the test would be vacuous if it were ignored)
    assert not torch.equal(cached.tokens, make_hybrid(tiny_backbone, stds).generate(3, 12, **kw))


def test_timed_decoding_starts_after_a_warm_up(tiny_backbone, stds, monkeypatch):
    """The first stepper call pays the start-up (on a GPU: CUDA context, kernels): it runs in a
    warm-up before the clock starts, and the tokens are those of a decode without one."""
    import dihal.replace.hybrid as hy

    clock = {"now": 0.0, "calls": 0}
    monkeypatch.setattr(hy.time, "perf_counter", lambda: clock["now"])
    hybrid = make_hybrid(tiny_backbone, stds, eta=1.0)
    real = hybrid.stepper

    def slow_first(cached=True, seed=0):
        step = real(cached, seed)

        def timed(ids):
            clock["calls"] += 1
            if clock["calls"] == 1:
                clock["now"] += 100.0  # the start-up cost
            return step(ids)
        return timed

    monkeypatch.setattr(hybrid, "stepper", slow_first)
    warm = hy.autoregress(lambda b, s: hybrid.stepper(True, s), torch.tensor([1]), 3, 5,
                          temperature=1.0, seed=2, batch_size=3, device="cpu")
    assert warm.seconds == 0.0 and clock["calls"] == hy.WARMUP_STEPS + 5
    clock.update(now=0.0, calls=0)
    cold = hy.autoregress(lambda b, s: hybrid.stepper(True, s), torch.tensor([1]), 3, 5,
                          temperature=1.0, seed=2, batch_size=3, device="cpu", warmup_steps=0)
    assert cold.seconds == 100.0
    assert torch.equal(warm.tokens, cold.tokens)
