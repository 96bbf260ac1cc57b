"""Generation at the training budget's ends as an asset (budget_generation_<b>, assets/budget.py
over dihal.compare.budget_generation) on the tiny swept world: DiHAL at l* and CoDAR at the
lowest and the highest budget, each with its Gen.PPL, diversity and budget; cached once made;
an interrupted run resumes with the rows it had kept; the command states its cost."""

import math
from dataclasses import replace

import pytest

from dihal.run.profiles import PROFILES
from storage import ArtifactLayout, BudgetGeneration, current_budget_generation, read_manifest
from storage.manifest import write_manifest
from tests.tiny import PROTOCOL, copy_world

# DiHAL sampled at the tiny sweep bridge's K (None; the cpu preset in force sets the bridge's)
CONFIG = {**PROFILES["tiny"]["budget_generation"], "sampler_steps": None}
RUN = {"budget_generation_llama": {"config": CONFIG}}
ASSET = ["budget_generation_llama"]


@pytest.fixture
def world(swept_world, tmp_path, tiny_llama_dir):
    return copy_world(swept_world, tmp_path, tiny_llama_dir)


def test_dihal_at_l_star_and_codar_at_both_ends_are_made_and_cached(world):
    res, err = world.materialize(ASSET, **RUN)
    assert res.success, err
    art = BudgetGeneration(ArtifactLayout(world.root), "llama")
    rows = art.rows()
    l_star = read_manifest(world.path("layer_score")).info["l_star"]
    low, high = min(CONFIG["budgets"]), max(CONFIG["budgets"])
    assert [(r.model, r.train_steps) for r in rows] == [("dihal", low), ("codar", low),
                                                  ("dihal", high), ("codar", high)]
    seq_len = 16  # the tiny preset's sequences
    for r in rows:
        assert r.layer == l_star and r.n_samples == CONFIG["n_samples"]
        assert r.tokens == r.train_steps * PROTOCOL["batch_size"] * seq_len
        assert 0 < r.distinct_tokens <= r.tokens
        assert math.isfinite(r.gen_ppl) and r.gen_ppl_low <= r.gen_ppl <= r.gen_ppl_high
        assert r.diversity_low <= r.diversity <= r.diversity_high
    assert len(art.samples()) == len(rows) * CONFIG["n_samples"]
    m = read_manifest(world.path("budget_generation"))
    assert m.config["protocol"]["d_model"] == PROTOCOL["d_model"]  # l*'s sweep bridge's
    assert m.config["layer"] == l_star and f"bridge_sweep_llama[{l_star}]" in m.upstream
    assert "layer_score_llama" in m.upstream and m.info["estimate"]["seconds"] > 0
    assert not (world.path("budget_generation.partial")).exists()

    again, err = world.materialize(ASSET, **RUN)
    assert again.success, err
    assert world.cached(again) == {"budget_generation_llama": True}
    assert art.rows() == rows
    # the report finds it, made on the current hidden states
    layout = ArtifactLayout(world.root)
    assert current_budget_generation(layout, "llama").rows() == rows
    # the hidden states made again from other inputs (another fingerprint): not this run's
    m = read_manifest(world.path("hidden_states"))
    write_manifest(world.path("hidden_states"), replace(m, fingerprint="0" * 64))
    assert current_budget_generation(layout, "llama") is None


def test_an_interrupted_run_resumes_from_the_rows_it_kept(world, monkeypatch):
    import dihal.compare.budget_generation as G

    calls, fail = [], [True]
    real = G.codar_at_budget

    def failing(*args, **kwargs):
        calls.append(args[5].train_steps)
        if fail[0] and len(calls) == 2:
            raise RuntimeError("the worker died")  # a run stopped mid-way
        return real(*args, **kwargs)

    monkeypatch.setattr(G, "codar_at_budget", failing)
    res, err = world.materialize(ASSET, **RUN)
    assert not res.success and "the worker died" in err[0]
    kept = BudgetGeneration(ArtifactLayout(world.root), "llama").kept()
    low, high = min(CONFIG["budgets"]), max(CONFIG["budgets"])
    assert [r.key for r, _ in kept] == [("dihal", low), ("codar", low), ("dihal", high)]
    assert all(len(s) == CONFIG["n_samples"] for _, s in kept)

    calls.clear()
    fail[0] = False
    res, err = world.materialize(ASSET, **RUN)
    assert res.success, err
    assert calls == [high]  # only CoDAR at the highest budget was made
    rows = BudgetGeneration(ArtifactLayout(world.root), "llama").rows()
    assert [r for r in rows if r.key != ("codar", high)] == [r for r, _ in kept]


def test_the_command_states_its_cost_and_refuses_without_a_layer_score(world, monkeypatch,
                                                                        capsys):
    import shutil

    from pipeline.budget import main

    monkeypatch.setenv("DIHAL_ARTIFACTS", str(world.root))
    assert main(["--backbone", "llama", "--generation", "--budgets", "2,4", "--dry-run"]) == 0
    said = capsys.readouterr().err
    l_star = read_manifest(world.path("layer_score")).info["l_star"]
    assert f"[budget] llama: DiHAL at l* = {l_star} and CoDAR at 2, 4 steps" in said
    assert "generation at 2, 4 steps needs about" in said and "GiB of disk" in said

    shutil.rmtree(world.path("layer_score"))
    assert main(["--backbone", "llama", "--generation", "--dry-run"]) == 1
    said = capsys.readouterr().err
    assert "layer_score_llama" in said
