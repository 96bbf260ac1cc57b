"""Shared fixtures. Tests never touch a network hub."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.tiny import LOCATE, SWEPT, build_model, copy_world, make_world  # noqa: E402


@pytest.fixture(autouse=True)
def _restore_the_environment():
    """The DIHAL_* and DAGSTER_* variables as they were before each test: the driver, run in
    process by some tests, sets DIHAL_PROFILE and DIHAL_WORKERS for the processes it starts,
    which would otherwise choose the preset of every later test."""
    prefixes = ("DIHAL_", "DAGSTER_")
    before = {k: v for k, v in os.environ.items() if k.startswith(prefixes)}
    yield
    for k in [k for k in os.environ if k.startswith(prefixes) and k not in before]:
        del os.environ[k]
    os.environ.update(before)


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread: on a shared 2-core machine, small ops are faster without contention."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("tiny-llama"), "llama")


@pytest.fixture(scope="session")
def tiny_qwen_dir(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("tiny-qwen3"), "qwen3")


@pytest.fixture(scope="session")
def tiny_gemma_dir(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("tiny-gemma3"), "gemma3")


@pytest.fixture(scope="session")
def tiny_backbone(tiny_llama_dir, tmp_path_factory):
    from dihal.backbones import load_backbone

    return load_backbone("llama", path=tiny_llama_dir, cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture()
def calls(monkeypatch):
    """Records any use of the Dagster instance by the driver: a refused command must not
    reach it."""
    import dagster as dg

    made = []
    monkeypatch.setattr(dg.DagsterInstance, "get", staticmethod(lambda: made.append("get")))
    return made


@pytest.fixture(scope="session")
def located_world(tmp_path_factory, tiny_llama_dir):
    """The tiny world (tests.tiny.make_world) with its Locate graph materialised, once per
    session. Tests take a private copy (tests.tiny.copy_world), never this one."""
    w = make_world(tmp_path_factory.mktemp("located"), tiny_llama_dir)
    res, err = w.materialize(LOCATE)
    assert res.success, err
    return w


@pytest.fixture(scope="session")
def swept_world(tmp_path_factory, located_world, tiny_llama_dir):
    """The located world plus its three candidate layers swept (tests.tiny.PROTOCOL), once per
    session. Tests take a private copy (tests.tiny.copy_world), never this one."""
    w = copy_world(located_world, tmp_path_factory.mktemp("swept"), tiny_llama_dir)
    for layer in SWEPT:
        res, err = w.materialize(["bridge_sweep_llama"], partition=layer)
        assert res.success, err
    return w
