"""Arguments whose meaning is wrong are refused before any work (exit 2, nothing reaches the
Dagster instance), naming the argument and what is allowed."""

import time

import pytest

import pipeline.main as driver


@pytest.mark.parametrize(("argv", "says"), [
    (["--layers", "5"], "a sweep of 1 layer(s) (5) feeds bridgeability, which needs at least 5 "
                        "distinct layers"),
    (["--layers", "1,2,3,4"], "a sweep of 4 layer(s) (1, 2, 3, 4) feeds bridgeability"),
    (["--layers", "1,1,1"], "--layers 1,1,1: 1 given more than once"),
    (["--layers", "1,2,3,4,4"], "--layers 1,2,3,4,4: 4 given more than once"),
    (["--layers="], "--layers '': give a comma-separated list with no empty items"),
    (["--layers", "1,,2"], "--layers '1,,2': give a comma-separated list with no empty items"),
    (["--baselines", ","], "--baselines ',': give a comma-separated list with no empty items"),
    (["--baselines", ""], "--baselines '': give a comma-separated list with no empty items"),
    (["--baselines", "sed,sed"], "--baselines sed,sed: sed given more than once"),
    (["--sweep-count", "4"], "a sweep of 4 layer(s) (1, 2, 3, 4) feeds bridgeability"),
    (["--layers", "1,2,3,4,5", "--all-layers"], "give one of them"),
    (["--layers", "1,2,3,4,5", "--sweep-count", "5"], "--sweep-count 5: it sizes the default "
                                                      "sweep"),
])
def test_arguments_with_a_wrong_meaning_are_refused_before_any_work(argv, says, calls, capsys):
    t0 = time.monotonic()
    with pytest.raises(SystemExit) as exit_:
        driver.main(argv)
    assert time.monotonic() - t0 < 0.5
    assert exit_.value.code == 2 and calls == []
    assert says in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(("argv", "layers", "stop_after"), [
    (["--layers", "5,1,9,3,7"], [1, 3, 5, 7, 9], "report"),
    (["--layers", "5", "--stop-after", "sweep"], [5], "sweep"),  # feeds no bridgeability
    (["--layers", "2,4", "--skip-bridgeability"], [2, 4], "sweep"),
    (["--layers", "2", "--skip-bridgeability", "--stop-after", "locate"], [2], "locate"),
])
def test_a_short_sweep_is_allowed_where_nothing_ranks_it(argv, layers, stop_after):
    ap_args = driver.build_parser().parse_args(argv)
    assert driver.plan(ap_args)[0] == layers
    assert ap_args.stop_after == stop_after
