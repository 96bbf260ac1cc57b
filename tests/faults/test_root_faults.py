"""No file touched outside the artifact root: a lock file, a device lease file or a stage folder
that is a symbolic link (or a lock file hard-linked to a file elsewhere) is refused by name,
never followed, truncated or renamed aside; a backbone name that cannot be one folder is
refused by the name check."""

import os
import socket

import pytest

from dihal.errors import BackboneDeclarationError, UnsafePathError
from dihal.registry import declare
from dihal.run.devices import Slot, lease
from storage import Geometry, LayerScore
from storage.layout import ArtifactLayout
from storage.locks import artifact_lock, lock_path
from tests.tiny import SWEEP_RUN as RUN

PRECIOUS = b"another user's file: not a lock\n" * 4


def _victim(tmp_path):
    victim = tmp_path / "outside" / "precious.txt"
    victim.parent.mkdir()
    victim.write_bytes(PRECIOUS)
    return victim


def test_a_lock_file_that_is_a_symlink_is_refused_and_its_target_untouched(world, tmp_path):
    victim = _victim(tmp_path)
    art = LayerScore(world.root, "llama")
    lock = lock_path(art.directory)
    lock.unlink(missing_ok=True)
    lock.symlink_to(victim)
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        with artifact_lock(art.directory, art.name):
            pass
    # through a materialisation that must make the artifact again
    world.path("layer_score", "layer_score.parquet").unlink()
    res, err = world.materialize(["layer_score_llama"])
    assert not res.success
    assert f"{lock} is a symbolic link (to {victim})" in err[0] and f"rm {lock}" in err[0]
    print("refused:", err[0].splitlines()[0])
    assert victim.read_bytes() == PRECIOUS
    lock.unlink()  # the fix the message names
    res, err = world.materialize(["layer_score_llama"])
    assert res.success, err


def test_a_lock_file_hard_linked_to_a_file_elsewhere_is_not_truncated(world, tmp_path):
    victim = _victim(tmp_path)
    art = LayerScore(world.root, "llama")
    lock = lock_path(art.directory)
    lock.unlink(missing_ok=True)
    os.link(victim, lock)
    with pytest.raises(UnsafePathError, match="2 names"):
        with artifact_lock(art.directory, art.name):
            pass
    assert victim.read_bytes() == PRECIOUS


def test_a_device_lease_file_that_is_a_symlink_is_refused(tmp_path):
    victim = _victim(tmp_path)
    devices = tmp_path / "artifacts" / ".devices"
    devices.mkdir(parents=True)
    slot = Slot("cpu", f"{socket.gethostname()}-cpu-0", 1)
    (devices / f"{slot.key}.lock").symlink_to(victim)
    with pytest.raises(UnsafePathError, match="device lease file .* is a symbolic link"):
        with lease(devices, [slot]):
            pass
    assert victim.read_bytes() == PRECIOUS
    # a lease folder that is a link is refused too (its files would land wherever it points)
    linked = tmp_path / "artifacts2" / ".devices"
    linked.parent.mkdir()
    linked.symlink_to(victim.parent)
    with pytest.raises(UnsafePathError, match="device lease folder .* is a symbolic link"):
        with lease(linked, [slot]):
            pass
    assert sorted(p.name for p in victim.parent.iterdir()) == ["precious.txt"]


def test_a_stage_folder_that_is_a_symlink_is_refused_without_debris(world, tmp_path):
    elsewhere = tmp_path / "outside" / "geometry"
    elsewhere.parent.mkdir()
    geo = Geometry(world.root, "llama").directory
    os.replace(geo, elsewhere)
    geo.symlink_to(elsewhere)
    before = {p.name: p.read_bytes() for p in elsewhere.iterdir()}
    res, err = world.materialize(["geometry_llama"], geometry_llama={"config": {
        **RUN["geometry_llama"]["config"], "n_tokens": 60}})  # another config: made again
    assert not res.success
    assert f"{geo} is a symbolic link (to {elsewhere})" in err[0]
    print("refused:", err[0].splitlines()[0])
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == before
    assert geo.is_symlink()
    debris = [p.name for p in geo.parent.iterdir() if p.name.startswith(".geometry")]
    assert debris == []
    geo.unlink()  # the fix the message names
    res, err = world.materialize(["geometry_llama"])
    assert res.success, err


@pytest.mark.parametrize("name", ["tiny\n", "tiny ", "ti\tny", "tiny\x00"])
def test_a_backbone_name_with_whitespace_or_a_control_character_is_refused(name, tiny_llama_dir):
    with pytest.raises(BackboneDeclarationError, match="the name must be lower-case"):
        declare(name, {"model": str(tiny_llama_dir)}, "dihal.toml")
    with pytest.raises(UnsafePathError, match="cannot name a folder of the artifact root"):
        ArtifactLayout("/tmp/artifacts").stage("sequences", name)
