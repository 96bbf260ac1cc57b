"""An upstream made again under another config after its downstream: the web UI shows the
downstream stale, and no door reads the downstream as if it belonged to the new chain (lineage
checked where an upstream is read, through the whole chain, not only the nearest link)."""

from __future__ import annotations

import dagster as dg

from dihal.errors import StaleArtifactError
from storage import ArtifactLayout, Geometry, LayerScore
from storage.artifacts.base import KINDS, artifact_named
from storage.manifest import read_manifest
from tests.tiny import LOCATE, TINY_RUN

OTHER_SEQUENCES = {"config": {**TINY_RUN["sequences_llama"]["config"], "seed": 5}}


def _remake_the_dump_under_another_seed(world, instance):
    res, err = world.materialize(["sequences_llama", "hidden_states_llama"], instance=instance,
                                 sequences_llama=OTHER_SEQUENCES)
    assert res.success, err
    assert not any(world.cached(res).values())


def test_an_upstream_made_again_makes_its_downstream_stale_in_the_ui_and_unread(world):
    # Dagster's own stale status, as the web UI shows it (the resolver its GraphQL uses)
    from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
    from dagster._core.loader import LoadingContextForTest

    instance = dg.DagsterInstance.ephemeral()
    res, err = world.materialize(LOCATE, instance=instance)
    assert res.success and all(world.cached(res).values()), err
    _remake_the_dump_under_another_seed(world, instance)

    status = CachingStaleStatusResolver(instance, world.defs.resolve_asset_graph(),
                                        LoadingContextForTest(instance))
    assert status.get_status(dg.AssetKey("geometry_llama")) == StaleStatus.STALE
    assert status.get_status(dg.AssetKey("layer_score_llama")) == StaleStatus.STALE

    # the layer score alone, from the UI or the CLI: refused, naming the stale geometry and the
    # command; never reported as cached from the old dump
    res, err = world.materialize(["layer_score_llama"], instance=instance)
    assert not res.success
    assert "geometry_llama" in err[0] and "is stale and is not read" in err[0]
    assert "dagster asset materialize --select '*geometry_llama'" in err[0]
    # reading it directly (the report, a notebook) is refused the same way
    layout = ArtifactLayout(world.root)
    try:
        LayerScore(layout, "llama").require()
        raise AssertionError("a layer score of the old dump was read")
    except StaleArtifactError as exc:
        assert "hidden_states_llama" in str(exc) and "geometry_llama" in str(exc)

    # the command it names remakes the chain from the new dump; then all is read again
    res, err = world.materialize(LOCATE, instance=instance, sequences_llama=OTHER_SEQUENCES)
    assert res.success, err
    assert world.cached(res) == {"corpus": True, "sequences_llama": True,
                                 "hidden_states_llama": True, "geometry_llama": False,
                                 "layer_score_llama": False}
    assert (LayerScore(layout, "llama").require().upstream["geometry_llama"]
            == Geometry(layout, "llama").require().fingerprint)


def test_a_sweep_on_a_new_dump_is_never_ranked_by_the_old_dumps_layer_score(world):
    """Bridgeability reads the layer score and the geometry beside the sweep: a sweep made on
    a new dump while the score is the old dump's is refused, not ranked."""
    instance = dg.DagsterInstance.ephemeral()
    _remake_the_dump_under_another_seed(world, instance)
    for layer in ("1", "2", "3"):
        res, err = world.materialize(["bridge_sweep_llama"], partition=layer, instance=instance,
                                     sequences_llama=OTHER_SEQUENCES)
        assert res.success, err
    res, err = world.materialize(["bridgeability_llama"], instance=instance)
    assert not res.success
    assert "is stale and is not read" in err[0] and "hidden_states_llama" in err[0]


def test_every_upstream_a_manifest_names_resolves_to_the_artifact_that_holds_it(swept_world):
    """The lineage check finds each upstream by its name: every name in the swept world's
    manifests resolves to a folder whose manifest is that artifact's, and every kind's name
    (partitioned or not, of this backbone or another, one with _ in it) to that kind."""
    layout = ArtifactLayout(swept_world.root)
    names = set()
    for manifest_path in swept_world.root.rglob("manifest.json"):
        m = read_manifest(manifest_path.parent)
        if m is not None:
            names.update(m.upstream)
    assert {"corpus", "sequences_llama", "hidden_states_llama", "geometry_llama"} <= names
    for name in names:
        art = artifact_named(layout, name, "llama")
        assert art is not None and art.name == name, name
        assert art.manifest() is not None, name
    for kind in KINDS:
        for owner, reader in (("llama", "llama"), ("my_model", "llama"), ("my_model", None)):
            made = kind(layout, None if kind.stage == "corpus" else owner,
                        "3" if kind.keyed else None)
            found = artifact_named(layout, made.name, reader)
            assert type(found) is kind and found.directory == made.directory, made.name
    assert artifact_named(layout, "no_such_asset_llama", "llama") is None
    assert artifact_named(layout, "bridge_sweep_llama", "llama") is None  # it is partitioned
    assert artifact_named(layout, "bridge_sweep_llama", "gemma3") is None


def test_each_stage_records_every_asset_it_depends_on_as_its_upstream(swept_world):
    """What the generated table test (tests/unit/test_lineage_table.py) assumes of the real
    stages: the manifest of each artifact in the swept world names an artifact of each asset
    its Dagster asset depends on, so the lineage check sees the whole graph."""
    graph = swept_world.defs.resolve_asset_graph()
    layout = ArtifactLayout(swept_world.root)
    checked = 0
    for key in graph.get_all_asset_keys():
        asset = key.to_user_string()
        art = artifact_named(layout, asset, "llama") or artifact_named(layout, f"{asset}[1]",
                                                                        "llama")
        m = art.manifest() if art is not None else None
        if m is None:
            continue  # not made in the swept world
        recorded = {name.partition("[")[0] for name in m.upstream}
        assert {p.to_user_string() for p in graph.get(key).parent_keys} <= recorded, asset
        checked += 1
    assert checked >= 6  # corpus .. layer score, the sweep
