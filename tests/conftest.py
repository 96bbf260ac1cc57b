"""Shared fixtures. Tests never touch a network hub."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.tiny import LOCATE, SWEPT, build_model, copy_world, make_world  # noqa: E402

# The files that take minutes (real daemons, drivers, servers, the embedded weights), longest
# first, as measured by `make test`'s durations. Collected first, so that with the test files
# shared among pytest-xdist processes (`make test`: --dist loadfile --no-loadscopereorder) they
# start first and the last file to start is a short one.
LONGEST_FIRST = (
    "tests/pipeline/test_doors.py",
    "tests/faults/test_run_faults.py",
    "tests/pipeline/test_scale_out.py",
    "tests/pipeline/test_gpu_rehearsal.py",
    "tests/unit/test_backbones.py",
    "tests/unit/test_judge.py",
    "tests/faults/test_interrupt.py",
    "tests/unit/test_sampling_reproducible.py",
    "tests/pipeline/test_compare_pipeline.py",
    "tests/pipeline/test_replace_pipeline.py",
    "tests/faults/test_daemon_lifetime.py",
    "tests/pipeline/test_dg.py",
    "tests/pipeline/test_ui.py",
)


def pytest_collection_modifyitems(config, items):
    """The LONGEST_FIRST files first, in that order; every other test after them, in the order
    collected. A file named there that no longer exists is an error, not a silent no-op."""
    root = Path(__file__).resolve().parent.parent
    missing = [f for f in LONGEST_FIRST if not (root / f).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py LONGEST_FIRST names missing files: {missing}")
    rank = {f: i for i, f in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


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
