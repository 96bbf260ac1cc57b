"""The pre-flight through the driver: on the tiny model (tests.tiny_location), a run the corpus
cannot fill is refused before the Dagster instance is touched; with a GPU, the facts are
gathered in a child process; the default run (the embedded SmolLM2 at the cpu profile) passes
it. The checks themselves: tests/unit/test_preflight.py."""

import pytest

from dihal.run.preflight import PreflightError
from tests.tiny import ROOT, make_docs, tiny_profile, write_shard


def test_the_driver_refuses_before_any_run(tmp_path, tiny_llama_dir, monkeypatch, capsys):
    """Through pipeline.main on the tiny model: a profile whose training split the corpus
    cannot fill is refused by the pre-flight, before the Dagster instance is touched."""
    import sys

    import pipeline.main as driver

    made = []

    def get():
        made.append("get")
        raise LookupError("past the pre-flight")

    monkeypatch.setattr(driver.dg.DagsterInstance, "get", staticmethod(get))
    monkeypatch.setenv("DIHAL_TINY_MODEL", str(tiny_llama_dir))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.delitem(sys.modules, "tests.tiny_location", raising=False)
    shard = write_shard(tmp_path / "s.json.gz", make_docs(30))
    seqs = {"seq_len": 16, "n_train": 500, "n_val": 6, "val_fraction": 0.3, "max_tokens_per_doc": 40}
    profile = tiny_profile(tmp_path / "big.json", shard, sequences=seqs)
    argv = ["--backbone", "llama", "--module", "tests.tiny_location", "--layers", "1,2,3",
            "--skip-bridgeability", "--profile", str(profile)]
    with pytest.raises(SystemExit) as exit_:
        driver.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and made == []
    assert "REFUSED: pre-flight refused llama (1 problem(s))" in err
    assert "corpus: the corpus yields too few sequences of 16 tokens (train:" in err
    assert "Even whole documents give only train" in err
    fits = tiny_profile(tmp_path / "tiny.json", shard)
    with pytest.raises(LookupError):  # past the pre-flight: the instance is asked for
        driver.main(argv[:-1] + [str(fits)])
    assert made == ["get"]
    assert "pre-flight: llama at profile" in capsys.readouterr().out


def test_the_driver_refuses_sequences_longer_than_the_positions_before_tokenising(
        tmp_path, tiny_llama_dir, monkeypatch, capsys):
    """The tiny llama's config.json says max_position_embeddings 256: a profile of 300-token
    sequences is refused, naming the model, its limit and the setting, before the corpus is
    tokenised or the model loaded."""
    import sys

    import pipeline.main as driver
    from resources import BackboneResource

    monkeypatch.setattr(driver.dg.DagsterInstance, "get",
                        staticmethod(lambda: pytest.fail("past the pre-flight")))
    monkeypatch.setattr(BackboneResource, "load_tokenizer",
                        lambda *a: pytest.fail("the tokenizer was loaded"))
    monkeypatch.setenv("DIHAL_TINY_MODEL", str(tiny_llama_dir))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.delitem(sys.modules, "tests.tiny_location", raising=False)
    shard = write_shard(tmp_path / "s.json.gz", make_docs(30))
    seqs = {"seq_len": 300, "n_train": 8, "n_val": 6, "val_fraction": 0.3}
    profile = tiny_profile(tmp_path / "long.json", shard, sequences=seqs)
    with pytest.raises(SystemExit) as exit_:
        driver.main(["--backbone", "llama", "--module", "tests.tiny_location", "--layers",
                     "1,2,3", "--skip-bridgeability", "--profile", str(profile)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "REFUSED: pre-flight refused the sequences of llama (1 problem(s))" in err
    assert ("positions: sequences.seq_len 300 (the BOS included) is longer than llama's "
            "max_position_embeddings 256") in err


def test_with_a_gpu_the_facts_are_gathered_in_a_child_process(tmp_path, tiny_llama_dir, monkeypatch):
    """Where CUDA is available the pre-flight's model load runs in a spawned process (its CUDA
    context must not stay in the driver); the child here has no GPU and computes on the CPU."""
    import os
    from argparse import Namespace

    import torch

    from pipeline.preflight import preflight

    monkeypatch.setenv("DIHAL_TINY_MODEL", str(tiny_llama_dir))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT),
                                                      os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    shard = write_shard(tmp_path / "s.json.gz", make_docs(30))
    big = {"seq_len": 16, "n_train": 500, "n_val": 6, "val_fraction": 0.3, "max_tokens_per_doc": 40}
    args = Namespace(profile=str(tiny_profile(tmp_path / "p.json", shard, sequences=big)),
                     backbone="llama", workers=1, module="tests.tiny_location")
    with pytest.raises(PreflightError, match="corpus: the corpus yields too few sequences"):
        preflight(args, [1, 2, 3], print)


CHILD_WHERE_SIGTERM_IS_IGNORED = """
import signal, sys
from argparse import Namespace

import torch
from dagster._utils.interrupts import setup_interrupt_handlers

from dihal.run.preflight import PreflightError
from pipeline.preflight import preflight

# a background job of a non-interactive shell starts with SIGINT ignored; Dagster maps SIGTERM
# to SIGINT's handler, so the process, and every child it spawns, ignores SIGTERM as well
signal.signal(signal.SIGINT, signal.SIG_IGN)
setup_interrupt_handlers()
assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
import multiprocessing.process

terminate = multiprocessing.process.BaseProcess.terminate


def told_by_signal(self):  # what a Pool's exit does to a child still running: SIGTERM
    print("SIGTERM SENT TO THE CHILD", flush=True)
    terminate(self)


multiprocessing.process.BaseProcess.terminate = told_by_signal
torch.cuda.is_available = lambda: True
args = Namespace(profile=sys.argv[1], backbone="llama", workers=1, module="tests.tiny_location")
try:
    preflight(args, [1, 2, 3], print)
except PreflightError as exc:
    print("REFUSED", exc)
"""


def test_the_pre_flights_child_process_ends_where_sigterm_is_ignored(tmp_path, tiny_llama_dir):
    """The pre-flight's child (with a GPU) ends when its work is done even where the driver's
    process ignores SIGTERM (started with SIGINT ignored, once Dagster mapped SIGTERM to it):
    a child that is only sent SIGTERM would never end, and the pre-flight with it."""
    import os
    import signal
    import subprocess
    import sys

    shard = write_shard(tmp_path / "s.json.gz", make_docs(30))
    big = {"seq_len": 16, "n_train": 500, "n_val": 6, "val_fraction": 0.3, "max_tokens_per_doc": 40}
    profile = tiny_profile(tmp_path / "p.json", shard, sequences=big)
    env = {**os.environ, "DIHAL_TINY_MODEL": str(tiny_llama_dir),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", CHILD_WHERE_SIGTERM_IS_IGNORED, str(profile)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the process and its child, which ignores SIGTERM
        out, _ = proc.communicate()
        pytest.fail("the pre-flight still waited on its child after 240 s:\n" + out[-3000:])
    assert proc.returncode == 0, out[-3000:]
    assert "REFUSED" in out and "corpus: the corpus yields too few sequences" in out, out[-3000:]
    assert "SIGTERM SENT TO THE CHILD" not in out, out[-3000:]  # it would ignore it


@pytest.mark.slow
def test_the_default_run_passes_the_pre_flight(tmp_path, monkeypatch, capsys):
    """`make run`'s command (the embedded SmolLM2, the cpu profile, its default layers) passes
    the pre-flight on this host and goes on to the Dagster instance."""
    import pipeline.main as driver

    def get():
        raise LookupError("past the pre-flight")

    monkeypatch.setattr(driver.dg.DagsterInstance, "get", staticmethod(get))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    for name in ("DIHAL_PROFILE", "DIHAL_WORKERS"):  # unset (the driver sets them: restored)
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    with pytest.raises(LookupError):
        driver.main([])
    out = capsys.readouterr().out
    assert "pre-flight: smollm2 at profile cpu with 1 worker(s) fits (corpus, host memory, disk" in out


def test_the_preflight_reads_a_hub_datasets_fields_not_the_embedded_sample(
        tmp_path, tiny_llama_dir, monkeypatch, capsys):
    """A preset whose corpus is a Hub-layout dataset with no such text field: the pre-flight
    refuses it naming the dataset's fields, before any row is streamed and before the Dagster
    instance is touched (it used to read the embedded sample and say "fits")."""
    import sys

    import datasets

    import pipeline.main as driver
    from tests.tiny import hub_folder, tiny_profile
    from tests.tiny import hub_rows as rows

    made, streamed = [], []
    monkeypatch.setattr(driver.dg.DagsterInstance, "get", staticmethod(
        lambda: made.append("get") or (_ for _ in ()).throw(LookupError("past the pre-flight"))))
    real = datasets.IterableDataset.__iter__
    monkeypatch.setattr(datasets.IterableDataset, "__iter__",
                        lambda self: streamed.append(1) or real(self))
    monkeypatch.setenv("DIHAL_TINY_MODEL", str(tiny_llama_dir))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.delitem(sys.modules, "tests.tiny_location", raising=False)
    folder = hub_folder(tmp_path / "ds", {"train": rows(120)})
    hub = {"hf_dataset": str(folder), "hf_id_field": "doc", "max_docs": 500}
    argv = ["--backbone", "llama", "--module", "tests.tiny_location", "--layers", "1,2,3",
            "--skip-bridgeability", "--profile"]
    wrong = tiny_profile(tmp_path / "wrong.json", folder, corpus={**hub, "hf_text_field": "text"})
    with pytest.raises(SystemExit) as exit_:
        driver.main([*argv, str(wrong)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and made == [] and streamed == []
    assert "REFUSED: pre-flight refused llama (1 problem(s))" in err
    assert "has no field 'text' (hf_text_field); its fields are body, doc, source" in err
    right = tiny_profile(tmp_path / "right.json", folder, corpus={**hub, "hf_text_field": "body"})
    with pytest.raises(LookupError):  # past the pre-flight, having read the dataset's rows
        driver.main([*argv, str(right)])
    assert made == ["get"] and streamed
