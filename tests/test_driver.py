"""The driver checks its arguments before any work, and a failed step ends with its cause."""

import time

import dagster as dg
import pytest

import pipeline.main as driver


@pytest.mark.parametrize(("argv", "says"), [
    (["--layers", "0,99"], "--layers 0,99: 0, 99 out of range: smollm2 has 30 layers, "
                           "the candidate layers are 1..29"),
    (["--backbone", "llama", "--layers", "32"], "32 out of range: llama has 32 layers, the "
                                                "candidate layers are 1..31"),
    (["--layers", "1,x"], "give comma-separated integers (smollm2 has 30 layers"),
    (["--backbone", "gpt2"], "unknown backbone 'gpt2': known backbones are ['gemma3', 'llama', "
                             "'qwen', 'smollm2']"),
    (["--baselines", "sed,foo"], "unknown foo; the baselines are diffusion-lm, sed, ld4lg, codar"),
    (["--sweep-count", "0"], "--sweep-count 0: give at least 1"),
    (["--workers", "0"], "--workers 0: give at least 1"),
    (["--profile", "tpu"], "unknown profile 'tpu': give one of ['cpu', 'gpu', 'gpu-smollm2'] or a .json file"),
])
def test_bad_arguments_fail_at_once_naming_the_valid_values(argv, says, calls, capsys):
    t0 = time.monotonic()
    with pytest.raises(SystemExit) as exit_:
        driver.main(argv)
    assert time.monotonic() - t0 < 0.5
    assert exit_.value.code == 2 and calls == []
    assert says in capsys.readouterr().err.strip().splitlines()[-1]


def _tiny_defs() -> dg.Definitions:
    class ShardChanged(RuntimeError):
        pass

    @dg.asset
    def wrapped():
        try:
            raise ShardChanged("shard s1 changed: re-materialise the corpus asset")
        except ShardChanged as exc:
            raise ValueError("a wrapper with no news") from exc

    @dg.asset
    def refused():
        try:
            raise ShardChanged("the inner reason")
        except ShardChanged as exc:
            raise dg.Failure(description="sequences_x: the stage's own words") from exc

    return dg.Definitions(assets=[wrapped, refused])


@pytest.mark.parametrize(("selection", "last"), [
    ("key:wrapped", "wrapped: ShardChanged: shard s1 changed: re-materialise the corpus asset"),
    ("key:refused", "refused: sequences_x: the stage's own words"),
])
def test_a_failed_step_ends_stderr_with_its_root_cause(selection, last, capsys):
    defs = _tiny_defs()
    res = dg.materialize(list(defs.assets), selection=dg.AssetSelection.from_string(selection),
                         instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    with pytest.raises(SystemExit) as exit_:
        driver._fail(selection, 1.0, driver.failure_causes(res.all_events))
    assert exit_.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == last
    assert err[-2].startswith(f"FAILED {selection}") and err[-2].endswith("; the cause:")
    assert not any("Error occurred while executing op" in line for line in err[-2:])


def test_the_driver_needs_a_persistent_instance(monkeypatch, capsys):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv("DIHAL_PROFILE", "cpu")  # main() sets them for the code location
    monkeypatch.setenv("DIHAL_WORKERS", "1")
    with pytest.raises(SystemExit) as exit_:
        driver.main(["--layers", "1,2,3", "--stop-after", "sweep"])
    assert exit_.value.code == 2
    assert "DAGSTER_HOME is not set" in capsys.readouterr().err


def test_an_eval_row_prints_as_one_short_line():
    """The driver prints each generation row's key numbers, never its per-sample lists."""
    from pipeline.main import eval_line

    row = {"model": "ridge (l=1)", "gen_ppl": 355.41, "gen_ppl_low": 275.5, "gen_ppl_high": 469.2,
           "diversity": 0.8705, "mean_length": 49.67, "ms_per_token": 3.505,
           "sample_nll": [363.8] * 64, "dihal_log_ppl_diff": 0.7858,
           "dihal_log_ppl_diff_low": 0.4141, "dihal_log_ppl_diff_high": 1.147,
           "dihal_verdict": "above"}
    line = eval_line(row)
    assert line == ("  ridge (l=1): Gen.PPL 355.4 [275.5, 469.2], diversity 0.871, mean length "
                    "49.7 words, 3.50 ms/token; DiHAL's log Gen.PPL minus this: +0.786 "
                    "[+0.414, +1.147] (above)")
    assert "363.8" not in line
    # DiHAL's own row has no paired standing; a row made before a metric existed prints n/a
    assert eval_line({"model": "DiHAL (l=1)", "gen_ppl": 779.8}).endswith(
        "Gen.PPL 779.8 [n/a, n/a], diversity n/a, mean length n/a words, n/a ms/token")
