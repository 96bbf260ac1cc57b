"""Presets are never mixed silently: what a stage makes records its preset (manifest,
fingerprint, materialization metadata); an upstream artifact made under another preset is
refused with the command that remakes it under this run's preset, or read knowingly where the
preset resource allows it (the materialization names it). A fix command after a plain run
names the upstream asset to remake and the preset to make it under, not the failed run's own
config."""

import json
import shutil

from resources import PresetResource


def _meta(world, res, key: str) -> dict:
    (event,) = [e for e in res.get_asset_materialization_events()
                if e.asset_key.to_user_string() == key]
    return {k: getattr(v, "value", v) for k, v in
            event.step_materialization_data.materialization.metadata.items()}


def test_an_artifact_records_its_preset_in_manifest_fingerprint_and_metadata(world):
    res, err = world.materialize(["geometry_llama"])
    assert res.success, err
    cpu = _meta(world, res, "geometry_llama")
    assert cpu["preset"] == "cpu" and cpu["cached"] is True
    manifest = json.loads(world.path("geometry", "manifest.json").read_text())
    assert manifest["info"]["preset"] == "cpu"
    # the same configs under another preset's name are other fingerprints: not reused as cpu's
    chain = ["corpus", "sequences_llama", "hidden_states_llama"]
    res, err = world.materialize(chain, resources={"preset": PresetResource(name="tiny")})
    assert res.success, err
    for key in chain:
        made = _meta(world, res, key)
        assert made["preset"] == "tiny" and made["cached"] is False, (key, made)


def test_an_upstream_made_under_another_preset_is_refused_with_the_command(world):
    res, err = world.materialize(["geometry_llama"],
                                 resources={"preset": PresetResource(name="tiny")})
    assert not res.success
    assert ("geometry_llama: its upstream hidden_states_llama was made under preset 'cpu', "
            "this run's preset is 'tiny'; presets are never mixed silently. Remake it under "
            "'tiny': `DIHAL_PROFILE=tiny dagster asset materialize --select "
            "'*hidden_states_llama'`; then this asset.") in err[0], err[0]
    assert not world.path("geometry", "manifest.json").read_text().count('"tiny"')


def test_an_upstream_under_another_preset_is_read_knowingly_where_allowed(world):
    shutil.rmtree(world.path("geometry"))
    res, err = world.materialize(
        ["geometry_llama"], resources={"preset": PresetResource(name="tiny",
                                                                reuse_from=["cpu"])})
    assert res.success, err
    meta = _meta(world, res, "geometry_llama")
    assert meta["preset"] == "tiny"
    assert meta["upstream_presets"] == {"hidden_states_llama": "cpu"}
    info = json.loads(world.path("geometry", "manifest.json").read_text())["info"]
    assert info["upstream_presets"] == {"hidden_states_llama": "cpu"}


def test_a_fix_command_after_a_plain_run_names_the_upstream_and_the_preset(world):
    """The failed run had its own geometry config; the fix remakes hidden_states_llama (and
    what it needs) under this run's preset, whose config is the upstream's; the failed run's
    own geometry config is not offered for it."""
    shutil.rmtree(world.path("hidden_states"))
    geometry = {"n_tokens": 60, "n_anchors": 24, "k_neighbors": 6, "n_pairs": 100}
    res, err = world.materialize(["geometry_llama"], geometry_llama={"config": geometry},
                                 resources={"preset": PresetResource(name="tiny")})
    assert not res.success
    assert "dagster asset materialize --select '*hidden_states_llama'" in err[0]
    assert "This run's preset is 'tiny': run that command as `DIHAL_PROFILE=tiny dagster " \
           "asset materialize ...`" in err[0]
    assert "n_tokens" not in err[0] and "--config-json" not in err[0]


def test_two_preset_files_of_one_name_never_share_an_upstream(world, tmp_path):
    """`a/p.json` and `b/p.json` with other seeds: the dump made under one is another preset's
    upstream for the other (refused, naming both labels), never read as its own; the same
    content copied to a third folder is the same preset, whose upstream is read."""
    for folder, seed in (("a", 1), ("b", 2), ("c", 1)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "p.json").write_text(json.dumps({"sequences": {"seed": seed}}))
    a, b, c = (PresetResource(name=str(tmp_path / f / "p.json")) for f in "abc")
    la, lb = a.preset().label, b.preset().label
    assert la != lb and c.preset().label == la
    chain = ["corpus", "sequences_llama", "hidden_states_llama"]
    res, err = world.materialize(chain, resources={"preset": a})
    assert res.success, err
    assert _meta(world, res, "hidden_states_llama")["preset"] == la
    res, err = world.materialize(["geometry_llama"], resources={"preset": b})
    assert not res.success
    assert (f"geometry_llama: its upstream hidden_states_llama was made under preset {la!r}, "
            f"this run's preset is {lb!r} (a preset file of this name with other content: "
            "another file, or this one edited); presets are never mixed silently.") in err[0], err[0]
    res, err = world.materialize(["geometry_llama"], resources={"preset": c})
    assert res.success, err
    assert _meta(world, res, "geometry_llama")["preset"] == la
