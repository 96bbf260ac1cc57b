"""The judge: chunked LM head == full logits, BOS handling, loading errors; the real Gemma judge
prefers natural English to the same words shuffled."""

import math
import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from dihal.evaluate.judge import Judge, JudgeNotFoundError, load_judge
from dihal.evaluate.metrics import gen_ppl
from dihal.identity import folder_revision

TEXTS = [
    "the man said that he was in the state",
    "",
    "people made good time",
    "it was",
    "the world is very little and the people are good because they make it so",
]


@pytest.fixture(scope="module")
def tiny_judge(tiny_llama_dir, tmp_path_factory):
    return load_judge(str(tiny_llama_dir), cache_dir=tmp_path_factory.mktemp("judge-cache"))


def reference_nll(judge, texts):
    """Unbatched, unchunked: full logits of each text on its own."""
    total, count = 0.0, 0
    for text in texts:
        ids = torch.tensor([judge.encode(text)])
        if ids.shape[1] < 2:
            continue
        with torch.no_grad():
            logits = judge.model(ids).logits[0, :-1]
        total += float(F.cross_entropy(logits, ids[0, 1:], reduction="sum"))
        count += ids.shape[1] - 1
    return total, count


def test_chunked_batched_nll_equals_full_logits(tiny_judge):
    expected, count = reference_nll(tiny_judge, TEXTS)
    assert count == 9 + 0 + 4 + 2 + 15  # words (BOS not scored)
    for chunk, batch in [(3, 2), (512, 8), (1, 1)]:
        judge = Judge(tiny_judge.model, tiny_judge.tokenizer, chunk_size=chunk, batch_size=batch)
        total, n = judge.nll(TEXTS)
        assert n == count
        assert total == pytest.approx(expected, rel=1e-5)
        # each text's own NLL, in the given order (batches are sorted by length inside)
        each = judge.nll_each(TEXTS)
        for text, (nll, k) in zip(TEXTS, each, strict=True):
            want, want_k = reference_nll(tiny_judge, [text])
            assert k == want_k and nll == pytest.approx(want, rel=1e-5, abs=1e-9)


def test_one_judge_pass_scores_every_prefix_as_the_judge_would(tiny_judge):
    """The length-controlled Gen.PPL reads a text's first L token losses from the pass over
    the whole text (dihal.evaluate.generation.PrefixScorer): the same numbers as scoring the cut ids,
    and the judge runs once."""
    from dihal.evaluate.generation import PrefixScorer
    from dihal.evaluate.metrics import gen_ppl_first_tokens

    judge = Judge(tiny_judge.model, tiny_judge.tokenizer, batch_size=2)
    calls = []
    real = judge._forward
    judge._forward = lambda seqs, **kw: calls.append(len(seqs)) or real(seqs, **kw)
    scorer = PrefixScorer(judge, TEXTS)
    assert calls == [4]  # the four non-empty texts, once
    for length in (1, 3, 9):
        got, want = gen_ppl_first_tokens(scorer, TEXTS, length), gen_ppl_first_tokens(
            tiny_judge, TEXTS, length)
        assert (got.n_short, got.gen.n_texts, got.gen.n_tokens) == (
            want.n_short, want.gen.n_texts, want.gen.n_tokens)
        assert got.gen.nll == pytest.approx(want.gen.nll, rel=1e-5)
    assert gen_ppl(scorer, TEXTS).ppl == pytest.approx(gen_ppl(tiny_judge, TEXTS).ppl, rel=1e-6)
    assert calls == [4]  # no further pass: every sequence was a text or a prefix of one
    # a sequence that starts no text is scored by the judge itself
    (other,) = scorer.nll_each(["an unrelated text"])
    assert calls == [4, 1] and other == pytest.approx(tiny_judge.nll_each(["an unrelated text"])[0])


def test_one_pass_gives_the_losses_and_the_features_of_two(tiny_judge):
    """score_ids: the token losses of token_nll_each and the features of features() from one
    forward; PrefixScorer hands MAUVE the features of that pass, so scoring a text set (its
    Gen.PPL, its length-controlled Gen.PPL and its features) runs the judge once."""
    from dihal.evaluate.generation import PrefixScorer

    judge = Judge(tiny_judge.model, tiny_judge.tokenizer, batch_size=2)
    ids = [judge.encode(t) for t in TEXTS]
    tokens, feats = judge.score_ids(ids)
    for got, want in zip(tokens, judge.token_nll_each(ids), strict=True):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(feats, judge.features(TEXTS))
    calls = []
    real = judge._forward
    judge._forward = lambda seqs, **kw: calls.append(kw) or real(seqs, **kw)
    scorer = PrefixScorer(judge, TEXTS)
    kept = [t for t in TEXTS if t.strip()]
    torch.testing.assert_close(scorer.features(kept), feats[[i for i, t in enumerate(TEXTS)
                                                             if t.strip()]])
    assert calls == [{"losses": True, "features": True}]
    # a text outside the pass: the judge computes its features (and only those)
    scorer.features(["an unrelated text"])
    assert calls[1:] == [{"losses": False, "features": True}]


def test_features_are_the_last_token_state_of_each_text(tiny_judge):
    judge = Judge(tiny_judge.model, tiny_judge.tokenizer, batch_size=2)
    feats = judge.features(TEXTS)
    assert feats.shape == (len(TEXTS), tiny_judge.model.config.hidden_size)
    for text, row in zip(TEXTS, feats, strict=True):
        ids = torch.tensor([judge.encode(text)])
        with torch.no_grad():
            want = judge.model.get_decoder()(input_ids=ids).last_hidden_state[0, -1]
        torch.testing.assert_close(row, want.float(), rtol=1e-4, atol=1e-5)


def test_bos_is_added_once_and_not_scored(tiny_judge):
    tok = tiny_judge.tokenizer
    ids = tiny_judge.encode("the world")
    assert ids[0] == tok.bos_token_id and ids[1] != tok.bos_token_id and len(ids) == 3
    assert tiny_judge.encode("") == [tok.bos_token_id]
    assert tiny_judge.nll([""]) == (0.0, 0)


def test_gen_ppl_skips_and_counts_empty_texts(tiny_judge):
    res = gen_ppl(tiny_judge, TEXTS + ["   "])
    total, n = tiny_judge.nll(TEXTS)
    assert (res.n_texts, res.n_empty, res.n_tokens) == (4, 2, n)
    assert res.ppl == pytest.approx(math.exp(total / n))
    assert math.isnan(gen_ppl(tiny_judge, ["", " "]).ppl)


def test_judge_records_what_was_loaded(tiny_judge, tiny_llama_dir):
    info = tiny_judge.info()
    assert info.revision == folder_revision(tiny_llama_dir)  # the folder by its content
    assert info.architecture == "LlamaForCausalLM"
    assert type(info).from_dict(info.to_dict()) == info  # as the eval records it


def test_missing_judge_names_the_id_and_the_fix(tmp_path):
    with pytest.raises(JudgeNotFoundError, match=r"'nobody/no-such-judge'.*hf download"):
        load_judge("nobody/no-such-judge", cache_dir=tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(JudgeNotFoundError, match="no config.json"):
        load_judge(str(tmp_path / "empty"), cache_dir=tmp_path)


@pytest.mark.slow
def test_embedded_gemma_judge_prefers_natural_text():
    judge = load_judge(cache_dir=Path(".dihal/artifacts/cache/models"))  # shared: dequantise once
    assert judge.model.config.vocab_size == 262_144
    assert "sha256=a5fd3b62" in judge.revision
    text = ("The old bridge across the river was built of stone, and every morning the "
            "farmers crossed it on their way to the market in town.")
    words = text.split()
    random.Random(0).shuffle(words)
    natural = gen_ppl(judge, [text]).ppl
    shuffled = gen_ppl(judge, [" ".join(words)]).ppl
    assert natural < 60 and shuffled > 5 * natural
    # chunked LM head on a short text equals the model's own logits
    total, _ = Judge(judge.model, judge.tokenizer, chunk_size=7).nll([text])
    assert total == pytest.approx(reference_nll(judge, [text])[0], rel=1e-4)


def test_each_backbone_has_a_judge_other_than_itself():
    from dihal.errors import JudgeChoiceError
    from dihal.registry import BACKBONES
    from resources import JudgeResource

    default = JudgeResource(name="")
    assert default.judge_for("smollm2") == "gemma3-270m"
    assert default.judge_for("gemma3") == "smollm2"
    assert all(default.judge_for(b) != b for b in BACKBONES)
    assert JudgeResource(name="gpt2-large").judge_for("gemma3") == "gpt2-large"
    with pytest.raises(JudgeChoiceError, match="'smollm2' is the backbone whose samples"):
        JudgeResource(name="smollm2").judge_for("smollm2")


@pytest.mark.slow
def test_a_backbone_name_loads_that_backbone_as_the_judge():
    from dihal.evaluate.judge import load_judge

    judge = load_judge("smollm2", cache_dir=Path(".dihal/artifacts/cache/models"))
    assert judge.name == "smollm2" and "sha256=b179c952" in judge.revision
    assert type(judge.model).__name__ == "LlamaForCausalLM"
    (nll, n), = judge.nll_each(["The cat sat on the mat."])
    assert n > 0 and 0 < nll / n < 10
