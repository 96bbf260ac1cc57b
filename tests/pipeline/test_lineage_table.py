"""Lineage over the whole stage table, generated from the code location's asset graph: for every
stage and every artifact up its chain, that upstream made again from other inputs (another
fingerprint) makes the stage's artifact stale wherever it is read, so no stage reads, and no
downstream reuses, what was made from the old one. A new stage or a new dependency is covered
by this test as it is, with no test of its own."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dihal.errors import StaleArtifactError
from dihal.run.stages import CODE_VERSIONS
from storage import ArtifactLayout
from storage.artifacts.base import artifact_named
from storage.manifest import Manifest, digest_files, read_manifest, write_manifest
from tests.tiny import tiny_definitions

BACKBONE = "llama"


def _graph(defs) -> dict[str, list[str]]:
    """{asset: its parent assets} of the code location (asset checks left out)."""
    graph = defs.resolve_asset_graph()
    return {k.to_user_string(): sorted(p.to_user_string() for p in graph.get(k).parent_keys)
            for k in graph.get_all_asset_keys()}


def _artifact(layout, asset: str):
    """The artifact that `asset` makes (partition "1" of a partitioned one)."""
    art = artifact_named(layout, asset, BACKBONE)
    if art is None:
        art = artifact_named(layout, f"{asset}[1]", BACKBONE)
    assert art is not None, f"no artifact kind makes the asset {asset}: add it to storage"
    return art


def _ancestors(parents: dict[str, list[str]], asset: str) -> set[str]:
    seen, todo = set(), list(parents[asset])
    while todo:
        a = todo.pop()
        if a not in seen:
            seen.add(a)
            todo.extend(parents[a])
    return seen


@pytest.fixture(scope="module")
def chain(tmp_path_factory, tiny_llama_dir):
    """Every artifact of one backbone's graph, written with its files and a manifest whose
    upstream names its parents' fingerprints, as the stage protocol records them."""
    root = tmp_path_factory.mktemp("lineage") / "artifacts"
    parents = _graph(tiny_definitions(root, tiny_llama_dir))
    layout = ArtifactLayout(root)
    order, done = [], set()

    def visit(asset):
        if asset not in done:
            for p in parents[asset]:
                visit(p)
            done.add(asset)
            order.append(asset)

    for asset in sorted(parents):
        visit(asset)
    for i, asset in enumerate(order):
        art = _artifact(layout, asset)
        art.directory.mkdir(parents=True, exist_ok=True)
        for name in art.files:
            (art.directory / name).write_bytes(f"{asset} {name}".encode())
        ups = {_artifact(layout, p).name: read_manifest(_artifact(layout, p).directory).fingerprint
               for p in parents[asset]}
        write_manifest(art.directory, Manifest(
            stage=art.stage, backbone=art.backbone, fingerprint=f"{i:064x}", config={},
            code_version=CODE_VERSIONS[art.stage],
            upstream=ups, files=digest_files(art.directory)))
    return layout, parents


def test_an_intact_chain_is_read_everywhere(chain):
    layout, parents = chain
    assert len(parents) >= 10  # the whole family: locate, replace, evaluate, compare, report
    for asset in parents:
        _artifact(layout, asset).require()


def test_every_upstream_made_again_makes_every_stage_below_it_stale(chain):
    layout, parents = chain
    pairs = [(s, a) for s in sorted(parents) for a in sorted(_ancestors(parents, s))]
    assert len(pairs) >= 30
    for stage, upstream in pairs:
        up = _artifact(layout, upstream)
        old = read_manifest(up.directory)
        write_manifest(up.directory, replace(old, fingerprint="f" * 64))  # made again
        try:
            with pytest.raises(StaleArtifactError, match="is stale and is not read"):
                _artifact(layout, stage).require()
        finally:
            write_manifest(up.directory, old)
    # each ancestor of each stage was checked; the count says what the table covers
    print(f"lineage: {len(parents)} stages, {len(pairs)} (stage, upstream) pairs")
