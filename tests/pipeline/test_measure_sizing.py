"""The measurement sized by what it needs (benchmarks/measure_sizing.py over
dihal.replace.sizing) on the tiny swept world: its three layers' bridges and ridge controls
measured again at the sweep's own setting reproduce the sweep's measurement and every verdict,
a smaller setting gives a whole row, and a sweep that lacks a layer is refused, naming it and
the command that makes it."""

import json
import math
import shutil
import sys

import pytest

from dihal.errors import MissingArtifactError
from storage import ArtifactLayout, read_manifest
from tests.tiny import PROTOCOL, ROOT, SWEPT, copy_world

sys.path.insert(0, str(ROOT / "benchmarks"))

import measure_sizing  # noqa: E402

FULL = (PROTOCOL["eval_sequences"], PROTOCOL["sampler_steps"])  # the tiny sweep's own setting: (4, 4)


@pytest.fixture(scope="module")
def controlled(tmp_path_factory, swept_world, tiny_llama_dir):
    """A private copy of the session's swept world with the ridge control of each swept layer
    (regression_sweep_llama), as a default run leaves its sweep."""
    w = copy_world(swept_world, tmp_path_factory.mktemp("sized"), tiny_llama_dir)
    for layer in SWEPT:
        res, err = w.materialize(["regression_sweep_llama"], partition=layer)
        assert res.success, err
    return w


def test_the_full_setting_reproduces_the_sweep_and_a_smaller_one_gets_a_whole_row(
        controlled, tiny_backbone):
    from dihal.replace.sizing import Setting, markdown

    full, small = Setting(*FULL), Setting(2, 2)
    lines = []
    report = measure_sizing.size(ArtifactLayout(controlled.root), "llama", tiny_backbone,
                                 [small, full], progress=lines.append)
    assert report.full_setting == full
    assert [r.setting for r in report.rows] == [full, small]  # largest first
    assert [line.split(" ")[1] for line in lines] == list(SWEPT)  # a progress line per layer

    # measured again at its own setting, each layer's bridge and ridge control give the
    # sweep's numbers back
    again = report.rows[0]
    for layer in SWEPT:
        for stage, key in (("bridge_sweep", "hybrid_nll"), ("regression_sweep", "ridge_hybrid_nll")):
            stored = read_manifest(controlled.path(stage, f"layer_{int(layer):03d}"))
            got = again.to_dict()[key][layer]
            assert got == pytest.approx(stored.info["metrics"]["hybrid_nll"], rel=1e-6,
                                        abs=1e-9), (stage, layer)
    assert report.full_reproduction < 1e-5
    ref = report.reference.verdicts
    assert again.spearman == pytest.approx(1.0) and again.same and again.changed == ()
    assert (again.verdicts.oracle, again.verdicts.worst) == (ref.oracle, ref.worst)
    assert again.verdicts.primary.verdict == ref.primary.verdict
    assert again.verdicts.primary.p_min == ref.primary.p_min  # the floor is the design's
    assert again.seconds > 0

    # the smaller setting: a row with every field
    row = report.rows[1].to_dict()
    assert (row["sequences"], row["sampler_steps"]) == (2, 2)
    assert -1.0 <= row["spearman"] <= 1.0
    assert 0 < row["primary_p"] <= 1 and 0 < row["primary_floor"] <= 1
    assert row["oracle"] in (1, 2, 3) and row["worst"] in (1, 2, 3)
    assert row["seconds"] > 0 and isinstance(row["verdicts_same"], bool)
    assert row["verdicts_same"] == (row["changed"] == [])
    assert set(row["hybrid_nll"]) == set(SWEPT)
    assert all(math.isfinite(v) for v in row["hybrid_nll"].values())

    # the rule adopts the smallest setting that meets it; the full one always does here
    meets = report.rows[1].meets(report.agreement)
    assert report.adopted.setting == (small if meets else full)
    table = markdown(report)
    body = [ln for ln in table.splitlines() if ln.startswith("| (")]
    assert [ln.split(" | ")[0] for ln in body] == [
        f"| {full.label}, the sweep's, as stored", f"| {full.label}", f"| {small.label}"]
    assert all(ln.count(" | ") == 7 for ln in body)  # eight cells
    chosen = report.adopted.setting
    assert f"Adopted: {chosen.sequences} held-out sequences and K = {chosen.sampler_steps}" in table
    json.dumps(report.to_dict())  # every number can be written out


def test_the_cli_writes_the_table_and_the_numbers(controlled, tiny_llama_dir, tmp_path,
                                                  monkeypatch, capsys):
    monkeypatch.setenv("DIHAL_LLAMA_PATH", str(tiny_llama_dir))
    out = tmp_path / "sizing.json"
    measure_sizing.main(["--artifacts", str(controlled.root), "--backbone", "llama",
                         "--sequences", "2", "--steps", "2", "--threads", "1",
                         "--out", str(out), "--out", str(tmp_path / "sizing.md")])
    printed = capsys.readouterr()
    assert "| (2, 2) |" in printed.out and "[sizing] layer 3 (3/3)" in printed.err
    assert (tmp_path / "sizing.md").read_text() in printed.out
    written = json.loads(out.read_text())
    assert written["full_setting"] == {"sequences": FULL[0], "sampler_steps": FULL[1]}
    assert [(r["sequences"], r["sampler_steps"]) for r in written["rows"]] == [(2, 2)]


def test_an_incomplete_sweep_is_refused_naming_the_missing_layers(swept_world, tmp_path,
                                                                  tiny_llama_dir):
    # the session's swept world made no ridge control (read, not changed)
    with pytest.raises(MissingArtifactError) as e:
        measure_sizing.complete_sweep(ArtifactLayout(swept_world.root), "llama")
    msg = str(e.value)
    assert "ridge control" in msg and "layers [1, 2, 3]" in msg
    assert "regression_sweep_llama' --partition 1" in msg
    assert "python -m pipeline.main --backbone llama --stop-after sweep" in msg

    # a layer without its bridge
    w = copy_world(swept_world, tmp_path, tiny_llama_dir)
    shutil.rmtree(w.path("bridge_sweep", "layer_002"))
    with pytest.raises(MissingArtifactError) as e:
        measure_sizing.complete_sweep(ArtifactLayout(w.root), "llama")
    msg = str(e.value)
    assert "no sweep bridge made on the current hidden states for layers [2]" in msg
    assert "bridge_sweep_llama' --partition 2" in msg
    assert "ridge control made against the current sweep bridge for layers [1, 3]" in msg
    # and the command line refuses it before loading any backbone
    with pytest.raises(MissingArtifactError, match=r"layers \[2\]"):
        measure_sizing.main(["--artifacts", str(w.root), "--backbone", "llama"])
