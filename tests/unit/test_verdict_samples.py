"""The verdict table of benchmarks/verdict_samples.py: each verdict of the eval, the baselines
and the comparison asked, through its own function, for each outcome it is written for, at a
preset's sample count; what the default's one-temperature frontier gives up, and what study
gives back."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from verdict_samples import ALPHA, main, verdicts  # noqa: E402


@pytest.fixture(scope="module")
def default():
    return {v.name.split(" (")[0]: v for v in verdicts("cpu")}


def test_at_the_default_every_verdict_but_two_comes_out_every_way(default):
    """MAUVE is a diagnostic at 64 samples a side (as before: it needs 512), and a frontier
    at one temperature has no model's Gen.PPL at the held-out text's diversity; every other
    verdict can come out each way it is written, its tests below alpha."""
    short = {name: v.every_way() for name, v in default.items() if not v.every_way().startswith("yes")}
    assert short == {"MAUVE a result, or a diagnostic": "no: never 'a result'",
                     "each model's Gen.PPL at the held-out text's diversity, interpolated "
                     "between its temperatures, or not reached": "no: never 'interpolated'"}
    assert len(default) == 11
    for v in default.values():
        if v.floor.startswith("p"):  # a bootstrap test: its floor is computed, below alpha
            p = float(v.floor.split(">= ")[1].split(" ")[0].rstrip(";"))
            assert p < ALPHA and v.floor.endswith("below alpha 0.05: yes"), v.floor
    pairs = next(v for n, v in default.items() if n.startswith("DiHAL's Gen.PPL higher"))
    assert pairs.reached == {"higher", "lower", "not distinguishable"}
    assert "p (Holm) >= 0.005 (the bootstrap's own floor 0.001, x 5 pairs)" in pairs.floor


def test_study_gives_back_the_frontiers_interpolation_and_small_samples_lose_resolution():
    study = {v.name.split(" (")[0]: v for v in verdicts("study")}
    matched = study["each model's Gen.PPL at the held-out text's diversity, interpolated "
                    "between its temperatures, or not reached"]
    assert matched.reached == {"interpolated", "not reached"}

    def failures_told_apart(n):  # the smallest share of empty samples told from none
        floor = next(v.floor for v in verdicts("cpu", n_samples=n) if "fails_more" in v.name)
        k, of = floor.removeprefix("at least ").split(" empty of ")
        assert of == f"{n} against none"
        return int(k) / n

    assert failures_told_apart(8) > failures_told_apart(64) > 0


def test_the_table_is_printed_with_its_preset(capsys):
    main(["--n-samples", "16"])
    out = capsys.readouterr().out
    assert out.startswith("preset cpu: eval.n_samples 16, baseline.n_samples 16, "
                          "eval.frontier_temperatures [1.0]")
    assert out.count("\n| ") == 12  # the header and one row per verdict
    with pytest.raises(SystemExit):
        main(["--n-samples", "1"])
