"""A process killed while it writes the report (SIGKILL) or trains a bridge (SIGTERM), a
same-size change to a finished sweep bridge's weights, and an artifact root that is a symbolic
link: nothing half-written is reused or left looking finished, a damaged artifact is never read
as data nor reported cached, and a resumed training ends with the uninterrupted run's bytes."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from dihal.errors import CorruptArtifactError, UnsafePathError
from storage import Geometry, Report, SweepBridge
from storage.artifacts import VERIFIED
from storage.locks import artifact_lock
from tests.tiny import PROTOCOL, ROOT, make_world, png, tiny_definitions


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _child(function: str, *args) -> subprocess.Popen:
    """A Python process running `function` of this module with `args` (strings)."""
    code = (f"import sys; from tests.faults.test_probe_faults import {function}; "
            f"{function}(*sys.argv[1:])")
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=ROOT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


# -- the report, killed while it is written -------------------------------------------------

def _report_asset(version: int):
    """report_llama as the report stage makes it once its inputs are built: a hand-made report
    (version `version`) through the stage protocol (StageRun.produce) and the Report artifact."""
    from assets._stage import StageRun, stage_asset
    from dihal.results import ReportResult

    @stage_asset("llama", "report")
    def report(context):  # (unannotated: this module postpones its annotations)
        run = StageRun(context, "llama")
        result = ReportResult(f"<p>report {version}</p>\n" * 500, f"# report {version}\n",
                              [png(), png(), png()])
        return run.produce(run.art(Report), {"version": version}, [], lambda: result)

    return report


def _make_report(defs, version: int):
    res = dg.materialize([_report_asset(version)], resources=defs.resources,
                         instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    meta = [e.step_materialization_data.materialization.metadata
            for e in res.get_asset_materialization_events()]
    return res, (meta[0]["cached"].value if meta else None)


def write_report_and_die(root: str, model_dir: str, where: str) -> None:
    """(In a child process.) Make report version 2, killing this process (SIGKILL) midway:
    `files`, after the HTML, the Markdown and one plot are written; `swap`, in the swap of the
    finished folder into place (the old one set aside, the new not yet in)."""
    import storage.artifacts.report

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    if where == "files":
        real, seen = storage.artifacts.report.atomic_write_bytes, []

        def write(path, data):
            seen.append(path)
            if len(seen) == 2:
                die()
            return real(path, data)

        storage.artifacts.report.atomic_write_bytes = write
    else:
        real_replace = os.replace

        def replace(src, dst):
            if Path(dst).name == "report" and Path(src).name.startswith(".report."):
                die()
            return real_replace(src, dst)

        os.replace = replace
    _make_report(tiny_definitions(Path(root), Path(model_dir)), 2)
    raise SystemExit("not killed")


@pytest.mark.parametrize("where", ["files", "swap"])
def test_a_report_killed_while_written_leaves_no_debris_and_is_made_again(
        world, tiny_llama_dir, where):
    art = Report(world.root, "llama")
    res, cached = _make_report(world.defs, 1)
    assert res.success and cached is False
    child = _child("write_report_and_die", world.root, tiny_llama_dir, where)
    out, _ = child.communicate(timeout=300)
    assert child.returncode == -signal.SIGKILL, out[-3000:]
    # what is in place is the old report, whole, or nothing: never a half-written one
    m = art.manifest()
    assert m is None or (m.config == {"version": 1} and not art.verify(m, digests=True))
    res, cached = _make_report(world.defs, 2)
    assert res.success and cached is False  # made again, not the killed run's
    assert art.html.read_text().startswith("<p>report 2</p>")
    assert not art.verify(art.manifest(), digests=True)
    debris = sorted(p.name for p in art.directory.parent.iterdir()
                    if p.name.startswith(".report"))
    assert debris == []  # the killed writer's temporary folder and set-aside copy removed
    with artifact_lock(art.directory, art.name):  # the dead writer's lock is taken over
        pass
    res, cached = _make_report(world.defs, 2)
    assert res.success and cached is True


# -- a sweep bridge's weights changed, same size ----------------------------------------------

def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x10  # in the last tensor's values, past the header: same size, valid file
    path.write_bytes(bytes(data))


def test_a_same_size_change_to_sweep_weights_is_never_reused_or_read(world):
    layer = world.path("bridge_sweep", "layer_002")
    weights, stamp = layer / "bridge.safetensors", layer / VERIFIED
    good = _digest(weights)
    other = _digest(world.path("bridge_sweep", "layer_003", "bridge.safetensors"))
    _flip(weights)
    stamp.write_text(f"{time.time():.0f}\n")  # its digests checked a moment ago
    # the partition materialised again is retrained, not reported cached
    res, err = world.materialize(["bridge_sweep_llama"], partition="2")
    assert res.success, err
    assert world.cached(res) == {"bridge_sweep_llama": False}
    assert _digest(weights) == good
    # the weights are never read as data: not by a reader, not by bridgeability
    _flip(weights)
    stamp.write_text(f"{time.time():.0f}\n")
    with pytest.raises(CorruptArtifactError, match="bridge.safetensors: content changed"):
        SweepBridge(world.root, "llama", 2).read()
    res, err = world.materialize(["bridgeability_llama"])
    assert not res.success
    assert "bridge.safetensors: content changed" in err[0] and "--partition 2" in err[0]
    assert not world.path("bridgeability").exists()
    res, err = world.materialize(["bridge_sweep_llama"], partition="2")
    assert res.success, err
    assert world.cached(res) == {"bridge_sweep_llama": False}
    assert _digest(weights) == good
    assert _digest(world.path("bridge_sweep", "layer_003", "bridge.safetensors")) == other
    res, err = world.materialize(["bridgeability_llama"])
    assert res.success, err


# -- an artifact root that is a symbolic link ---------------------------------------------------

def test_an_artifact_root_that_is_a_symlink_makes_and_reuses_the_chain(
        tmp_path, swept_world, tiny_llama_dir):
    real = tmp_path / "other-disk" / "artifacts"
    shutil.copytree(swept_world.root, real)
    for stage in ("geometry", "layer_score", "bridge_sweep/layer_001"):  # made through the link
        shutil.rmtree(real / "llama" / stage)
    link = tmp_path / "artifacts"
    link.symlink_to(real, target_is_directory=True)
    world = make_world(tmp_path, tiny_llama_dir, link)  # the storage resource's root: the link
    world.shard = swept_world.shard
    chain = ["corpus", "sequences_llama", "hidden_states_llama", "geometry_llama",
             "layer_score_llama", "bridgeability_llama", "bridge_llama"]
    full = {"bridge_llama": {"config": {**PROTOCOL, "epochs": 2.0}}}  # the tiny held-out split
    made = {}
    for keys, partition in ((["bridge_sweep_llama"], "1"), (chain, None)):
        res, err = world.materialize(keys, partition=partition, **full)
        assert res.success, err
        made.update(world.cached(res))
    assert not any(made[k] for k in ("geometry_llama", "layer_score_llama",
                                     "bridge_sweep_llama", "bridgeability_llama", "bridge_llama"))
    assert (real / "llama" / "bridge" / "bridge.safetensors").is_file()  # written where it points
    assert link.is_symlink()
    for keys, partition in ((["bridge_sweep_llama"], "1"), (chain, None)):
        res, err = world.materialize(keys, partition=partition, **full)
        assert res.success, err
        assert all(world.cached(res).values()), world.cached(res)
    # a stage folder that is a link below the linked root is still refused
    geo = real / "llama" / "geometry"
    os.replace(geo, tmp_path / "geometry-elsewhere")
    geo.symlink_to(tmp_path / "geometry-elsewhere")
    res, err = world.materialize(["geometry_llama"], geometry_llama={"config": {
        "n_tokens": 60, "n_anchors": 24, "k_neighbors": 6, "n_pairs": 100}})
    assert not res.success and f"{geo} is a symbolic link" in err[0]
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        Geometry(link, "llama").lock()


# -- SIGTERM to a process training a sweep layer, then a resume --------------------------------

def train_until_sigterm(root: str, model_dir: str, shard: str, ready: str) -> None:
    """(In a child process.) Train sweep layer 3, pausing after its first checkpoint (the file
    `ready` then says so) until a signal ends this process."""
    import dihal.training

    real = dihal.training.save_checkpoint

    def save(*a, **k):
        path = real(*a, **k)
        Path(ready).write_text(str(path))
        time.sleep(600)
        return path

    dihal.training.save_checkpoint = save
    world = make_world(Path(root).parent, Path(model_dir), Path(root))
    world.shard = Path(shard)
    res, err = world.materialize(["bridge_sweep_llama"], partition="3")
    print("child:", res.success, err)


def test_sigterm_while_a_sweep_layer_trains_resumes_to_the_uninterrupted_weights(
        world, tmp_path, tiny_llama_dir):
    weights = world.path("bridge_sweep", "layer_003", "bridge.safetensors")
    good = _digest(weights)  # the uninterrupted run's (the session's swept world)
    shutil.rmtree(weights.parent)
    ready = tmp_path / "checkpointed"
    child = _child("train_until_sigterm", world.root, tiny_llama_dir, world.shard, ready)
    deadline = time.monotonic() + 300
    while not ready.exists():
        assert child.poll() is None and time.monotonic() < deadline, child.communicate()[0]
        time.sleep(0.2)
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=120)
    assert "child: True" not in out, out[-3000:]
    print("stopped:", out.strip().splitlines()[-1][:300])
    art = SweepBridge(world.root, "llama", 3)
    assert not art.directory.exists()  # nothing half-made in place
    assert sorted(p.name for p in art.checkpoints.iterdir() if p.name.startswith("step-"))
    with artifact_lock(art.directory, art.name):  # released
        pass
    res, err = world.materialize(["bridge_sweep_llama"], partition="3")
    assert res.success, err
    meta = res.get_asset_materialization_events()[0].step_materialization_data.materialization.metadata
    assert meta["resumed_from_step"].value == 2  # from the checkpoint, not from scratch
    assert world.cached(res) == {"bridge_sweep_llama": False}
    assert _digest(weights) == good
