"""The presets' values: every profile sweeps every candidate layer by default (the driver's
plan), the cpu profile's replicate seeds stay on a subset, and `study` trains 3 seeds on every
layer with twice the held-out sequences."""

import pytest

import pipeline.main as driver
from dihal.run.profiles import load_profile


def _args(*argv):
    return driver.build_parser().parse_args(list(argv))


@pytest.mark.parametrize("profile", ["cpu", "study"])
def test_the_default_sweep_is_every_candidate_layer(profile):
    layers, _ = driver.plan(_args("--profile", profile))
    assert layers == list(range(1, 30))  # SmolLM2: 30 layers, candidates 1..29
    # --layers and --sweep-count still choose fewer
    assert driver.plan(_args("--layers", "1,2,3,4,8"))[0] == [1, 2, 3, 4, 8]


def test_the_study_preset_trains_three_seeds_on_every_layer_with_more_held_out_text():
    _, study = load_profile("study")
    assert study["bridge_sweep"] == {"seeds": 3, "eval_sequences": 64}
    assert study["sequences"]["n_val"] >= 2 * study["bridge_sweep"]["eval_sequences"]
    assert study["eval"]["n_samples"] == study["baseline"]["n_samples"] == 128
    args = _args("--profile", "study")
    layers, _ = driver.plan(args)
    assert driver.seed_plan(args, layers) == {"seeds": 3, "seed_layers": []}  # all layers
    # the cpu default keeps 2 seeds on 4 of them, evenly spread
    args = _args()
    assert driver.seed_plan(args, driver.plan(args)[0]) == {"seeds": 2,
                                                            "seed_layers": [1, 10, 20, 29]}


@pytest.mark.parametrize(("profile", "whole"), [("cpu", False), ("study", True), ("gpu", True),
                                                ("gpu-smollm2", True), ("tiny", False)])
def test_the_whole_temperature_frontier_is_the_study_and_gpu_presets(profile, whole):
    """The default (cpu) draws the frontier at the main rows' temperature alone, the eval and
    the baselines alike; study and the gpu presets draw the whole frontier; the report's
    frontier section names the preset that draws it (WHOLE_FRONTIER_PRESET)."""
    from dihal.config import FRONTIER_TEMPERATURES, BaselineRunConfig, EvalConfig
    from dihal.run.profiles import WHOLE_FRONTIER_PRESET

    _, stages = load_profile(profile)
    ev = EvalConfig(**{k: tuple(v) if isinstance(v, list) else v
                       for k, v in stages.get("eval", {}).items()})
    base = BaselineRunConfig(**{k: tuple(v) if isinstance(v, list) else v
                                for k, v in stages.get("baseline", {}).items()})
    want = FRONTIER_TEMPERATURES if whole else (ev.temperature,)
    assert ev.frontier_temperatures == base.frontier_temperatures == want
    assert load_profile(WHOLE_FRONTIER_PRESET)[1]["eval"]["frontier_temperatures"] == list(
        FRONTIER_TEMPERATURES)


def test_the_cpu_sweep_measures_at_its_sized_setting_and_nothing_else_follows_it():
    """The cpu sweep measures its bridges on 8 held-out sequences at K = 8 (the sizing rule's
    choice); the bridge at l*, the budget study and its generation keep the full measurement
    and the bridge's K; the study preset measures its sweep in full."""
    from dihal import config as dc
    from dihal.replace.budget import study_protocol

    _, cpu = load_profile("cpu")
    sweep = dc.BridgeProtocol(**cpu.get("bridge_sweep", {}))
    bridge = dc.BridgeProtocol(**cpu.get("bridge", {}))
    assert (sweep.eval_sequences, sweep.sampler_steps) == (8, 8)
    assert (bridge.eval_sequences, bridge.sampler_steps) == (32, 16)
    for stage, cls in (("budget", dc.BudgetConfig),
                       ("budget_generation", dc.BudgetGenerationConfig)):
        study = study_protocol(sweep.to_dict(), cls(**cpu[stage]))
        assert study.sampler_steps == bridge.sampler_steps, stage
    assert study_protocol(sweep.to_dict(), dc.BudgetConfig(**cpu["budget"])).eval_sequences == 32
    _, study = load_profile("study")
    full = dc.BridgeProtocol(**study["bridge_sweep"])
    assert (full.eval_sequences, full.sampler_steps) == (64, 16)
