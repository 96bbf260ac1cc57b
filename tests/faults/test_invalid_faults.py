"""Nothing invalid is recorded as done, and every refusal is one clean message naming the real
file or thing and the fix: a tokenizer that cannot separate documents, token ids outside the
vocabulary, fewer held-out sequences than the protocol asks, a dihal.toml that is not TOML or
holds an unknown key, a Hub text field of nulls, a model folder missing a weight shard or
holding no weights at all."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from dihal import registry
from dihal.errors import BackboneNotFoundError
from tests.tiny import (
    PROTOCOL,
    ROOT,
    TINY,
    hub_folder,
    hub_rows,
    make_docs,
    tiny_profile,
    write_shard,
)


def _failure(res) -> tuple[str, str]:
    """(class name, message) of a run's first step failure: a stage's clean refusal is a
    dagster Failure, an escaped exception keeps its own class."""
    (event,) = [e for e in res.all_events if e.event_type_value == "STEP_FAILURE"][:1]
    data = event.step_failure_data
    error = data.error.cause if data.error.cls_name == "DagsterExecutionStepExecutionError" \
        else data.error
    return error.cls_name, error.message


def _model_copy(tiny_llama_dir, folder, *, weights: bool = True):
    shutil.copytree(tiny_llama_dir, folder)
    if not weights:
        for f in list(folder.glob("*.safetensors")) + list(folder.glob("*.safetensors.index.json")):
            f.unlink()
    return folder


def _backbones(folder):
    from resources import BackboneResource

    return {"backbones": BackboneResource(paths={"llama": str(folder)})}


# -- 1. nothing invalid recorded as done ------------------------------------------------------

def test_a_tokenizer_without_eos_or_pad_is_refused_before_tokenising(world, tmp_path,
                                                                      tiny_llama_dir):
    """No EOS and no pad token: no id separates packed documents. Refused by the sequences
    stage before a document is tokenised, naming the model folder and the fix; nothing
    recorded (before: sequences with null ids, recorded as done, then a raw TypeError)."""
    from transformers import AutoTokenizer

    model = _model_copy(tiny_llama_dir, tmp_path / "no-eos")
    tok = AutoTokenizer.from_pretrained(model)
    tok.eos_token = None
    tok.pad_token = None
    tok.save_pretrained(model)
    cfg = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**cfg, "eos_token_id": None,
                                                   "pad_token_id": None}))
    before = (world.path("sequences") / "manifest.json").read_text()
    res, _ = world.materialize(["sequences_llama"], resources=_backbones(model))
    assert not res.success
    cls, msg = _failure(res)
    assert cls == "Failure", msg
    assert f"the tokenizer of {model.resolve()} has no EOS token and no pad token" in msg
    assert "set eos_token" in msg
    assert (world.path("sequences") / "manifest.json").read_text() == before


def test_token_ids_outside_the_vocabulary_are_never_recorded(world, monkeypatch):
    """A stage's output is checked before its manifest is written: token ids that are not
    integers of the vocabulary are refused by split, sequence and position."""
    import dihal.locate.corpus as corpus

    shutil.rmtree(world.path("sequences"))
    real = corpus.pack_sequences

    def bad(*a, **kw):
        out = real(*a, **kw)
        out["val"].input_ids[2][5] = 10_000
        return out

    monkeypatch.setattr(corpus, "pack_sequences", bad)
    res, _ = world.materialize(["sequences_llama"])
    assert not res.success
    cls, msg = _failure(res)
    assert cls == "Failure", msg
    assert "sequences_llama: not recorded: val sequence 2 position 5: token id 10000 is " \
           "outside the tokenizer's vocabulary (0..162)" in msg
    assert not (world.path("sequences") / "manifest.json").exists()


def test_fewer_held_out_sequences_than_the_protocol_asks_are_refused_before_training(world):
    """eval_sequences 10 of a dump holding 6 held-out sequences: refused before training,
    naming both numbers and the fix (before: measured on 6, the manifest saying 10)."""
    shutil.rmtree(world.path("bridge_sweep"))
    res, _ = world.materialize(["bridge_sweep_llama"], partition="1", bridge_sweep_llama={
        "config": {**PROTOCOL, "eval_sequences": 10}})
    assert not res.success
    cls, msg = _failure(res)
    assert cls == "Failure", msg
    assert ("eval_sequences 10: the dump holds 6 held-out (val) sequences. Lower eval_sequences "
            "to at most 6, or raise sequences.n_val to at least 10") in msg
    assert not world.path("bridge_sweep", "layer_001.partial", "checkpoints").exists()


# -- 2. errors that arrived as tracebacks or named the wrong thing ------------------------------

def test_a_dihal_toml_that_is_not_toml_leaves_the_built_ins_and_is_named(config):
    """Like a bad entry: the built-in backbones stay, the code location loads (a warning names
    the file and the parse error), the preset falls back with that warning."""
    from dihal.run.profiles import chosen_preset

    path = config("this is = not [toml\n")
    assert set(registry.all_backbones()) == set(registry.BACKBONES)
    problem = str(registry.declaration_problems()[registry.FILE_PROBLEM])
    assert f"{path} is not valid TOML (Expected '=' after a key" in problem
    assert "fix the file" in problem
    assert chosen_preset() == ("cpu", "the default")
    out = subprocess.run([sys.executable, "-c", "import pipeline.definitions as d; "
                          "print(sorted(d.defs.resolve_asset_graph().get_all_asset_keys())[:1])"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**__import__("os").environ, "DIHAL_CONFIG": str(path)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"{path} is not valid TOML" in out.stderr


@pytest.mark.parametrize(("text", "says"), [
    ("this is = not [toml\n", "is not valid TOML (Expected '=' after a key"),
    ('prest = "tiny"\n\n[backbones]\n', "unknown key 'prest' (did you mean 'preset'?); the "
                                        "keys are backbones, preset"),
])
def test_the_driver_refuses_an_unreadable_or_misspelt_dihal_toml(config, text, says, calls,
                                                                 capsys):
    import pipeline.main as driver

    path = config(text)
    with pytest.raises(SystemExit) as exit_:
        driver.main(["--backbone", "smollm2", "--layers", "1"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and calls == []
    assert f"error: {path}" in err and says in err
    assert "Traceback" not in err


def test_an_unknown_top_level_key_is_named_with_the_known_ones(config):
    path = config('prest = "tiny"\n\n[backbones]\n')
    problem = str(registry.declaration_problems()[registry.FILE_PROBLEM])
    assert problem.startswith(f"{path}: unknown key 'prest' (did you mean 'preset'?)")
    assert "the keys are backbones, preset" in problem
    assert set(registry.all_backbones()) == set(registry.BACKBONES)


def test_a_hub_text_field_of_nulls_is_a_clean_failure(world, tmp_path):
    """Rows whose text field is null, refused (on_malformed=error) by the corpus stage: a
    Failure with the message naming the row, not a raw traceback."""
    rows = hub_rows(20)
    rows[3]["body"] = None
    folder = hub_folder(tmp_path / "ds", {"train": rows})
    res, _ = world.materialize(["corpus"], corpus={"config": {
        "hf_dataset": str(folder), "hf_text_field": "body", "max_docs": 20,
        "on_malformed": "error"}})
    assert not res.success
    cls, msg = _failure(res)
    assert cls == "Failure", msg
    assert f"malformed row {folder}[train][3]: TypeError: body is NoneType, not a string" in msg


def test_a_missing_weight_shard_is_named_with_its_model_folder(world, tmp_path, tiny_llama_dir):
    """model.safetensors.index.json names a shard that is absent: the shard, the folder and
    the fix (before: a FileNotFoundError naming the artifact folder, "free space")."""
    model = _model_copy(tiny_llama_dir, tmp_path / "sharded")
    weights = model / "model.safetensors"
    weights.rename(model / "model-00001-of-00002.safetensors")
    (model / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "lm_head.weight": "model-00002-of-00002.safetensors"}}))
    shutil.rmtree(world.path("hidden_states"))
    res, _ = world.materialize(["sequences_llama", "hidden_states_llama"],
                               resources=_backbones(model))
    assert not res.success
    cls, msg = _failure(res)
    assert cls == "Failure", msg
    assert (f"{model.resolve()}: model.safetensors.index.json names the weight shard "
            "model-00002-of-00002.safetensors, which is missing") in msg
    assert "Free space" not in msg


def test_a_model_folder_without_weights_is_refused_naming_it(tmp_path, tiny_llama_dir):
    from dihal.backbones import resolve_weights

    model = _model_copy(tiny_llama_dir, tmp_path / "no-weights", weights=False)
    with pytest.raises(BackboneNotFoundError,
                       match=f"{model.resolve()} holds no weight files"):
        resolve_weights(registry.BACKBONES["llama"], model, cache_dir=tmp_path / "cache")


def test_the_driver_refuses_a_model_folder_without_weights(tmp_path, tiny_llama_dir,
                                                             monkeypatch, capsys):
    """config.json and a tokenizer but no weights: the driver's pre-flight refuses it (exit 2,
    no traceback), naming the folder (before: a traceback from from_pretrained)."""
    import pipeline.main as driver

    model = _model_copy(tiny_llama_dir, tmp_path / "no-weights", weights=False)
    monkeypatch.setattr(driver.dg.DagsterInstance, "get",
                        staticmethod(lambda: pytest.fail("past the pre-flight")))
    monkeypatch.setenv("DIHAL_TINY_MODEL", str(model))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.delitem(sys.modules, "tests.tiny_location", raising=False)
    shard = write_shard(tmp_path / "s.json.gz", make_docs(30))
    profile = tiny_profile(tmp_path / "tiny.json", shard)
    with pytest.raises(SystemExit) as exit_:
        driver.main(["--backbone", "llama", "--module", "tests.tiny_location", "--layers",
                     "1,2,3", "--skip-bridgeability", "--profile", str(profile)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert f"{model.resolve()} holds no weight files" in err
    assert "Traceback" not in err


assert TINY["sequences"]["n_val"] == 6  # the numbers the tests above name
