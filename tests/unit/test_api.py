"""The public API (dihal.api) on the tiny backbone: greedy decoding is the hybrid's argmax path,
sampling with top_p = 1 is the eval's sampling, a seed gives the same tokens, top-p keeps the
nucleus only; scores are the hybrid's next-token NLL; a saved hybrid loads to the same outputs
and is refused on another backbone, naming both; a prompt longer than a model takes is
refused; the ridge control and the in-memory locate."""

import math
import re
from dataclasses import replace

import pytest
import torch

from dihal.api import (
    BackboneMismatchError,
    ContextLengthError,
    DihalHybrid,
    SamplingConfig,
    SavedHybridError,
    backbone_model,
    control_model,
    locate,
    score_texts,
)
from dihal.api.sampling import nucleus
from dihal.bridge.data import Standardizer
from dihal.config import BridgeProtocol
from dihal.replace.control_hybrids import RidgeMap, bridge_hybrid, ridge_hybrid
from dihal.replace.hybrid import next_token_nll
from dihal.results import BridgeHparams, TrainedBridge
from tests.tiny import WORDS, build_model, trained_bridge

LAYER = 2
TEXTS = ["the world was new and the people were good", "one of them said that it is so"]


@pytest.fixture(scope="module")
def hybrid(tiny_backbone):
    return DihalHybrid(tiny_backbone, trained_bridge(tiny_backbone, LAYER))


def _prompt(bb, n: int, seed: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return [bb.bos_id] + torch.randint(4, len(bb.tokenizer), (n - 1,), generator=g).tolist()


def test_greedy_decoding_follows_the_hybrids_argmax_path(hybrid, tiny_backbone):
    prompt = _prompt(tiny_backbone, 5)
    out = hybrid.generate(prompt, max_new_tokens=10, stop_at_eos=False)
    assert out.prompt_ids == [prompt] and len(out.new_ids[0]) == 10
    # the hybrid's own decoder at temperature 0 (its argmax), cached
    ref = hybrid.core.decode(1, 10, temperature=0.0, seed=0, prompt=prompt)
    assert out.sequences[0] == ref.tokens[0].tolist()
    # and, independently, each new token is the argmax of the whole sequence's logits so far
    ids = torch.tensor(out.sequences)
    for j in range(len(prompt), ids.shape[1]):
        assert int(hybrid.core.logits(ids[:, :j])[0, -1].argmax()) == int(ids[0, j])
    # the backbone answers the same call with its own argmax path
    bb_out = backbone_model(tiny_backbone).generate(prompt, max_new_tokens=6, stop_at_eos=False)
    ids = torch.tensor(bb_out.sequences)
    for j in range(len(prompt), ids.shape[1]):
        assert int(tiny_backbone.model(ids[:, :j]).logits[0, -1].argmax()) == int(ids[0, j])


@pytest.mark.parametrize("rule", ["ancestral", "marginal"])
def test_sampling_with_top_p_1_is_the_evals_sampling(hybrid, tiny_backbone, rule):
    """One prompt, top_p = 1: the tokens the eval's decoder samples after it (same seed, same
    uniforms, the marginal rule's noise seeded alike), at another K than the protocol's."""
    prompt = _prompt(tiny_backbone, 4, seed=1)
    out = hybrid.generate(prompt, max_new_tokens=12, do_sample=True, temperature=0.9, seed=5,
                          stop_at_eos=False, sampler_steps=2, rule=rule)
    ref = bridge_hybrid(tiny_backbone, hybrid.trained, sampler_steps=2, rule=rule).decode(
        1, 12, temperature=0.9, seed=5, prompt=prompt)
    assert out.sequences[0] == ref.tokens[0].tolist()
    assert out.model == "DiHAL (l=2, K=2" + (" marginal" if rule == "marginal" else "") + ")"
    assert out.settings["sampler_steps"] == 2 and out.settings["rule"] == rule


def test_a_seed_gives_the_same_tokens_whatever_the_other_prompts(hybrid, tiny_backbone):
    prompts = [_prompt(tiny_backbone, 3, seed=s) for s in range(3)]
    kw = dict(max_new_tokens=12, do_sample=True, seed=7, stop_at_eos=False)
    first = hybrid.generate(prompts, **kw)
    assert hybrid.generate(prompts, **kw).new_ids == first.new_ids
    assert hybrid.generate(prompts[:1], **kw).new_ids == first.new_ids[:1]
    other = hybrid.generate(prompts, **{**kw, "seed": 8})
    assert other.new_ids != first.new_ids
    # the backbone with the same seed draws the same uniforms: a paired sample, not the same one
    assert backbone_model(tiny_backbone).generate(prompts, **kw).new_ids != first.new_ids


def test_top_p_keeps_the_nucleus_only(hybrid, tiny_backbone):
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()

    def kept(p: float, t: float = 1.0) -> list[bool]:
        return torch.isfinite(nucleus(logits, p, t))[0].tolist()

    assert kept(0.5) == [True, False, False, False]  # the first token alone reaches 0.5
    assert kept(0.7) == [True, True, False, False]
    assert kept(0.81) == [True, True, True, False]
    assert kept(1e-9) == [True, False, False, False]  # the most likely token always stays
    assert torch.equal(nucleus(logits, 1.0), logits)
    assert kept(0.7, 5.0) == [True, True, True, False]  # a flatter distribution: more kept
    # generation: a tiny top_p is greedy; every sampled token lies in its step's nucleus
    prompt = _prompt(tiny_backbone, 4, seed=2)
    greedy = hybrid.generate(prompt, max_new_tokens=8, stop_at_eos=False)
    assert hybrid.generate(prompt, max_new_tokens=8, do_sample=True, top_p=1e-9,
                           stop_at_eos=False).new_ids == greedy.new_ids
    out = hybrid.generate(prompt, max_new_tokens=16, do_sample=True, top_p=0.3,
                          temperature=1.5, seed=3, stop_at_eos=False)
    ids = torch.tensor(out.sequences)
    for j in range(len(prompt), ids.shape[1]):
        step = hybrid.core.logits(ids[:, :j])[:, -1]
        assert torch.isfinite(nucleus(step, 0.3, 1.5)[0, ids[0, j]])


def test_generation_stops_at_eos_and_keeps_it(tiny_backbone):
    """A backbone whose head always puts EOS first: each continuation is one token, the EOS,
    kept in the ids and dropped from the text."""
    model = backbone_model(tiny_backbone)
    head = tiny_backbone.model.lm_head
    bias = torch.zeros(head.out_features)
    bias[tiny_backbone.eos_id] = 1e4
    hook = head.register_forward_hook(lambda _m, _a, out: out + bias.to(out))
    try:
        out = model.generate(["the world", "one of"], max_new_tokens=5)
    finally:
        hook.remove()
    assert out.new_ids == [[tiny_backbone.eos_id]] * 2 and out.texts == ["", ""]


def test_sampling_settings_are_checked():
    with pytest.raises(ValueError, match="max_new_tokens must be an int >= 1"):
        SamplingConfig(max_new_tokens=0)
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        SamplingConfig(temperature=0.0)
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        SamplingConfig(top_p=1.5)
    with pytest.raises(ValueError, match="seed must be an int >= 0"):
        SamplingConfig(seed=-1)


def test_scores_are_the_hybrids_and_the_backbones_next_token_nll(hybrid, tiny_backbone):
    scores = hybrid.score(TEXTS)
    assert scores.models == [hybrid.name, "backbone"]
    for text, s in zip(TEXTS, scores.texts, strict=True):
        ids = torch.tensor([s.ids])
        assert s.ids[0] == tiny_backbone.bos_id and len(s.tokens) == len(text.split())
        assert s.mean_nll(hybrid.name) == pytest.approx(
            next_token_nll(hybrid.core.logits, ids), rel=1e-6)
        assert s.mean_nll("backbone") == pytest.approx(
            next_token_nll(lambda x: tiny_backbone.model(x).logits, ids), rel=1e-6)
    every = [v for s in scores.texts for v in s.nll[hybrid.name]]
    assert scores.perplexity(hybrid.name) == pytest.approx(math.exp(sum(every) / len(every)))
    assert scores.rows()[-1] == {"text": "all", "model": "backbone", "tokens": len(every),
                                 "nll": scores.nll("backbone"),
                                 "ppl": scores.perplexity("backbone")}
    assert scores.table().count("\n") == 2 + len(TEXTS)  # head, rule, a row a text, all
    assert "'world'" in scores.token_table(0)
    # another K scores another hybrid; a text with nothing to predict is refused by index
    assert hybrid.score(TEXTS, sampler_steps=1).models == ["DiHAL (l=2, K=1)", "backbone"]
    with pytest.raises(ValueError, match="text 1 .* no token after its BOS"):
        score_texts(["the world", ""], [hybrid])


def test_a_saved_hybrid_loads_to_the_same_outputs(hybrid, tiny_backbone, tmp_path):
    folder = hybrid.save(tmp_path / "saved")
    assert sorted(p.name for p in folder.iterdir()) == ["hybrid.json", "weights.safetensors"]
    again = DihalHybrid.load(folder, tiny_backbone)
    assert (again.name, again.layer, again.sampler_steps, again.rule) == (
        hybrid.name, hybrid.layer, hybrid.sampler_steps, hybrid.rule)
    prompts = ["the world was", [tiny_backbone.bos_id, 40, 41]]
    for kw in ({}, {"do_sample": True, "top_p": 0.9, "seed": 2}, {"sampler_steps": 2}):
        assert again.generate(prompts, max_new_tokens=6, **kw).new_ids == \
            hybrid.generate(prompts, max_new_tokens=6, **kw).new_ids
    assert again.score(TEXTS).texts == hybrid.score(TEXTS).texts
    hybrid.save(folder)  # a hybrid saved there before is replaced
    # a folder that is not a saved hybrid is never written over
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(SavedHybridError, match="is not a saved hybrid"):
        hybrid.save(tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    # weights changed since they were saved are refused before they are read
    weights = folder / "weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(SavedHybridError, match="its sha256 differs"):
        DihalHybrid.load(folder, tiny_backbone)
    with pytest.raises(SavedHybridError, match="has no hybrid.json"):
        DihalHybrid.load(tmp_path / "mine", tiny_backbone)


def test_loading_on_another_backbone_is_refused_naming_both(hybrid, tiny_backbone, tmp_path):
    from dihal.backbones import load_backbone

    other = load_backbone("llama", path=build_model(tmp_path / "other", "llama", seed=1),
                          cache_dir=tmp_path / "cache")
    folder = hybrid.save(tmp_path / "saved")
    with pytest.raises(BackboneMismatchError) as caught:
        DihalHybrid.load(folder, other)
    message = str(caught.value)
    assert tiny_backbone.weights.revision in message and other.weights.revision in message
    # a bridge whose hyper-parameters record its backbone is refused alike
    trained = trained_bridge(tiny_backbone, LAYER)
    recorded = TrainedBridge(trained.tensors, replace(trained.hparams, backbone="llama",
                                                      revision=tiny_backbone.weights.revision))
    assert DihalHybrid(tiny_backbone, recorded).layer == LAYER
    with pytest.raises(BackboneMismatchError, match="the bridge of layer 2 was made on"):
        DihalHybrid(other, recorded)
    # the same weights in another folder are the same backbone (identity by content)
    import shutil

    copy = load_backbone("llama", path=shutil.copytree(tiny_backbone.weights.path,
                                                       tmp_path / "copy"),
                         cache_dir=tmp_path / "cache")
    assert copy.weights.revision != tiny_backbone.weights.revision
    assert DihalHybrid.load(folder, copy).generate("the world", max_new_tokens=4).new_ids == \
        hybrid.generate("the world", max_new_tokens=4).new_ids


def test_a_prompt_longer_than_the_model_takes_is_refused(hybrid, tiny_backbone):
    assert hybrid.context == 32  # the bridge's denoiser: max_len 32
    with pytest.raises(ContextLengthError, match=r"prompt 1 is 30 tokens .* max_new_tokens=8: "
                       r"DiHAL \(l=2, K=4\) must take 37 positions, but it takes at most 32 "
                       r".*shorten the prompt to at most 25 tokens"):
        hybrid.generate(["the world", _prompt(tiny_backbone, 30)], max_new_tokens=8)
    with pytest.raises(ContextLengthError, match="lower max_new_tokens to at most 32"):
        hybrid.generate("the world", max_new_tokens=40)
    with pytest.raises(ContextLengthError, match="text 0 is 41 tokens"):
        hybrid.score(" ".join(WORDS[:40]))
    # the backbone takes its own max_position_embeddings
    assert backbone_model(tiny_backbone).generate(_prompt(tiny_backbone, 30),
                                                  max_new_tokens=8).n_new_tokens <= 8


def test_the_ridge_control_and_layer_drop_answer_the_same_calls(hybrid, tiny_backbone):
    d = tiny_backbone.hidden_size
    g = torch.Generator().manual_seed(0)
    ridge = RidgeMap(0.1 * torch.randn(d, d, generator=g), torch.randn(d, generator=g), 0.01)
    std = {"cond_std.mean": torch.zeros(d), "cond_std.std": torch.ones(d),
           "target_std.mean": torch.randn(d, generator=g), "target_std.std": torch.ones(d)}
    saved = TrainedBridge({"ridge.weight": ridge.weight, "ridge.bias": ridge.bias, **std},
                          BridgeHparams(LAYER, BridgeProtocol(), objective="ridge",
                                        ridge_lambda=0.01))
    model = control_model(tiny_backbone, saved)
    direct = ridge_hybrid(tiny_backbone, LAYER, ridge, Standardizer(std["cond_std.mean"],
                                                                    std["cond_std.std"]),
                          Standardizer(std["target_std.mean"], std["target_std.std"]))
    ids = torch.tensor([_prompt(tiny_backbone, 9)])
    torch.testing.assert_close(model.logits(ids), direct.logits(ids), rtol=0, atol=1e-6)
    assert model.name == "ridge (l=2)"
    assert model.generate("the world", max_new_tokens=4).settings["seed"] == 0
    assert hybrid.layer_drop().generate("the world", max_new_tokens=4).model == "layer-drop (l=2)"
    with pytest.raises(ValueError, match="not a control's"):
        control_model(tiny_backbone, hybrid.trained)
    with pytest.raises(ValueError, match="ridge control, not a bridge"):
        DihalHybrid(tiny_backbone, saved)


def test_locate_on_texts_returns_the_proxies_the_score_and_l_star(tiny_backbone):
    texts = [" ".join(WORDS[i:i + 40]) for i in range(0, 120, 20)]
    located = locate(tiny_backbone, texts, seq_len=32)
    assert [r.layer for r in located.rows] == list(range(tiny_backbone.n_layers))
    best = min((r for r in located.rows if r.candidate), key=lambda r: r.rank)
    assert located.l_star == best.layer == located.selected["none"]
    stream = sum(len(t.split()) + 1 for t in texts)  # a token a word, an EOS a text
    assert located.n_sequences == stream // 31 and located.n_tokens == 31 * (stream // 31)
    table = located.table()
    assert f"| {located.l_star} (l*) |" in table and "m_curv" in table and "| S |" in table
    assert located.plot_png.startswith(b"\x89PNG") and len(located.predictors) == 3
    assert locate(tiny_backbone, texts, seq_len=32).rows == located.rows  # seeded
    with pytest.raises(ValueError, match="at least 32 tokens"):
        locate(tiny_backbone, ["the world"])


def test_a_long_decode_reports_its_progress(hybrid, monkeypatch):
    from dihal.api import sampling

    monkeypatch.setattr(sampling, "PROGRESS_EVERY_S", 0.0)  # every token is "long enough"
    said: list[str] = []
    hybrid.generate(["the world", "one of"], max_new_tokens=3, stop_at_eos=False,
                    progress=said.append)
    steps = [re.sub(r" \([\d.]+ s\)$", "", s) for s in said]
    expected = []
    for i in (1, 2):
        expected += [f"DiHAL (l=2, K=4): prompt {i}/2: {j}/3 tokens" for j in (1, 2, 3)]
        expected.append(f"DiHAL (l=2, K=4): prompt {i}/2 done")
    assert steps == expected


def test_the_sampler_settings_are_checked(hybrid):
    with pytest.raises(ValueError, match="steps must be an int >= 1"):
        hybrid.generate("the world", max_new_tokens=2, sampler_steps=0)
    with pytest.raises(ValueError, match="sampler rule must be one of"):
        hybrid.generate("the world", max_new_tokens=2, rule="ddim")
    assert hybrid.at(sampler_steps=hybrid.sampler_steps) is hybrid  # its own settings: itself


def test_side_by_side_never_cuts_a_models_name_on_a_narrow_terminal():
    from dihal.api import side_by_side
    from dihal.api.sampling import Generated

    class Words:  # a tokenizer that decodes ids as words
        def decode(self, ids, skip_special_tokens=True):
            return " ".join(f"w{i}" for i in ids)

    names = ["backbone", "DiHAL (l=2, K=2 marginal)", "layer-drop (l=2)"]
    gens = [Generated(name, [[1, 2]], [[3, 4, 5]], ["some words here"], 0.3, {})
            for name in names]
    text = side_by_side(gens, Words(), width=40)  # 3 columns of 16 at 40 characters
    head = text.splitlines()[1]
    assert [cell.strip() for cell in head.split(" | ")] == names
    assert text.splitlines()[0] == "prompt 1: 'w1 w2'"
