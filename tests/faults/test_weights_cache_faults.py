"""The dequantised weights cache (the SmolLM2 and Gemma 3 GGUFs made safetensors once) is used
only while every file it recorded is intact: a same-size edit of the cached weights was loaded
silently under the GGUF's revision, so every fingerprint downstream matched."""

import json

from dihal.gguf import MARKER, cache_problem, write_marker


def _cache(folder):
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    (folder / "config.json").write_text("{}")
    write_marker(folder, "pkg==1:model.gguf:sha256=ab", "model.gguf")
    return folder


def test_an_intact_cache_is_used_and_a_changed_one_is_not(tmp_path):
    cache = _cache(tmp_path / "a")
    assert cache_problem(cache) is None
    data = bytearray((cache / "model.safetensors").read_bytes())
    data[100] ^= 0x80  # same size, one sign bit
    (cache / "model.safetensors").write_bytes(bytes(data))
    fresh = _cache(tmp_path / "b")
    (fresh / "model.safetensors").write_bytes(bytes(data))  # a new folder: not yet verified
    assert cache_problem(fresh) == "model.safetensors changed since it was written (sha256 differs)"


def test_a_cache_missing_a_file_or_its_digests_is_not_used(tmp_path):
    cache = _cache(tmp_path / "a")
    (cache / "config.json").unlink()
    assert cache_problem(cache) == "config.json is missing"
    old = _cache(tmp_path / "b")
    info = json.loads((old / MARKER).read_text())
    (old / MARKER).write_text(json.dumps({k: v for k, v in info.items() if k != "files"}))
    assert cache_problem(old) == "it records no digests of its files"  # made before they were
    assert cache_problem(tmp_path / "none") == "it is not there"
    short = _cache(tmp_path / "c")
    (short / "model.safetensors").write_bytes(b"x")
    assert cache_problem(short) == "model.safetensors has 1 bytes, 16384 were written"
