"""The full_training stage on hand-made bridges of the tiny backbone (no training): each role
sampled at the protocol's K and at the (rule, K) chosen on validation, one row where they are
the same sampler; the spread over training seeds per role."""

from dataclasses import replace

import pytest

from dihal.compare.stage import full_training
from dihal.config import EvalConfig
from dihal.results import BridgeMetrics
from tests.tiny import trained_bridge

LAYER = 2
ROLES = {"geometry l*": LAYER, "oracle": LAYER}


def _metrics(val_loss, t1_loss, hybrid_nll, seconds=2.0):
    return BridgeMetrics(layer=LAYER, val_loss=val_loss, recon_error=0.5, hybrid_nll=hybrid_nll,
                         backbone_nll=3.0, top1_agreement=0.4, hybrid_ppl=50.0, backbone_ppl=20.0,
                         init_val_loss=2.0, train_loss=0.9, steps=8, train_tokens=4096,
                         seconds=seconds, resumed_from_step=0, denoiser_parameters=1000,
                         t1_loss=t1_loss)


@pytest.fixture(scope="module")
def judge(tiny_llama_dir, tmp_path_factory):
    from dihal.evaluate.judge import load_judge

    return load_judge(str(tiny_llama_dir), cache_dir=tmp_path_factory.mktemp("judge"))


def _run(bb, judge, chosen, seed_metrics=()):
    trained = replace(trained_bridge(bb, LAYER), metrics=_metrics(1.0, 0.3, 4.0),
                      seed_metrics=list(seed_metrics))
    return full_training(ROLES, lambda layer: trained, bb, judge,
                         EvalConfig(n_samples=3, length=6, batch_size=3), chosen=chosen)


def test_full_training_rows_at_the_protocol_and_the_chosen_sampler(tiny_backbone, judge):
    res = _run(tiny_backbone, judge, {"rule": "marginal", "steps": 2, "hybrid_nll": 3.9})
    assert [(r["role"], r["sampler"], r["steps"], r["rule"]) for r in res.rows] == [
        (role, s, k, rule) for role in ROLES
        for s, k, rule in (("protocol", 4, "ancestral"), ("chosen on validation", 2, "marginal"))]
    assert res.sampler["protocol_steps"] == 4 and res.sampler["chosen_is_protocol"] is False
    for protocol, chosen in (res.rows[:2], res.rows[2:]):
        assert protocol["dihal_verdict"] is None  # the chosen row is paired with this one
        assert chosen["dihal_verdict"] in ("above", "below", "not distinguishable")
        assert chosen["paired_samples"] <= 3 and chosen["gen_ppl"] > 0
    # one seed: no spread, its seconds recorded
    assert {r["n_seeds"] for r in res.rows} == {1} and res.rows[0]["val_loss_seed_mean"] is None
    assert res.rows[0]["train_seconds"] == 2.0 and res.rows[0]["t1_loss"] == 0.3


def test_full_training_one_row_when_the_chosen_is_the_protocols(tiny_backbone, judge):
    res = _run(tiny_backbone, judge, {"rule": "ancestral", "steps": 4, "hybrid_nll": 3.9},
               seed_metrics=[_metrics(1.2, 0.5, 4.4, seconds=3.0)])
    assert [(r["role"], r["sampler"]) for r in res.rows] == [(role, "protocol") for role in ROLES]
    assert res.sampler["chosen_is_protocol"] is True
    # two seeds: the kept one (1.0, 0.3, 4.0) and a replicate (1.2, 0.5, 4.4)
    row = res.rows[0]
    assert row["n_seeds"] == 2 and row["train_seconds_all_seeds"] == 5.0
    for m, (lo, hi) in {"val_loss": (1.0, 1.2), "t1_loss": (0.3, 0.5),
                        "hybrid_nll": (4.0, 4.4)}.items():
        assert row[f"{m}_seed_min"] == lo and row[f"{m}_seed_max"] == hi
        assert row[f"{m}_seed_mean"] == pytest.approx((lo + hi) / 2)
        assert row[f"{m}_seed_sd"] == pytest.approx((hi - lo) / 2 ** 0.5)


def test_a_failed_full_budget_regression_control_says_what_to_run(tmp_path):
    """The eval goes on without its regression row, and the warning and the eval's note say
    what to run; the control is trained with the bridge's protocol, one step and one seed."""
    from types import SimpleNamespace

    import dagster as dg

    from assets.evaluate import full_regression
    from dihal.config import BridgeProtocol
    from storage import ArtifactLayout

    class Run:
        backbone, layout, warned, asked = "llama", ArtifactLayout(tmp_path), [], []

        def art(self, kind, key=None):
            return kind(self.layout, self.backbone, key)

        def obtain(self, art, protocol, upstream, compute, **extra):
            self.asked.append((type(art).__name__, protocol, extra))
            raise dg.Failure(description="training diverged (loss NaN at step 3)")

        def warn(self, msg):
            self.warned.append(msg)

    run = Run()
    bridge = SimpleNamespace(config=BridgeProtocol(epochs=2.0, seeds=3).to_dict())
    control, why = full_regression(run, bridge, 2)
    assert control is None
    assert run.asked == [("FullRegressionControl", BridgeProtocol(epochs=2.0, seeds=1, steps=1),
                          {"layer": 2})]
    assert why.startswith("the full-budget regression control of layer 2 could not be trained "
                          "(training diverged (loss NaN at step 3)); materialise eval_llama again")
    assert run.warned == [why + ": the eval has no regression row"]


def test_full_training_takes_l_stars_rows_from_the_eval_where_it_drew_them(tiny_backbone):
    """The eval sampled this bridge at l* with the same config: its rows, not new samples (no
    judge is needed); at the chosen K too, where that is not the protocol's."""
    from dihal.compare.stage import GENERATION_KEYS

    def row(role, steps, rule, ppl):
        return {"model": role, "role": role, "layer": LAYER, "steps": steps, "rule": rule,
                **dict.fromkeys(GENERATION_KEYS, ppl), "repetition": 0.0, "mean_length": 5.0}

    ev = [row("dihal", 4, "ancestral", 10.0), row("backbone", None, None, 5.0),
          row("dihal (chosen K)", 2, "marginal", 9.0)]
    trained = replace(trained_bridge(tiny_backbone, LAYER), metrics=_metrics(1.0, 0.3, 4.0))
    res = full_training(ROLES, lambda layer: trained, tiny_backbone, None, EvalConfig(),
                        chosen={"rule": "marginal", "steps": 2, "hybrid_nll": 3.9}, from_eval=ev)
    assert [(r["sampler"], r["steps"], r["gen_ppl"], r["from_eval"]) for r in res.rows] == [
        ("protocol", 4, 10.0, True), ("chosen on validation", 2, 9.0, True)] * len(ROLES)
