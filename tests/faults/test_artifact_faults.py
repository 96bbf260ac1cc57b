"""Damaged, missing, interrupted and contended artifacts: each case asserts the exact outcome (a
clear error, or a recovery) and that nothing computed before is lost."""

import errno
import hashlib
import logging
import multiprocessing
import os
import shutil
import time

import pytest

from dihal.errors import CorruptArtifactError
from storage import HiddenStates
from storage.states import chunk_key, parse_chunk_key, reference_chunk_key

CHUNK = chunk_key("val", 2, 1)  # layer 2, second batch of the held-out split (the one stored)
REFERENCE_CHUNK = reference_chunk_key("argmax", "val", 1)  # the backbone's top-1, same batch


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _mtimes(folder) -> dict:
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("key", [CHUNK, REFERENCE_CHUNK])
def test_missing_state_chunk_is_found_and_only_its_batch_is_rewritten(world, key):
    states = world.path("hidden_states")
    chunk = states / key
    original = chunk.read_bytes()
    chunk.unlink()
    with pytest.raises(CorruptArtifactError, match=f"{key}: missing"):
        HiddenStates(world.root, "llama").reader()
    # every chunk of the other batches must survive the repair untouched
    others = {p: t for p, t in _mtimes(states).items()
              if (k := parse_chunk_key(p.relative_to(states).as_posix())) and k[::2] != ("val", 1)}
    assert others

    res, err = world.materialize(["hidden_states_llama"])
    assert res.success, err
    assert world.cached(res) == {"hidden_states_llama": False}  # never reported as cached
    assert chunk.read_bytes() == original  # the same states, written again
    assert {p: _mtimes(states)[p] for p in others} == others  # other batches kept as they were
    assert all(c.passed for c in world.checks(res).values())


def test_truncated_chunk_fails_the_check_cleanly_and_downstream_names_the_fix(world):
    chunk = world.path("hidden_states", CHUNK)
    chunk.write_bytes(chunk.read_bytes()[:100])
    res, err = world.materialize(["geometry_llama"], geometry_llama=dict(config={
        "n_tokens": 60, "n_anchors": 24, "k_neighbors": 6, "n_pairs": 100}))
    assert not res.success
    assert f"{CHUNK}: 100 bytes, recorded 4096" in err[0]
    assert "dagster asset materialize --select '*hidden_states_llama'" in err[0]
    res, err = world.materialize(["hidden_states_llama"])  # repaired, and the checks pass
    assert res.success, err
    assert world.cached(res) == {"hidden_states_llama": False}
    assert all(c.passed for c in world.checks(res).values())


def test_checks_report_a_damaged_dump_instead_of_crashing(world):
    from dagster import build_asset_check_context

    chunk = world.path("hidden_states", CHUNK)
    chunk.write_bytes(chunk.read_bytes()[:100])
    checks = {c.check_key.name: c for c in world.defs.asset_checks}
    for name in ("finite_states", "expected_shapes"):
        ctx = build_asset_check_context(resources={"storage": world.defs.resources["storage"]})
        result = checks[name](ctx)
        assert result.passed is False and "100 bytes" in result.metadata["damaged"].value


def test_changed_chunk_of_the_same_size_is_caught_before_it_is_read(world):
    chunk = world.path("hidden_states", chunk_key("val", 1, 0))  # geometry reads the val split
    data = bytearray(chunk.read_bytes())
    data[10] ^= 0xFF
    chunk.write_bytes(bytes(data))
    geo = world.path("geometry", "geometry.parquet")
    geo.unlink()  # make geometry recompute, so that it reads the states
    res, err = world.materialize(["geometry_llama"])
    assert not res.success and "content changed (sha256 differs)" in err[0]
    # the reader marked the dump damaged: it is repaired, not reported as cached
    res, err = world.materialize(["hidden_states_llama", "geometry_llama"])
    assert res.success, err
    assert world.cached(res) == {"hidden_states_llama": False, "geometry_llama": False}


@pytest.mark.parametrize("damage", ["truncate", "delete", "manifest"])
def test_damaged_table_is_remade_never_cached(world, damage):
    table = world.path("geometry", "geometry.parquet")
    rows_before = _digest(table)
    if damage == "truncate":
        table.write_bytes(table.read_bytes()[:50])
    elif damage == "delete":
        table.unlink()
    else:
        world.path("geometry", "manifest.json").write_text("{ not json")
    if damage != "manifest":  # downstream refuses to read it, naming the command
        res, err = world.materialize(["layer_score_llama"], **{"layer_score_llama": {
            "config": {"primary_norm": "rms"}}})
        assert not res.success and "geometry_llama" in err[0]
        assert "dagster asset materialize --select '*geometry_llama'" in err[0]
    res, err = world.materialize(["geometry_llama"])
    assert res.success, err
    assert world.cached(res) == {"geometry_llama": False}
    assert _digest(table) == rows_before  # re-made, identical
    res, err = world.materialize(["geometry_llama"])
    assert world.cached(res) == {"geometry_llama": True}


def test_truncated_bridge_weights_are_retrained_to_the_same_weights(world):
    weights = world.path("bridge_sweep", "layer_002", "bridge.safetensors")
    good = _digest(weights)
    weights.write_bytes(weights.read_bytes()[:64])
    other = _mtimes(world.path("bridge_sweep", "layer_003"))
    res, err = world.materialize(["bridge_sweep_llama"], partition="2")
    assert res.success, err
    assert world.cached(res) == {"bridge_sweep_llama": False}
    assert _digest(weights) == good  # the same protocol gives the same bridge
    assert _mtimes(world.path("bridge_sweep", "layer_003")) == other  # the others untouched


def _hold_lock(directory, name, ready, release):
    from storage.locks import artifact_lock

    with artifact_lock(directory, name):
        ready.set()
        release.wait(30)


def test_a_second_writer_fails_at_once_naming_the_first(world):
    from storage import SweepBridge

    art = SweepBridge(world.root, "llama", 1)
    shutil.rmtree(art.directory)  # so that the partition must be made again
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(art.directory, art.name, ready, release))
    holder.start()
    try:
        assert ready.wait(60)
        t0 = time.monotonic()
        res, err = world.materialize(["bridge_sweep_llama"], partition="1")
        assert not res.success and time.monotonic() - t0 < 30
        assert f"is being made by another run (pid {holder.pid}" in err[0]
    finally:
        release.set()
        holder.join(30)
    # the holder is gone: its lock file is left behind, and taken over
    assert art.directory.with_name("layer_001.lock").exists()
    res, err = world.materialize(["bridge_sweep_llama"], partition="1")
    assert res.success, err


def test_disk_full_names_the_artifact_and_keeps_what_was_made(world, monkeypatch):
    import storage.tables

    geo = world.path("geometry")
    kept = {p: _digest(p) for p in geo.iterdir() if p.is_file()}
    (geo / "geometry.parquet").unlink()  # geometry must be written again

    def full(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(storage.tables, "atomic_write_bytes", full)
    res, err = world.materialize(["geometry_llama"])
    assert not res.success
    assert "geometry_llama: the disk is full" in err[0] and "materialise it again" in err[0]
    assert {p: _digest(p) for p in kept if p.exists()} == {
        p: d for p, d in kept.items() if p.name != "geometry.parquet"}
    assert not [p for p in geo.parent.iterdir() if p.name.endswith(".tmp")]  # no debris
    assert world.path("hidden_states", "manifest.json").exists()  # upstream untouched
    monkeypatch.undo()
    res, err = world.materialize(["geometry_llama"])
    assert res.success, err


def test_interrupted_dump_resumes_to_the_same_states(world, monkeypatch):
    from storage.states import StateWriter

    reference = {p.relative_to(world.path("hidden_states")): p.read_bytes()
                 for p in world.path("hidden_states", "states.zarr").rglob("*")
                 if p.is_file() and "/c/" in str(p)}  # the states and the next-token reference
    assert any("/argmax/" in str(p) for p in reference)
    shutil.rmtree(world.path("hidden_states"))
    real, calls = StateWriter.write_batch, []

    def interrupt(self, split, batch, states, reference=None):
        if len(calls) == 1:
            raise RuntimeError("killed after one batch")
        calls.append(batch)
        real(self, split, batch, states, reference)

    monkeypatch.setattr(StateWriter, "write_batch", interrupt)
    res, err = world.materialize(["hidden_states_llama"])
    assert not res.success and "killed after one batch" in err[0]
    monkeypatch.undo()
    res, err = world.materialize(["hidden_states_llama"])
    assert res.success, err
    meta = res.get_asset_materialization_events()[0].step_materialization_data.materialization.metadata
    assert meta["batches_resumed"].value == 1
    now = {rel: (world.path("hidden_states") / rel).read_bytes() for rel in reference}
    assert now == reference


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_dump_stops_with_the_place_and_keeps_earlier_batches(world, monkeypatch, bad):
    from dihal.backbones import Backbone

    shutil.rmtree(world.path("hidden_states"))
    real, seen = Backbone.hidden_states, []

    def poisoned(self, ids):
        hs = real(self, ids)
        seen.append(1)
        if len(seen) == 2:  # the second batch: train sequences 4..7
            hs[3, 1, 5, 0] = bad
        return hs

    monkeypatch.setattr(Backbone, "hidden_states", poisoned)
    res, err = world.materialize(["hidden_states_llama"])
    assert not res.success
    assert "non-finite hidden state at layer 3, train sequence 5, position 5" in err[0]
    monkeypatch.undo()
    res, err = world.materialize(["hidden_states_llama"])
    assert res.success, err
    meta = res.get_asset_materialization_events()[0].step_materialization_data.materialization.metadata
    assert meta["batches_resumed"].value == 1  # the batch before the bad one was kept


def _cut_after_training(world, monkeypatch):
    """Layer 3's sweep bridge trained again with a power cut after training (its checkpoints
    kept); (the weights' path, their good digest, a function that restores the measurement)."""
    import dihal.replace.stage

    weights = world.path("bridge_sweep", "layer_003", "bridge.safetensors")
    good = _digest(weights)
    shutil.rmtree(weights.parent)
    real = dihal.replace.stage.measure_bridge

    def crash(*a, **k):
        raise RuntimeError("power cut after training")

    monkeypatch.setattr(dihal.replace.stage, "measure_bridge", crash)
    res, err = world.materialize(["bridge_sweep_llama"], partition="3")
    assert not res.success and "power cut" in err[0]
    return weights, good, lambda: monkeypatch.setattr(dihal.replace.stage, "measure_bridge", real)


def test_interrupted_bridge_training_resumes_to_the_same_weights(world, monkeypatch):
    weights, good, restore = _cut_after_training(world, monkeypatch)
    ckpts = world.path("bridge_sweep", "layer_003.partial", "checkpoints")
    assert sorted(p.name for p in ckpts.iterdir() if p.name.startswith("step-"))  # kept
    restore()
    res, err = world.materialize(["bridge_sweep_llama"], partition="3")
    assert res.success, err
    meta = res.get_asset_materialization_events()[0].step_materialization_data.materialization.metadata
    assert meta["resumed_from_step"].value == meta["train_steps"].value  # nothing retrained
    assert _digest(weights) == good


def test_a_damaged_checkpoint_s_fallback_is_in_the_run_s_event_log(world, monkeypatch):
    """A same-size change to the newest checkpoint: the bridge falls back to the previous one,
    ends with the same weights, and the reason is a warning in the Dagster event log."""
    from dihal.checkpoint import list_checkpoints

    weights, good, restore = _cut_after_training(world, monkeypatch)
    newest = list_checkpoints(world.path("bridge_sweep", "layer_003.partial", "checkpoints"))[-1]
    f = newest / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF  # same size, one byte changed
    f.write_bytes(bytes(data))
    restore()
    import dagster as dg

    instance = dg.DagsterInstance.ephemeral()
    res, err = world.materialize(["bridge_sweep_llama"], partition="3", instance=instance)
    assert res.success, err
    logs = [e for e in instance.all_logs(res.run_id) if e.level == logging.WARNING]
    assert any(newest.name in e.user_message and "falling back" in e.user_message
               for e in logs), [e.user_message for e in logs]
    assert _digest(weights) == good

