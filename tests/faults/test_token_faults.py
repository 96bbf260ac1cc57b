"""The dump's token ids (input_ids in states.zarr) are data a stage reads: a changed token chunk
of the same size is refused before use (its digest) and repaired from the sequences, to the
same bytes and the same bridge."""

import hashlib

from storage import HiddenStates
from storage.states import STATES


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _token_chunks(world):
    folder = world.path("hidden_states", STATES, "input_ids", "val", "c")
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_a_changed_token_chunk_is_refused_before_use_and_repaired(world):
    (chunk, *_) = _token_chunks(world)
    original = chunk.read_bytes()
    weights = world.path("bridge_sweep", "layer_002", "bridge.safetensors")
    good_weights = _digest(weights)
    data = bytearray(original)
    data[len(data) // 2] ^= 0x5A  # same size, other bytes
    chunk.write_bytes(bytes(data))
    rel = chunk.relative_to(world.path("hidden_states")).as_posix()
    states = world.path("hidden_states", STATES, "states")
    kept = {p: p.stat().st_mtime_ns for p in states.rglob("*") if p.is_file()}
    # a reader refuses the token ids before returning them (on opening: the token ids are
    # checked with the dump's metadata)
    try:
        HiddenStates(world.root, "llama").reader().input_ids("val")
    except Exception as exc:  # CorruptArtifactError naming the chunk and the fix
        assert f"{rel}: content changed (sha256 differs)" in str(exc)
        assert "Materialise it again (dagster asset materialize --select '*hidden_states_llama')" \
            in str(exc)
    else:
        raise AssertionError("changed token ids were read as data")
    # the sweep, which measures the bridge on the held-out tokens, refuses them too
    for p in weights.parent.iterdir():
        p.unlink()
    res, err = world.materialize(["bridge_sweep_llama"], partition="2")
    assert not res.success and f"{rel}: content changed (sha256 differs)" in err[0]
    print("refused:", err[0].splitlines()[0])  # shown with -s: what the user reads
    # re-materialising the dump repairs the token ids (no batch of states is written again)
    res, err = world.materialize(["hidden_states_llama"])
    assert res.success, err
    assert world.cached(res) == {"hidden_states_llama": False}
    assert chunk.read_bytes() == original
    assert {p: p.stat().st_mtime_ns for p in kept} == kept
    res, err = world.materialize(["bridge_sweep_llama"], partition="2")
    assert res.success, err
    assert _digest(weights) == good_weights
    print(f"repaired: {rel} {_digest(chunk)[:16]} (as before), bridge at layer 2 "
          f"{_digest(weights)[:16]} (as before)")
