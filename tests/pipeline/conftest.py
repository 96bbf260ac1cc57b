"""The pipeline tests' worlds, as (definitions, corpus shard, artifact root): the tiny llama's
code location over a generated corpus, fresh or with its Locate graph already materialised."""

from __future__ import annotations

import pytest

from tests.tiny import copy_world, make_world


@pytest.fixture()
def tiny(tmp_path, tiny_llama_dir):
    """A fresh tiny world: nothing materialised."""
    w = make_world(tmp_path, tiny_llama_dir)
    return w.defs, w.shard, w.root


@pytest.fixture()
def located(tmp_path, located_world, tiny_llama_dir):
    """A private copy of the session's located world: materialising its Locate graph again
    (same configs, same shard) finds every artifact cached."""
    w = copy_world(located_world, tmp_path, tiny_llama_dir)
    return w.defs, w.shard, w.root
