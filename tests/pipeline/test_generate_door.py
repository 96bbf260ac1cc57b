"""The doors to a trained hybrid: every Python example of docs/api.md runs, in order, on a tiny
artifact root, and so does its command; the command line prints the models side by side with
their time per token and refuses, before generating, an unknown backbone, a prompt longer than
a model takes, a bridge never made (naming the command that makes it) and another backbone.

The artifact root is the one `make run` leaves, for a backbone named smollm2 that is here the
tiny llama (DIHAL_SMOLLM2_PATH): the bridge at l* (layer 2), the sweep's bridge of layer 2 and
its ridge control, trained on the tiny model's hidden states."""

import re
import shlex
import shutil
import subprocess
import sys

import pytest
import torch

from dihal.api import BackboneMismatchError, DihalHybrid
from dihal.config import BridgeProtocol, ExtractConfig
from dihal.errors import MissingArtifactError
from dihal.run.stages import CODE_VERSIONS
from pipeline.generate import main
from pipeline.hybrids import from_artifacts, ridge_from_artifacts
from storage import Bridge, RegressionControl, SweepBridge
from storage.manifest import Manifest
from tests.tiny import ROOT, build_model, dump_states, random_sequences

DOC = ROOT / "docs" / "api.md"
LAYER = 2
SEQ_LEN = 48  # the hybrid takes 48 positions: the page's prompts and 32 new tokens fit


@pytest.fixture(scope="module")
def door_root(tmp_path_factory, tiny_llama_dir):
    from dihal.backbones import load_backbone
    from dihal.replace.control_hybrids import ridge_control
    from dihal.replace.stage import train_layer
    from storage.states import StateReader

    out = tmp_path_factory.mktemp("door")
    bb = load_backbone("smollm2", path=tiny_llama_dir, cache_dir=out / "cache")
    seqs = random_sequences(bb, n_train=8, n_val=6, T=SEQ_LEN)
    for ids in seqs.values():
        ids[:, 0] = bb.bos_id  # every sequence starts with the BOS, as the pipeline's
    reader = StateReader(dump_states(bb, seqs, out / "dump"))
    protocol = BridgeProtocol(d_model=32, n_layers=1, n_heads=2, batch_size=4, sampler_steps=4,
                              eval_sequences=4, epochs=2.0, lr=1e-2)
    extract = ExtractConfig()
    trained = train_layer(bb, reader, LAYER, protocol, out / "ckpt", train_ids=seqs["train"],
                          extract=extract)
    ridge = ridge_control(bb, reader, LAYER, protocol, train_ids=seqs["train"], extract=extract)
    root = out / "artifacts"
    for art, made in ((Bridge(root, "smollm2"), trained),
                      (SweepBridge(root, "smollm2", LAYER), trained),
                      (RegressionControl(root, "smollm2", LAYER), ridge)):
        art.write(Manifest(stage=art.stage, backbone="smollm2", fingerprint="f" * 64,
                           code_version=CODE_VERSIONS[art.stage],
                           config=protocol.to_dict(),
                           info={**made.info(), "metadata": made.metadata()}), made)
    return root


@pytest.fixture()
def door(door_root, tiny_llama_dir, tmp_path, monkeypatch):
    """The environment after `make run`: the artifact root, the backbone's weights, a working
    directory of the test's own."""
    monkeypatch.setenv("DIHAL_ARTIFACTS", str(door_root))
    monkeypatch.setenv("DIHAL_SMOLLM2_PATH", str(tiny_llama_dir))
    monkeypatch.chdir(tmp_path)
    return door_root


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), re.S)


def test_every_python_example_of_the_api_page_runs(door, capsys):
    code = blocks("python")
    assert len(code) == 7
    names: dict = {}
    for i, block in enumerate(code, 1):
        exec(compile(block, f"docs/api.md, python block {i}", "exec"), names)  # noqa: S102
    out = capsys.readouterr().out
    hybrid = names["hybrid"]
    assert isinstance(hybrid, DihalHybrid) and (hybrid.layer, hybrid.sampler_steps) == (LAYER, 4)
    assert "DiHAL (l=2, K=4) at layer 2 with K = 4 sampler steps" in out
    assert "DiHAL (l=2, K=8 marginal)" in out and " ms per token" in out
    for name in ("backbone", "DiHAL (l=2, K=4)", "ridge (l=2)", "layer-drop (l=2)"):
        assert name in out  # the side-by-side header
    assert "| text | tokens | DiHAL (l=2, K=4) NLL |" in out and "| position | token |" in out
    assert "['hybrid.json', 'weights.safetensors']" in out
    assert names["same"] and names["again"].layer == LAYER
    assert f"l* = {names['located'].l_star} from" in out and "(l*) |" in out


def test_the_api_pages_command_prints_the_models_side_by_side(door, capsys):
    (command,) = [line for block in blocks("bash") for line in block.splitlines()
                  if line.startswith("python -m pipeline.generate")]
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "pipeline.generate"]
    assert main(argv[3:] + ["--width", "90"]) == 0
    out = capsys.readouterr().out
    heads = out.splitlines()[3].split(" | ")
    assert [h.strip() for h in heads] == ["backbone", "DiHAL (l=2, K=4)", "ridge (l=2)"]
    assert len(re.findall(r"\d+\.\d ms/token", out)) == 3
    assert "prompt 1: 'the of the'" in out  # the tiny tokenizer knows "the" and "of" only


def test_the_command_compares_prompts_samples_and_controls(door, capsys):
    argv = ["--prompt", "the world was", "--prompt", "", "--max-new-tokens", "6",
            "--do-sample", "--temperature", "0.8", "--top-p", "0.9", "--seed", "3",
            "--sampler-steps", "2", "--rule", "marginal", "--layer", str(LAYER), "--layer-drop"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "sampled at temperature 0.8, top_p 0.9, seed 3" in captured.out
    assert "prompt 1: 'the world was'" in captured.out and "prompt 2: ''" in captured.out
    assert "DiHAL (l=2, K=2 marginal)" in captured.out and "layer-drop (l=2)" in captured.out
    # progress on stderr: the bridge read, the backbone loaded, each model's time
    assert "[dihal] swept bridge of layer 2 of smollm2" in captured.err
    assert re.search(r"\[dihal\] backbone: \d+ tokens in [\d.]+ s", captured.err)


def test_the_command_refuses_bad_input_before_any_work(door, capsys):
    assert main(["--backbone", "smollm3", "--prompt", "x"]) == 2
    err = capsys.readouterr().err
    assert "unknown backbone 'smollm3': known backbones are" in err and "'smollm2'" in err
    long = " ".join(["the"] * 40)  # 41 tokens with the BOS: + 32 new ones > 48 positions
    assert main(["--prompt", "the world", "--prompt", long]) == 2
    captured = capsys.readouterr()
    assert ("prompt 1 is 41 tokens (BOS included), with max_new_tokens=32: DiHAL (l=2, K=4) "
            "must take 72 positions, but it takes at most 48") in captured.err
    assert "shorten the prompt to at most 17 tokens" in captured.err
    assert captured.out == "" and "generating with" not in captured.err  # nothing generated
    assert main(["--prompt", "x", "--layer", "30"]) == 2
    assert "--layer 30: the candidate layers of smollm2 are 1..29" in capsys.readouterr().err
    assert main(["--prompt", "x", "--top-p", "0"]) == 2
    assert "top_p must be in (0, 1]" in capsys.readouterr().err


def test_a_bridge_never_made_is_refused_naming_the_command(door, tmp_path, capsys):
    assert main(["--prompt", "x", "--root", str(tmp_path / "empty")]) == 1
    err = capsys.readouterr().err
    assert "no trained bridge at l* for backbone smollm2" in err
    assert "dagster asset materialize --select '*bridge_smollm2'" in err and "make run" in err
    assert main(["--prompt", "x", "--layer", "1"]) == 1  # layer 1 was not swept
    assert "dagster asset materialize --select '*bridge_sweep_smollm2' --partition 1" in \
        capsys.readouterr().err
    # --ridge without the ridge control: refused before the backbone is loaded
    shutil.copytree(door, tmp_path / "no_ridge")
    shutil.rmtree(tmp_path / "no_ridge" / "smollm2" / "regression_sweep")
    assert main(["--prompt", "x", "--ridge", "--root", str(tmp_path / "no_ridge")]) == 1
    err = capsys.readouterr().err
    assert "no ridge control of layer 2 for backbone smollm2" in err
    assert "dagster asset materialize --select '*regression_sweep_smollm2' --partition 2" in err
    assert "loading backbone" not in err
    hybrid = from_artifacts("smollm2", tmp_path / "no_ridge")
    with pytest.raises(MissingArtifactError, match="no ridge control of layer 2"):
        ridge_from_artifacts(hybrid, tmp_path / "no_ridge")
    assert ridge_from_artifacts(hybrid).name == "ridge (l=2)"


def test_the_module_runs_as_a_command(door):
    done = subprocess.run([sys.executable, "-m", "pipeline.generate", "--backbone", "nosuch",
                           "--prompt", "x"], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("python -m pipeline.generate: error: unknown backbone 'nosuch'")


def test_a_bridge_is_refused_on_another_backbone_naming_both(door, tmp_path):
    from dihal.backbones import load_backbone

    other = load_backbone("smollm2", path=build_model(tmp_path / "other", seed=3),
                          cache_dir=tmp_path / "cache")
    with pytest.raises(BackboneMismatchError) as caught:
        from_artifacts("smollm2", backbone=other)
    message = str(caught.value)
    assert "the bridge of layer 2 was made on backbone 'smollm2'" in message
    assert other.weights.revision in message and str(tmp_path / "other") in message
    hybrid = from_artifacts("smollm2")  # on its own backbone it loads
    assert torch.isfinite(hybrid.logits(hybrid.encode("the world").unsqueeze(0))).all()
