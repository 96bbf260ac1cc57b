"""One sampling pass for the reconstruction error and the hybrid NLL: measure_bridge and
ridge_control give the numbers of the two passes they replace (the reconstruction error from
held-out pairs, then the hybrid's logits sampled again), built here from the public pieces as
the code computed them before; where the dump rounds hs[0] (float16), the one pass's
reconstruction error is reconstruction_error's on the hybrid's own condition."""

import math
from dataclasses import replace

import pytest
import torch

from dihal.bridge import REGRESSION_T_GRID, BrownianBridge, reconstruction_error, validation_loss
from dihal.bridge.data import BridgeData
from dihal.bridge.denoiser import denoiser_config_of
from dihal.bridge.loss import squared_error
from dihal.bridge.measures import ReconstructionPool
from dihal.bridge.sampler import draws_noise
from dihal.config import BridgeProtocol, ExtractConfig
from dihal.locate.extract import extract_hidden_states, state_spec
from dihal.replace.control_hybrids import (
    PositionwiseHybrid,
    fit_ridge,
    held_out_nll,
    ridge_control,
)
from dihal.replace.hybrid import Hybrid, next_token_nll, top1_agreement
from dihal.replace.stage import (
    load_layer_data,
    measure_bridge,
    sequence_nll,
    split_halves,
    stored_pairs,
)
from storage.states import StateReader, StateWriter
from tests.tiny import random_sequences, randomised_denoiser

LAYER = 2
PROTOCOL = BridgeProtocol(d_model=32, n_layers=1, n_heads=2, batch_size=4, sampler_steps=4,
                          eval_sequences=6, pin_first=True)


def _dump(bb, seqs, folder, dtype: str):
    """A finalised dump of `seqs` with every layer stored in `dtype`; its reader."""
    cfg = ExtractConfig(batch_size=2, dtype=dtype)
    w = StateWriter(folder / "work", state_spec(bb, bb.weights.revision, seqs, cfg), "fp-1",
                    tokens=seqs, attrs=bb.info().to_dict())
    extract_hidden_states(bb, seqs, w, cfg)
    w.finalize(folder / "final")
    return StateReader(folder / "final")


@pytest.fixture(scope="module")
def dumps(tiny_backbone, tmp_path_factory):
    """{storage dtype: (reader, token ids)}: random sequences that start with BOS (so the
    bridge pins position 0), dumped in float32 (hs[0] is then the embedding itself) and in
    float16 (the default: hs[0] rounded)."""
    seqs = random_sequences(tiny_backbone, n_train=8, n_val=6, T=10)
    for ids in seqs.values():
        ids[:, 0] = tiny_backbone.bos_id
    root = tmp_path_factory.mktemp("measure-pass")
    return {dtype: (_dump(tiny_backbone, seqs, root / dtype, dtype), seqs)
            for dtype in ("float32", "float16")}


def _layer_data(reader):
    return load_layer_data(reader, LAYER, PROTOCOL, stored_pairs(reader, "train", LAYER))


def _denoiser(bb):
    return randomised_denoiser(denoiser_config_of(PROTOCOL, bb.hidden_size, 10), seed=3)


def _scores(logits_of, val_ids, reference, batch_size):
    """The held-out scoring loop as measure_bridge ran it over a hybrid's logits."""
    nll_h = nll_b = agree = 0.0
    n, each = 0, []
    for lo in range(0, len(val_ids), batch_size):
        ids = val_ids[lo : lo + batch_size]
        lh = logits_of(ids).float()
        w = ids.shape[0]
        nll_b += float(reference[1][lo : lo + w].mean()) * w
        nll_h += next_token_nll(lambda _, x=lh: x, ids) * w
        each += sequence_nll(lh, ids)
        agree += top1_agreement(lh, reference[0][lo : lo + w]) * w
        n += w
    return {"hybrid_nll": nll_h / n, "backbone_nll": nll_b / n, "top1_agreement": agree / n,
            "hybrid_ppl": math.exp(nll_h / n), "backbone_ppl": math.exp(nll_b / n),
            **split_halves(each)}


def _two_passes(bb, den, data, rule: str, batch_size: int) -> dict:
    """measure_bridge before the one pass: reconstruction_error on the held-out pairs, then
    the hybrid sampled again for its logits."""
    process = BrownianBridge(sigma=PROTOCOL.sigma)
    seed = PROTOCOL.seed
    out = {"val_loss": validation_loss(den, data.val, process, seed=seed),
           "t1_loss": validation_loss(den, data.val, process, REGRESSION_T_GRID, seed=seed),
           "recon_error": reconstruction_error(den, data.val, process, steps=PROTOCOL.sampler_steps,
                                               seed=seed, rule=rule)}
    hybrid = Hybrid(bb, den, process, data.cond_std, data.target_std, LAYER,
                    sampler_steps=PROTOCOL.sampler_steps, first_state=data.first_state, rule=rule,
                    noise_seed=seed)
    return {**out, **_scores(hybrid.logits, data.val_ids, data.reference, batch_size)}


@pytest.mark.parametrize(("rule", "batch_size"), [("ancestral", 8), ("marginal", 8),
                                                 ("marginal", 2)])
def test_one_pass_gives_the_two_passes_numbers(tiny_backbone, dumps, rule, batch_size):
    """On a float32 dump (the held-out condition is the hybrid's own), every number of the
    bridge's measurement is the two passes' to the bit; under the marginal rule (its noise
    drawn, a stream per measure) too, where it still samples twice."""
    reader, _ = dumps["float32"]
    data, den = _layer_data(reader), _denoiser(tiny_backbone)
    assert data.first_state is not None and data.reference is not None
    own = data.cond_std.apply(tiny_backbone.embed(data.val_ids))
    assert torch.equal(own[:, 1:], data.val.cond[:, 1:])  # position 0: pinned to 0
    got = measure_bridge(tiny_backbone, den, data, PROTOCOL, batch_size=batch_size, rule=rule)
    want = _two_passes(tiny_backbone, den, data, rule, batch_size)
    assert got == want
    assert 0.0 < got["recon_error"] and got["hybrid_nll_select"] != got["hybrid_nll_judge"]


@pytest.mark.parametrize("batch_size", [2, 4])
def test_batches_smaller_than_the_reconstructions_move_it_by_rounding_only(
        tiny_backbone, dumps, batch_size):
    """reconstruction_error samples 32 held-out sequences at a time, the one pass the NLL's
    batch: a denoiser's rows may round differently in another batch size (at these tiny
    sizes they can), so the reconstruction error may move in its last digits; the NLL's
    numbers stay the two passes' to the bit."""
    reader, _ = dumps["float32"]
    data, den = _layer_data(reader), _denoiser(tiny_backbone)
    got = measure_bridge(tiny_backbone, den, data, PROTOCOL, batch_size=batch_size)
    want = _two_passes(tiny_backbone, den, data, "ancestral", batch_size)
    assert got.pop("recon_error") == pytest.approx(want.pop("recon_error"), rel=1e-5)
    assert got == want


def test_on_a_float16_dump_only_the_condition_of_the_reconstruction_moves(tiny_backbone, dumps):
    """The dump rounds hs[0] to float16; the hybrid embeds the tokens itself. The one pass
    samples from the hybrid's condition: its NLL is the two passes' to the bit, and its
    reconstruction error is reconstruction_error's on the held-out pairs with that condition
    (exactly), close to the one on the rounded condition."""
    reader, _ = dumps["float16"]
    data, den = _layer_data(reader), _denoiser(tiny_backbone)
    got = measure_bridge(tiny_backbone, den, data, PROTOCOL)  # one batch, as reconstruction's
    want = _two_passes(tiny_backbone, den, data, "ancestral", 8)
    assert {k: v for k, v in got.items() if k != "recon_error"} == {
        k: v for k, v in want.items() if k != "recon_error"}
    own = data.cond_std.apply(tiny_backbone.embed(data.val_ids).float())
    own[:, 0] = 0.0  # position 0 pinned, as in the stored pairs
    assert not torch.equal(own, data.val.cond)  # the rounding is there to be seen
    recon_own = reconstruction_error(den, replace(data.val, cond=own), BrownianBridge(),
                                     steps=PROTOCOL.sampler_steps)
    assert got["recon_error"] == recon_own
    assert got["recon_error"] == pytest.approx(want["recon_error"], rel=1e-3)


def _ridge_two_passes(bb, data, batch_size=8):
    """ridge_control before the one pass: the ridge map of the stored held-out condition
    for the reconstruction error, then the ridge hybrid's logits."""
    ridge = fit_ridge(data.train, data.val)
    z, m = ridge(data.val.cond)[data.val.mask], data.val.target[data.val.mask]
    recon = math.sqrt(float(((z - m).double() ** 2).sum() / (m.double() ** 2).sum()))
    hybrid = PositionwiseHybrid(bb, LAYER, ridge.raw(data.cond_std, data.target_std), "ridge",
                                data.first_state)
    return {"recon_error": recon, **_scores(hybrid.logits, data.val_ids, data.reference,
                                            batch_size)}, hybrid


def test_ridge_control_one_pass_gives_the_two_passes_numbers(tiny_backbone, dumps):
    """The ridge control's NLL and top-1 agreement are the two passes' to the bit; its
    reconstruction error differs only by the pooling (float32 sums in blocks of sequences,
    as the bridge's, instead of float64 over every token)."""
    reader, seqs = dumps["float32"]
    got = ridge_control(tiny_backbone, reader, LAYER, PROTOCOL, train_ids=seqs["train"],
                        extract=ExtractConfig(batch_size=2, dtype="float32")).metrics
    want, old = _ridge_two_passes(tiny_backbone, _layer_data(reader))
    for key in ("hybrid_nll", "backbone_nll", "top1_agreement", "hybrid_ppl", "backbone_ppl"):
        assert getattr(got, key) == want[key], key
    assert got.recon_error == pytest.approx(want["recon_error"], rel=1e-6)
    assert 0.0 < got.recon_error < 1.0  # a fitted map: closer to h_l than the zero map
    # held_out_nll (no pairs: the logits alone) is still the two passes' NLL
    assert held_out_nll(old, _layer_data(reader).val_ids, _layer_data(reader).reference) == {
        k: want[k] for k in ("hybrid_nll", "backbone_nll", "top1_agreement")}


def test_reconstruction_pool_does_not_depend_on_the_batches_it_is_fed():
    g = torch.Generator().manual_seed(0)
    z0, z = torch.randn(11, 5, 3, generator=g), torch.randn(11, 5, 3, generator=g)
    mask = torch.rand(11, 5, generator=g) > 0.3

    def pooled(cuts):
        pool = ReconstructionPool(block=4)
        for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
            pool.add(z[lo:hi], z0[lo:hi], mask[lo:hi])
        return pool.value()

    blocks = pooled([0, 4, 8, 11])
    assert pooled([0, 3, 8, 10, 11]) == blocks and pooled([0, 1, 2, 11]) == blocks
    # each block summed in float32, the blocks in float64: the pooled relative error
    err = sum(float(squared_error(z[i:i + 4], z0[i:i + 4], mask[i:i + 4])[0]) for i in (0, 4, 8))
    ref = sum(float(squared_error(0 * z0[i:i + 4], z0[i:i + 4], mask[i:i + 4])[0])
              for i in (0, 4, 8))
    assert blocks == pytest.approx(math.sqrt(err / ref), rel=1e-12)
    direct = ((z - z0)[mask].double() ** 2).sum() / (z0[mask].double() ** 2).sum()
    assert blocks == pytest.approx(math.sqrt(float(direct)), rel=1e-6)
    with pytest.raises(ValueError, match="at least one held-out sequence"):
        ReconstructionPool().value()


def test_a_sample_draws_noise_only_under_the_marginal_rule_or_eta():
    assert not draws_noise("ancestral", 16)  # the default: deterministic
    assert draws_noise("ancestral", 16, eta=1.0) and not draws_noise("ancestral", 1, eta=1.0)
    assert draws_noise("marginal", 2) and not draws_noise("marginal", 1)
    with pytest.raises(ValueError, match="eta"):
        draws_noise("marginal", 4, eta=0.5)


def test_held_out_scores_refuse_pairs_of_other_sequences(tiny_backbone, dumps):
    from dihal.replace.stage import held_out_scores

    reader, _ = dumps["float32"]
    data = _layer_data(reader)
    hybrid = Hybrid(tiny_backbone, _denoiser(tiny_backbone), BrownianBridge(), data.cond_std,
                    data.target_std, LAYER, sampler_steps=2, first_state=data.first_state)
    fewer = BridgeData(data.val.cond[:4], data.val.target[:4], data.val.mask[:4])
    with pytest.raises(ValueError, match="are not the held-out sequences"):
        held_out_scores(hybrid, data.val_ids, data.reference, val=fewer)
