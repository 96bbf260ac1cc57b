"""The training-budget study as an asset (budget_<b>, assets/budget.py over
dihal.replace.budget) on the tiny swept world: one layer at two budgets gives every model's
point, made on the sweep bridge's protocol and the corpus's own training sequences; it is
cached once made; an interrupted study resumes with the points it had kept, training only the
rest."""

import math

import pytest

from storage import ArtifactLayout, BudgetStudy, read_manifest
from tests.tiny import PROTOCOL, copy_world

BUDGETS = [2, 4]
# measured as the tiny sweep measured its bridges (None: the sweep bridge's setting; the cpu
# preset in force sets the full measurement, more held-out sequences than the tiny world has)
RUN = {"budget_llama": {"config": {"budgets": BUDGETS, "residual": True,
                                   "eval_sequences": None, "sampler_steps": None}}}


@pytest.fixture
def world(swept_world, tmp_path, tiny_llama_dir):
    return copy_world(swept_world, tmp_path, tiny_llama_dir)


def _points(world, layer: int):
    return BudgetStudy(ArtifactLayout(world.root), "llama", layer).points()


def test_one_layer_gives_every_models_point_at_every_budget_and_is_cached(world):
    res, err = world.materialize(["budget_llama"], partition="2", **RUN)
    assert res.success, err
    points = _points(world, 2)
    got = sorted((p.model, p.train_steps) for p in points)
    assert got == sorted([("backbone", 0)] + [(m, b) for b in BUDGETS
                                              for m in ("bridge", "ridge", "network", "residual")])
    assert all(math.isfinite(p.hybrid_nll) and p.layer == 2 for p in points)
    seq_len = 16  # the tiny preset's sequences
    for p in points:
        if p.model in ("bridge", "network", "residual"):
            assert p.tokens == p.train_steps * PROTOCOL["batch_size"] * seq_len
            assert 0 < p.distinct_tokens <= p.tokens
        if p.model in ("bridge", "residual"):
            assert p.val_loss is not None and p.t1_loss is not None
    m = read_manifest(world.path("budget", "layer_002"))
    assert m.config["protocol"]["d_model"] == PROTOCOL["d_model"]  # the sweep bridge's protocol
    assert "bridge_sweep_llama[2]" in m.upstream
    assert m.info["estimate"]["seconds"] > 0

    again, err = world.materialize(["budget_llama"], partition="2", **RUN)
    assert again.success, err
    assert read_manifest(world.path("budget", "layer_002")).fingerprint == m.fingerprint
    assert _points(world, 2) == points  # reused, not made again


def test_an_interrupted_study_resumes_from_the_points_it_kept(world, monkeypatch):
    import dihal.replace.budget as budget

    calls, fail_at = [], [3]
    real = budget.train_budget_point

    def failing(*args, **kwargs):
        calls.append(args[3])
        if len(calls) == fail_at[0]:
            raise RuntimeError("the worker died")  # a run stopped mid-way
        return real(*args, **kwargs)

    monkeypatch.setattr(budget, "train_budget_point", failing)
    res, err = world.materialize(["budget_llama"], partition="1", **RUN)
    assert not res.success and "the worker died" in err[0]
    kept = BudgetStudy(ArtifactLayout(world.root), "llama", 1).kept_points()
    # the backbone, the first budget's ridge map and its first two trained models
    assert sorted((p.model, p.train_steps) for p in kept) == sorted(
        [("backbone", 0), ("ridge", 2), (calls[0], 2), (calls[1], 2)])

    calls.clear()
    fail_at[0] = None
    res, err = world.materialize(["budget_llama"], partition="1", **RUN)
    assert res.success, err
    assert len(calls) == 3 * len(BUDGETS) - 2  # only what was not kept is trained
    points = {(p.model, p.train_steps): p for p in _points(world, 1)}
    assert len(points) == 1 + 4 * len(BUDGETS)
    assert all(points[(p.model, p.train_steps)] == p for p in kept)  # the kept points, as kept


def test_the_command_states_its_plan_and_refuses_a_layer_not_swept(world, monkeypatch, capsys):
    import shutil

    from pipeline.budget import main

    monkeypatch.setenv("DIHAL_ARTIFACTS", str(world.root))
    assert main(["--backbone", "llama", "--budgets", "2,4", "--dry-run"]) == 0
    said = capsys.readouterr().err
    assert "[budget] llama: layers [1, 2, 3], budgets [2, 4] steps" in said
    assert "the study needs about" in said and "GiB of disk" in said

    shutil.rmtree(world.path("bridge_sweep", "layer_003"))
    assert main(["--backbone", "llama", "--layers", "1,3", "--dry-run"]) == 1
    said = capsys.readouterr().err
    assert "bridge_sweep_llama" in said and "--partition 3" in said
