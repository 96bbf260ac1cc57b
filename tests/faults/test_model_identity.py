"""A model known by its content: a fine-tuned model saved into the same folder as the one a
chain was made from, the usual workflow, never reuses the old model's artifacts; and a judge
folder saved again with other weights is another judge for the artifacts it scores."""

from __future__ import annotations

import shutil

import numpy as np
import torch

from storage import HiddenStates, Sequences
from tests.tiny import make_world

DUMP = ["corpus", "sequences_llama", "hidden_states_llama", "geometry_llama"]


def resave_with_other_weights(folder) -> None:
    """What a user's second fine-tune does: other weights saved into the same folder."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder))
    with torch.no_grad():
        for p in model.model.layers[0].parameters():
            p.mul_(1.5)
    model.save_pretrained(str(folder))


def test_weights_saved_again_into_the_model_folder_remake_the_dump(tmp_path, tiny_llama_dir):
    model = shutil.copytree(tiny_llama_dir, tmp_path / "model")
    world = make_world(tmp_path, model)
    res, err = world.materialize(DUMP)
    assert res.success, err
    before_rev = Sequences(world.root, "llama").require().info["revision"]
    before = np.asarray(HiddenStates(world.root, "llama").reader().layer("val", 2))
    res, err = world.materialize(DUMP)
    assert res.success, err
    assert all(world.cached(res).values())  # nothing changed: everything reused

    resave_with_other_weights(model)
    res, err = world.materialize(DUMP)
    assert res.success, err
    assert world.cached(res) == {"corpus": True, "sequences_llama": False,
                                 "hidden_states_llama": False, "geometry_llama": False}
    after_rev = Sequences(world.root, "llama").require().info["revision"]
    assert after_rev != before_rev and after_rev.startswith(f"local:{model.resolve()}@sha256=")
    after = np.asarray(HiddenStates(world.root, "llama").reader().layer("val", 2))
    assert not np.allclose(after, before)  # the dump is the new model's


def test_a_judge_folder_saved_again_is_another_judge(tmp_path, tiny_llama_dir):
    from resources import JudgeResource
    from storage import ArtifactLayout

    judge = shutil.copytree(tiny_llama_dir, tmp_path / "judge")
    resource, layout = JudgeResource(name=str(judge)), ArtifactLayout(tmp_path / "artifacts")
    first = resource.identity("llama", layout)
    assert first.startswith(f"{judge}@local:{judge.resolve()}@sha256=")
    assert resource.identity("llama", layout) == first
    resave_with_other_weights(judge)
    assert resource.identity("llama", layout) != first
    assert JudgeResource(name="").identity("llama", layout) == "gemma3-270m"  # embedded: its name
