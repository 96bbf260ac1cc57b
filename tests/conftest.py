"""Shared fixtures. Tests never touch a network hub."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from dihal import heap  # noqa: E402

# the garbage collector as in dihal's own processes (dihal.heap): the test processes load torch,
# transformers' model code and Dagster too
heap.use_in_this_process()
heap.import_model_libraries()

import pytest  # noqa: E402
import torch  # noqa: E402

from dihal.atomic import one_at_a_time  # noqa: E402
from tests.tiny import LOCATE, SWEPT, build_model, copy_world, make_world  # noqa: E402

# The files that take longest (`benchmarks/suite_cpu.py`), first and in this order: under
# `make test` pytest-xdist hands each process two files at the start (`--no-loadscope-reorder`
# keeps this order; its own puts the files with the most tests first, so these few-test files
# came last and the suite ended on one of them alone)
LONGEST_FIRST = ("tests/pipeline/test_scale_out.py", "tests/faults/test_run_faults.py",
                 "tests/pipeline/test_doors.py", "tests/faults/test_interrupt.py",
                 "tests/faults/test_daemon_lifetime.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


def pytest_collection_finish(session):
    heap.settle()  # the test modules and their imports live as long as the session


def shared(tmp_path_factory, name: str, build) -> Path:
    """The folder `name`, made by `build(folder)` once per test session: under `make test` the
    test files run in several pytest-xdist processes, and the first of them to ask builds it
    (the others wait on a lock, then read it) instead of each building its own. A folder whose
    build did not finish (no .built mark) is built again. Read-only for the tests that use it.
    """
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, above each worker's own
    folder = base / f"shared-{name}"
    with one_at_a_time(base / f"shared-{name}.lock", what=f"the shared test world {name}"):
        if not (folder / ".built").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (folder / ".built").write_text("")
    return folder


@pytest.fixture(autouse=True)
def _restore_the_environment():
    """The DIHAL_* and DAGSTER_* variables and the temporary folder as they were before each
    test: the driver, run in process by some tests, sets DIHAL_PROFILE and DIHAL_WORKERS for
    the processes it starts, which would otherwise choose the preset of every later test, and
    points TMPDIR at its private folder (pipeline.private_tmp.private_tmpdir), which a later test's
    server run as another user (PostgreSQL's initdb) cannot enter."""
    import tempfile

    prefixes = ("DIHAL_", "DAGSTER_")
    kept = (*prefixes, "TMPDIR")
    before = {k: v for k, v in os.environ.items() if k.startswith(kept)}
    tempdir = tempfile.tempdir
    yield
    for k in [k for k in os.environ if k.startswith(kept) and k not in before]:
        del os.environ[k]
    os.environ.update(before)
    tempfile.tempdir = tempdir


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread: on a shared 2-core machine, small ops are faster without contention."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture()
def config(tmp_path, monkeypatch):
    """Write a configuration file (dihal.toml) and point $DIHAL_CONFIG at it."""
    from dihal import registry

    # set (not deleted) so that teardown restores it: declare_model writes os.environ itself
    monkeypatch.setenv(registry.DECLARED_ENV, "[]")

    def write(text: str):
        path = tmp_path / "dihal.toml"
        path.write_text(text)
        monkeypatch.setenv(registry.CONFIG_ENV, str(path))
        return path

    return write


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    """The tiny llama's folder, one for the whole session (the worlds below name its path)."""
    return shared(tmp_path_factory, "tiny-llama", lambda f: build_model(f, "llama"))


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
    session (shared). Tests take a private copy (tests.tiny.copy_world), never this one."""

    def build(folder):
        res, err = make_world(folder, tiny_llama_dir).materialize(LOCATE)
        assert res.success, err

    return make_world(shared(tmp_path_factory, "located", build), tiny_llama_dir)


@pytest.fixture(scope="session")
def swept_world(tmp_path_factory, located_world, tiny_llama_dir):
    """The located world plus its three candidate layers swept (tests.tiny.PROTOCOL), once per
    session (shared). Tests take a private copy (tests.tiny.copy_world), never this one."""

    def build(folder):
        w = copy_world(located_world, folder, tiny_llama_dir)
        for layer in SWEPT:
            res, err = w.materialize(["bridge_sweep_llama"], partition=layer)
            assert res.success, err

    folder = shared(tmp_path_factory, "swept", build)
    w = make_world(folder, tiny_llama_dir, folder / "artifacts")
    w.shard = located_world.shard  # copy_world's: the located world's corpus
    return w
