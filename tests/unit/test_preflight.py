"""The pre-flight's checks (dihal/run/preflight.py): each refuses with its numbers and the setting
to change, and lets a run that fits through."""


import pytest

from dihal.config import BridgeProtocol, ExtractConfig, SequenceConfig
from dihal.run.capacity import GIB, pair_bytes
from dihal.run.preflight import (
    Facts,
    PreflightError,
    check_disk,
    check_gpu_memory,
    check_headroom,
    check_host_memory,
    check_positions,
    gpu_step_bytes,
    max_positions,
    read_max_positions,
    refusals,
    require,
    require_positions,
    stage_refusals,
)

SEQ = SequenceConfig(seq_len=128, n_train=8192, n_val=144, max_tokens_per_doc=768)
EXTRACT = ExtractConfig(batch_size=64, store_train=False)
PROTOCOL = BridgeProtocol(d_model=272, n_layers=4, n_heads=4, batch_size=32, eval_sequences=128)
# SmolLM2-135M (30 layers, d 576): the smollm2 gpu run on one H200
SMOL = dict(backbone="smollm2", n_layers=30, hidden=576, intermediate=1536,
            n_params=134_515_008, weight_bytes=2, device="cuda", workers=1, swept_layers=29,
            doc_lengths={"train": [1000] * 1734, "val": [1000] * 176},
            host_available=120 * GIB, disk_free=50 * GIB, gpu_total=[143 * GIB],
            first_batch_max_abs=27_922.0, vocab=49152)


def facts(**changes) -> Facts:
    return Facts(**{**SMOL, **changes})


def test_a_run_that_fits_passes_every_check():
    assert refusals(facts(), SEQ, EXTRACT, PROTOCOL) == []
    require(facts(), SEQ, EXTRACT, PROTOCOL)  # no error


def test_corpus_too_small_names_the_cap_to_raise():
    """The embedded corpus at max_tokens_per_doc=256: documents of ~1,000
    tokens give 3,506 training sequences of the 8,192 asked."""
    seq = SequenceConfig(seq_len=128, n_train=8192, n_val=144, max_tokens_per_doc=256)
    with pytest.raises(PreflightError) as err:
        require(facts(), seq, EXTRACT, PROTOCOL)
    msg = str(err.value)
    assert "corpus: the corpus yields too few sequences of 128 tokens (train: 3508 of 8192" in msg
    assert "Raise sequences.max_tokens_per_doc to at least 599" in msg


def test_host_memory_for_pairs_times_concurrent_steps_names_workers():
    pairs = pair_bytes(SEQ.n_train * SEQ.seq_len, 576)  # 2 x 8192 x 128 x 576 x 4 B = 4.5 GiB
    assert pairs == 2 * 8192 * 128 * 576 * 4
    cpu = facts(device="cpu", gpu_total=[], workers=8, host_available=20 * GIB, weight_bytes=4)
    (r,) = check_host_memory(cpu, SEQ)
    assert r.check == "host memory"
    assert "8 concurrent step(s)" in r.message and "Lower --workers to 3" in r.message
    assert check_host_memory(facts(device="cpu", gpu_total=[], workers=3, weight_bytes=4,
                                   host_available=20 * GIB), SEQ) == []
    # one GPU runs one step at a time (dihal.run.devices): the workers do not multiply the pairs
    assert check_host_memory(facts(workers=8, host_available=6 * GIB), SEQ) == []


def test_disk_for_a_stored_training_split_names_store_train():
    stored = ExtractConfig(batch_size=64, store_train=True)
    (r,) = check_disk(facts(disk_free=20 * GIB), SEQ, stored, PROTOCOL)
    # 30 layers x 8,336 sequences x 128 x 576 x 2 bytes = 34.3 GiB
    assert "Set hidden_states.store_train to false" in r.message and "34.3 GiB" in r.message
    assert check_disk(facts(disk_free=20 * GIB), SEQ, EXTRACT, PROTOCOL) == []


def test_gpu_memory_of_an_8b_dump_on_a_small_card_names_the_batch():
    llama = facts(backbone="llama", n_layers=32, hidden=4096, intermediate=14336,
                  n_params=8_030_261_248, gpu_total=[20 * GIB], vocab=128_256)
    (r,) = check_gpu_memory(llama, SEQ, EXTRACT, PROTOCOL)
    assert "the dump of llama needs about 21.0 GiB" in r.message
    assert "Lower hidden_states.batch_size (now 64)" in r.message
    steps = gpu_step_bytes(llama, SEQ, EXTRACT, PROTOCOL)
    # dihal.run.capacity.dump_peak_bytes: 14.96 GiB of weights + 6.06 GiB of the batch's states
    assert round(steps["dump"] / GIB, 2) == 21.02
    assert check_gpu_memory(facts(device="cpu", gpu_total=[]), SEQ, EXTRACT, PROTOCOL) == []
    assert check_gpu_memory(llama, SEQ, EXTRACT, PROTOCOL) != check_gpu_memory(
        facts(backbone="llama", n_layers=32, hidden=4096, intermediate=14336,
              n_params=8_030_261_248, gpu_total=[143 * GIB], vocab=128_256), SEQ, EXTRACT,
        PROTOCOL)


def test_float16_headroom_of_a_first_batch():
    (r,) = check_headroom(facts(first_batch_max_abs=50_000.0), EXTRACT)
    assert "headroom 1.31x" in r.message and "Set hidden_states.dtype to float32" in r.message
    assert check_headroom(facts(first_batch_max_abs=50_000.0), ExtractConfig(dtype="float32")) == []
    (r,) = check_headroom(facts(first_batch_max_abs=float("inf")), EXTRACT)
    assert "non-finite" in r.message
    assert check_headroom(facts(first_batch_max_abs=None), EXTRACT) == []


def test_every_refusal_is_listed_at_once():
    bad = facts(first_batch_max_abs=60_000.0, disk_free=1 * GIB)
    with pytest.raises(PreflightError) as err:
        require(bad, SEQ, EXTRACT, PROTOCOL)
    assert "2 problem(s)" in str(err.value)
    assert "float16 headroom:" in str(err.value) and "disk:" in str(err.value)


def test_sequences_longer_than_the_positions_are_refused_by_the_driver_and_the_stages():
    short = facts(max_positions=100)  # SEQ: 128 tokens, the BOS included
    with pytest.raises(PreflightError) as err:
        require(short, SEQ, EXTRACT, PROTOCOL)
    msg = str(err.value)
    assert ("positions: sequences.seq_len 128 (the BOS included) is longer than smollm2's "
            "max_position_embeddings 100 (its config.json)") in msg
    assert "Set sequences.seq_len to at most 100" in msg
    for kind in ("dump", "training"):
        assert [r.check for r in stage_refusals(kind, short, SEQ, EXTRACT, PROTOCOL)] == [
            "positions"]
    assert check_positions("smollm2", 128, SEQ) == []  # exactly the limit fits
    assert check_positions("smollm2", None, SEQ) == []  # a config without a limit: no check
    with pytest.raises(PreflightError, match=r"(?s)refused the sequences of m .*at most 100"):
        require_positions("m", 100, SEQ)


def test_the_positions_are_read_from_the_config_or_its_text_config(tmp_path):
    assert max_positions({"max_position_embeddings": 8192}) == 8192
    assert max_positions({"text_config": {"max_position_embeddings": 32768}}) == 32768
    assert max_positions({"n_positions": 1024}) is None  # not named: no check
    assert read_max_positions(tmp_path) is None  # no config.json
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 256}')
    assert read_max_positions(tmp_path) == 256
