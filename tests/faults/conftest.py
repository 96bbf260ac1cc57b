"""The fault-injection suite's world: a private copy, in each test's folder, of the tiny world
with its Locate graph and three swept layers materialised once per session (tests/conftest.py's
swept_world), so that each test damages its own copy."""

from __future__ import annotations

import pytest

from tests.tiny import World, copy_world


@pytest.fixture()
def world(tmp_path, swept_world, tiny_llama_dir) -> World:
    """A private copy of the swept world's artifacts (same shard, same model)."""
    return copy_world(swept_world, tmp_path, tiny_llama_dir)
