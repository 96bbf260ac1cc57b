"""A model that loads but is not the model: a folder saved without some of its weights (which
transformers would draw at random at each load), and a config.json carrying attention options
its family's forward ignores (which the replayed upper layers would read). Both are refused
at load, the first by the table of missing weights, the second by the replay probe; and the
options a family ignores are not read, so such a model loads and replays exactly."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from dihal import backbones
from dihal.backbones import load_backbone
from dihal.errors import ModelLoadError
from dihal.evaluate.judge import load_judge
from dihal.registry import declare
from tests.tiny import build_model

IGNORED_OPTIONS = {"sliding_window": 4, "final_logit_softcapping": 1.0}  # both bite at 12 tokens


def untied_without_head(folder):
    """What a user's export does when it drops the LM head of an untied model: the weights
    file without `lm_head.weight`, `tie_word_embeddings: false` in config.json."""
    import transformers as tf

    from tests.tiny import build_tokenizer

    tok = build_tokenizer(folder)
    torch.manual_seed(0)
    tf.LlamaForCausalLM(tf.LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False)).save_pretrained(folder)
    weights = load_file(folder / "model.safetensors")
    del weights["lm_head.weight"]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def drop_tensors(folder, keep) -> list[str]:
    """Remove every tensor of the weights file `keep` refuses; the names removed."""
    weights = load_file(folder / "model.safetensors")
    gone = sorted(k for k in weights if not keep(k))
    save_file({k: v for k, v in weights.items() if keep(k)}, folder / "model.safetensors",
              metadata={"format": "pt"})
    return gone


def with_options(folder, **options):
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, **options}))
    return folder


def test_a_folder_saved_without_its_untied_head_is_refused_naming_it(tmp_path):
    """Before: it loaded with a head drawn at random at each load (two loads of the folder
    disagreed by up to 0.55 nats, top-1 agreement 0), the chain ending with rc 0."""
    folder = untied_without_head(tmp_path / "model")
    spec = declare("headless", {"model": str(folder)}, "test")
    for load in (lambda: load_backbone(spec, cache_dir=tmp_path / "cache"),
                 lambda: load_judge(str(folder), cache_dir=tmp_path / "cache")):
        with pytest.raises(ModelLoadError) as err:
            load()
        msg = str(err.value)
        assert str(folder.resolve()) in msg and "lm_head.weight" in msg
        assert "1 of its" in msg and "save_pretrained" in msg


def test_a_checkpoint_lacking_many_tensors_names_the_first_few_and_the_count(tmp_path):
    folder = build_model(tmp_path / "model", "llama")
    gone = drop_tensors(folder, keep=lambda k: ".mlp." not in k)  # 3 x 4 layers
    with pytest.raises(ModelLoadError) as err:
        load_backbone(declare("no_mlp", {"model": str(folder)}, "test"), cache_dir=tmp_path)
    msg = str(err.value)
    assert f"{len(gone)} of its" in msg and len(gone) == 12
    assert sum(k in msg for k in gone) == 5 and "..." in msg  # the first five, then the count


def test_a_tied_head_and_computed_buffers_are_not_missing(tmp_path):
    """A tied head is not in the file (it is the embedding), rotary inv_freq never is (the
    model computes it): such a folder loads."""
    folder = build_model(tmp_path / "model", "llama")
    assert "lm_head.weight" not in load_file(folder / "model.safetensors")
    bb = load_backbone(declare("tied", {"model": str(folder)}, "test"), cache_dir=tmp_path)
    assert bb.model.lm_head.weight is bb.decoder.embed_tokens.weight


@pytest.mark.parametrize("arch", ["llama", "olmo2"])
def test_options_a_family_ignores_are_not_read_by_the_replay(tmp_path, arch):
    """A Llama or OLMo 2 config.json carrying a `sliding_window` shorter than the sequence and a
    `final_logit_softcapping`: the model's forward ignores both, and so do the replayed upper
    layers, uncached and cached. Before: the replay masked a window and capped the logits, up
    to 0.66 logits away from the model on these tiny ones (0.34-0.42 nats/token on real ones)."""
    folder = with_options(build_model(tmp_path / arch, arch), **IGNORED_OPTIONS)
    bb = load_backbone(declare(f"odd_{arch}", {"model": str(folder)}, "test"), cache_dir=tmp_path)
    assert bb.model.config.sliding_window == 4  # the config is left as it was written
    ids = torch.randint(4, len(bb.tokenizer), (2, 12), generator=torch.Generator().manual_seed(0))
    full = bb.model(ids).logits
    hs = bb.hidden_states(ids)
    for layer in range(bb.n_layers):
        torch.testing.assert_close(bb.run_upper(hs[layer], layer), full, rtol=0, atol=1e-5)
    cache = bb.new_cache()
    first = bb.run_upper(hs[2][:, :6], 2, cache=cache)
    steps = [bb.run_upper(hs[2][:, i : i + 1], 2, cache=cache, start_pos=i) for i in range(6, 12)]
    torch.testing.assert_close(torch.cat([first, *steps], 1), full, rtol=0, atol=1e-5)


def test_the_load_probe_refuses_a_replay_that_is_not_the_model(tmp_path, monkeypatch):
    """With the options read whatever the family (as before), the probe run at load finds the
    replay apart from the model and refuses it, naming the layer and the nats."""
    folder = with_options(build_model(tmp_path / "llama", "llama"), **IGNORED_OPTIONS)
    monkeypatch.setattr(backbones, "as_its_forward_reads", lambda config: config)
    with pytest.raises(ModelLoadError, match=r"layer 2 .*nats/token.*max \|logit difference\|"):
        load_backbone(declare("odd", {"model": str(folder)}, "test"), cache_dir=tmp_path)


def test_the_judge_scores_as_its_model_where_its_config_carries_ignored_options(tmp_path):
    """A Llama judge whose config.json carries a `final_logit_softcapping`: its NLL is the
    model's own (before: the judge capped the logits the model does not)."""
    import torch.nn.functional as F

    folder = with_options(build_model(tmp_path / "judge", "llama"), **IGNORED_OPTIONS)
    judge = load_judge(str(folder), cache_dir=tmp_path)
    ids = [judge.tokenizer.bos_token_id, 5, 9, 11, 7, 6, 12, 8, 10, 13, 4, 5]
    logits = judge.model(torch.tensor([ids])).logits[0, :-1]
    own = F.cross_entropy(logits, torch.tensor(ids[1:]), reduction="none").double()
    torch.testing.assert_close(judge.token_nll_each([ids])[0], own, rtol=0, atol=1e-5)


def test_the_judge_probe_refuses_scores_that_are_not_its_models(tmp_path, monkeypatch):
    from dihal.evaluate import judge as judge_module

    folder = with_options(build_model(tmp_path / "judge", "llama"), **IGNORED_OPTIONS)
    monkeypatch.setattr(judge_module, "final_logit_cap",
                        lambda config: config.final_logit_softcapping)
    with pytest.raises(ModelLoadError, match=r"judge .* nats/token"):
        load_judge(str(folder), cache_dir=tmp_path)


def test_a_copied_complete_folder_loads_as_the_same_model(tmp_path, tiny_llama_dir):
    """The checks refuse nothing sound: a complete copy loads, and two loads agree exactly."""
    folder = shutil.copytree(tiny_llama_dir, tmp_path / "model")
    spec = declare("copy", {"model": str(folder)}, "test")
    a = load_backbone(spec, cache_dir=tmp_path)
    b = load_backbone(spec, cache_dir=tmp_path)
    ids = torch.arange(4, 16).unsqueeze(0)
    assert torch.equal(a.model(ids).logits, b.model(ids).logits)
