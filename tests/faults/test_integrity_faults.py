"""Nothing read that was not checked: the dump's Zarr metadata, a manifest's own values (l*), a
dump whose NaN came with recomputed digests, and a `.verified` stamp from the future. Each is
found before it is used as data, and materialising again repairs it, never reports it cached."""

import hashlib
import json
import time
from dataclasses import replace

import dagster as dg
import numpy as np
import pytest

from dihal.errors import CorruptArtifactError
from storage import HiddenStates, LayerScore
from storage.artifacts import VERIFIED
from storage.manifest import write_manifest
from storage.states import STATES, chunk_key
from tests.tiny import SWEEP_RUN as RUN


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_same_size_edit_of_the_dumps_array_metadata_is_found_and_remade(world):
    meta = world.path("hidden_states", STATES, "states", "val", "zarr.json")
    original = meta.read_bytes()
    edited = original.decode().replace('"float16"', '"int16"  ', 1)  # same size, valid JSON
    assert edited != original.decode() and len(edited) == len(original)
    meta.write_text(edited)
    rel = meta.relative_to(world.path("hidden_states")).as_posix()
    score = _digest(world.path("layer_score", "layer_score.parquet"))
    # a reader refuses the dump before Zarr reads the metadata
    with pytest.raises(CorruptArtifactError, match=f"{rel}: content changed"):
        HiddenStates(world.root, "llama").reader()
    # geometry, made again, does not read the reinterpreted bytes
    world.path("geometry", "geometry.parquet").unlink()
    res, err = world.materialize(["geometry_llama"])
    assert not res.success and f"{rel}: content changed" in err[0]
    # the dump is never reused as it is: made again, to the same metadata, and the checks pass
    res, err = world.materialize(["hidden_states_llama"])
    assert res.success, err
    assert world.cached(res) == {"hidden_states_llama": False}
    assert meta.read_bytes() == original
    assert all(c.passed for c in world.checks(res).values())
    res, err = world.materialize(["geometry_llama", "layer_score_llama"])
    assert res.success, err
    assert _digest(world.path("layer_score", "layer_score.parquet")) == score  # l* as before


def test_a_one_byte_edit_of_l_star_in_the_manifest_is_refused_and_remade(world):
    man = world.path("layer_score", "manifest.json")
    original = man.read_text()
    l_star = json.loads(original)["info"]["l_star"]
    other = 3 if l_star != 3 else 2
    edited = original.replace(f'"l_star": {l_star}', f'"l_star": {other}', 1)
    assert edited != original and len(edited) == len(original)
    man.write_text(edited)
    # what the driver reads (LayerScore.require) refuses the manifest
    with pytest.raises(CorruptArtifactError, match="manifest.json: content changed"):
        LayerScore(world.root, "llama").require()
    # the full-budget bridge does not train at the edited layer
    res, err = world.materialize(["bridge_llama"], bridge_llama=RUN["bridge_sweep_llama"])
    assert not res.success and "manifest.json: content changed" in err[0]
    assert not world.path("bridge").exists()
    # the layer score is made again (never reported cached), with the l* it had
    res, err = world.materialize(["layer_score_llama"])
    assert res.success, err
    assert world.cached(res) == {"layer_score_llama": False}
    assert json.loads(man.read_text())["info"]["l_star"] == l_star


def _nan_with_recomputed_digests(world, rel: str) -> bytes:
    """NaN written into chunk `rel` of the dump, its digest recomputed in the manifest (as a
    writer that recomputes digests would leave it); the chunk's original bytes."""
    art = HiddenStates(world.root, "llama")
    chunk = world.path("hidden_states", rel)
    original = chunk.read_bytes()
    data = bytearray(original)
    data[6:8] = np.array([np.nan], dtype=np.float16).tobytes()
    chunk.write_bytes(bytes(data))
    m = art.manifest()
    files = {**m.files, rel: [len(data), hashlib.sha256(bytes(data)).hexdigest()]}
    write_manifest(art.directory, replace(m, files=files))
    return original


def test_nan_with_recomputed_digests_is_repaired_after_the_check_fails(world):
    rel = chunk_key("val", 2, 1)
    original = _nan_with_recomputed_digests(world, rel)
    chunk = world.path("hidden_states", rel)
    # the digests match: reused once, and the blocking check fails naming the chunk and the fix
    res, _ = world.materialize(["hidden_states_llama"])
    finite = world.checks(res)["finite_states"]
    assert not finite.passed
    assert rel in finite.description and "Materialise hidden_states_llama again" in finite.description
    print("check:", finite.description)
    # the next materialisation writes that batch again: not cached, and the checks pass
    res, err = world.materialize(["hidden_states_llama"])
    assert res.success, err
    assert world.cached(res) == {"hidden_states_llama": False}
    assert chunk.read_bytes() == original
    assert all(c.passed for c in world.checks(res).values())
    res, err = world.materialize(["hidden_states_llama"])
    assert world.cached(res) == {"hidden_states_llama": True}
    assert all(c.passed for c in world.checks(res).values())


def test_a_verified_stamp_from_the_future_does_not_turn_digest_checks_off(world):
    table = world.path("layer_score", "score.png")  # read for display only: no reader fails
    good = _digest(table)
    data = bytearray(table.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size: only a digest finds it
    table.write_bytes(bytes(data))
    stamp = world.path("layer_score", VERIFIED)
    stamp.write_text(f"{time.time() + 86400:.0f}\n")  # a host whose clock is a day ahead
    instance = dg.DagsterInstance.ephemeral()
    res, err = world.materialize(["layer_score_llama"], instance=instance)
    assert res.success, err
    assert world.cached(res) == {"layer_score_llama": False}  # checked, found, made again
    assert _digest(table) == good
    warned = [e.user_message for e in instance.all_logs(res.run_id)
              if e.level == 30 and "clock" in e.user_message]  # logging.WARNING
    assert warned and "taken as stale" in warned[0]
    print("warning:", warned[0])
    # the same stamp, asked directly: stale, and the caller is told why
    stamp.write_text(f"{time.time() + 86400:.0f}\n")
    said: list[str] = []
    assert LayerScore(world.root, "llama").verified_within(24 * 3600, said.append) is False
    assert "clock" in said[0] and str(stamp) in said[0]
    stamp.write_text(f"{time.time() - 60:.0f}\n")  # a stamp of a minute ago still counts
    assert LayerScore(world.root, "llama").verified_within(24 * 3600, said.append) is True


def test_an_array_added_to_the_dump_is_found_and_removed_without_rewriting_a_batch(world):
    import shutil

    states = world.path("hidden_states", STATES, "states")
    shutil.copytree(states / "val", states / "zz")  # another "split", in no record
    chunks = {p: p.stat().st_mtime_ns for p in (states / "val").rglob("*") if p.is_file()}
    rel = f"{STATES}/states/zz/zarr.json"
    with pytest.raises(CorruptArtifactError, match=f"{rel}: not in the record"):
        HiddenStates(world.root, "llama").reader()
    # never reused as it is: repaired by removing the array, no batch written again
    res, err = world.materialize(["hidden_states_llama"])
    assert res.success, err
    assert world.cached(res) == {"hidden_states_llama": False}
    assert not (states / "zz").exists()
    assert {p: p.stat().st_mtime_ns for p in chunks} == chunks
    assert HiddenStates(world.root, "llama").reader().splits == ["train", "val"]
    assert all(c.passed for c in world.checks(res).values())
