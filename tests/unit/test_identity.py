"""A local model folder is known by its content (dihal.identity): the weights saved again into
the same folder, an edited config.json or tokenizer file give another revision; files that
from_pretrained does not read do not; each file is hashed once while it is untouched."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

import dihal.identity as identity
from dihal.backbones import get_spec, resolve_weights
from dihal.identity import CACHE_FILE, folder_digest, folder_revision


@pytest.fixture()
def model_copy(tiny_llama_dir, tmp_path):
    """A private copy of the tiny llama's folder (the session's one is shared)."""
    return shutil.copytree(tiny_llama_dir, tmp_path / "model")


def _resave_with_other_weights(folder):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder))
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.add_(1e-3)  # same shapes: same file size
    size = (folder / "model.safetensors").stat().st_size
    model.save_pretrained(str(folder))
    assert (folder / "model.safetensors").stat().st_size == size


def test_weights_saved_again_into_the_same_folder_are_another_revision(model_copy, tmp_path):
    spec = get_spec("llama")
    before = resolve_weights(spec, model_copy, cache_dir=tmp_path / "cache")
    assert before.revision.startswith(f"local:{model_copy.resolve()}@sha256=")
    assert resolve_weights(spec, model_copy, cache_dir=tmp_path / "cache") == before
    _resave_with_other_weights(model_copy)
    after = resolve_weights(spec, model_copy, cache_dir=tmp_path / "cache")
    assert after.path == before.path and after.revision != before.revision


@pytest.mark.parametrize("edit", ["config", "tokenizer"])
def test_an_edited_config_or_tokenizer_is_another_revision(model_copy, edit):
    before = folder_digest(model_copy)
    if edit == "config":
        cfg = json.loads((model_copy / "config.json").read_text())
        cfg["num_hidden_layers"] -= 1
        (model_copy / "config.json").write_text(json.dumps(cfg))
    else:
        tok = model_copy / "tokenizer_config.json"
        tok.write_text(tok.read_text().replace("}", ', "model_max_length": 17}', 1)
                       if "model_max_length" not in tok.read_text() else
                       tok.read_text().replace("model_max_length", "model_max_length_was"))
    assert folder_digest(model_copy) != before


def test_files_from_pretrained_does_not_read_leave_the_identity(model_copy):
    before = folder_digest(model_copy)
    (model_copy / "README.md").write_text("# my fine-tune\n")
    (model_copy / ".hidden.json").write_text("{}")
    assert folder_digest(model_copy) == before


def test_two_folders_with_the_same_content_have_one_digest_and_two_revisions(model_copy, tmp_path):
    other = shutil.copytree(model_copy, tmp_path / "other")
    assert folder_digest(other) == folder_digest(model_copy)
    assert folder_revision(other) != folder_revision(model_copy)  # the path is part of it


def test_an_untouched_file_is_hashed_once_and_a_rewritten_one_again(model_copy, tmp_path,
                                                                     monkeypatch):
    hashed = []
    real = identity.file_sha256
    monkeypatch.setattr(identity, "file_sha256", lambda p: hashed.append(p.name) or real(p))
    cache = tmp_path / "cache"
    first = folder_digest(model_copy, cache)
    assert "model.safetensors" in hashed and (cache / CACHE_FILE).exists()
    hashed.clear()
    assert folder_digest(model_copy, cache) == first and hashed == []
    # the same size and the same mtime, other bytes: its ctime tells it was rewritten
    weights = model_copy / "model.safetensors"
    st = weights.stat()
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert folder_digest(model_copy, cache) != first and hashed == ["model.safetensors"]


def test_a_damaged_digest_cache_is_never_read_as_a_digest(model_copy, tmp_path):
    cache = tmp_path / "cache"
    good = folder_digest(model_copy, cache)
    (cache / CACHE_FILE).write_text("{not json")
    assert folder_digest(model_copy, cache) == good
    assert json.loads((cache / CACHE_FILE).read_text())["version"] == identity.CACHE_VERSION
