"""The full_training stage on hand-made bridges of the tiny backbone (no training): each role
sampled at the protocol's K and at the (rule, K) chosen on validation, one row where they are
the same sampler; the spread over training seeds per role."""

from dataclasses import replace

import pytest

from dihal.compare.stage import full_training
from dihal.config import EvalConfig
from dihal.generation_rows import RoleSample, Sample
from dihal.rows import BridgeMetrics
from tests.tiny import trained_bridge

LAYER = 2
ROLES = {"geometry l*": LAYER, "oracle": LAYER}


def _metrics(val_loss, t1_loss, hybrid_nll, seconds=2.0):
    return BridgeMetrics(layer=LAYER, val_loss=val_loss, recon_error=0.5, hybrid_nll=hybrid_nll,
                         backbone_nll=3.0, top1_agreement=0.4, hybrid_ppl=50.0, backbone_ppl=20.0,
                         init_val_loss=2.0, train_loss=0.9, train_steps=8, train_tokens=4096,
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


def _stored(res) -> list[dict]:
    """The result's rows as storage writes them, each read back as written (the same
    columns, values and order)."""
    from dihal.generation_inputs import FullTrainingRow

    rows = [r.to_dict() for r in res.rows]
    for d in rows:
        assert list(FullTrainingRow.from_dict(d).to_dict().items()) == list(d.items())
    return rows


def test_full_training_rows_at_the_protocol_and_the_chosen_sampler(tiny_backbone, judge):
    res = _run(tiny_backbone, judge, {"rule": "marginal", "sampler_steps": 2, "hybrid_nll": 3.9})
    assert [(r["role"], r["sampler"], r["sampler_steps"], r["rule"]) for r in _stored(res)] == [
        (role, s, k, rule) for role in ROLES
        for s, k, rule in (("protocol", 4, "ancestral"), ("chosen on validation", 2, "marginal"))]
    assert res.sampler.protocol_sampler_steps == 4 and res.sampler.chosen_is_protocol is False
    for protocol, chosen in (_stored(res)[:2], _stored(res)[2:]):
        assert protocol["dihal_verdict"] is None  # the chosen row is paired with this one
        assert chosen["dihal_verdict"] in ("above", "below", "not distinguishable")
        assert chosen["paired_samples"] <= 3 and chosen["gen_ppl"] > 0
    # one seed: no spread, its seconds recorded
    assert {r["n_seeds"] for r in _stored(res)} == {1} and _stored(res)[0]["val_loss_seed_mean"] is None
    assert _stored(res)[0]["train_seconds"] == 2.0 and _stored(res)[0]["t1_loss"] == 0.3


def test_full_training_one_row_when_the_chosen_is_the_protocols(tiny_backbone, judge):
    res = _run(tiny_backbone, judge, {"rule": "ancestral", "sampler_steps": 4, "hybrid_nll": 3.9},
               seed_metrics=[_metrics(1.2, 0.5, 4.4, seconds=3.0)])
    assert [(r["role"], r["sampler"]) for r in _stored(res)] == [(role, "protocol") for role in ROLES]
    assert res.sampler.chosen_is_protocol is True
    # two seeds: the kept one (1.0, 0.3, 4.0) and a replicate (1.2, 0.5, 4.4)
    row = _stored(res)[0]
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
    assert run.asked == [("FullRegressionControl", BridgeProtocol(epochs=2.0, seeds=1, sampler_steps=1),
                          {"layer": 2})]
    assert why.startswith("the full-budget regression control of layer 2 could not be trained "
                          "(training diverged (loss NaN at step 3)); materialise eval_llama again")
    assert run.warned == [why + ": the eval has no regression row"]


def test_full_training_takes_l_stars_rows_from_the_eval_where_it_drew_them(tiny_backbone):
    """The eval sampled this bridge at l* with the same config: its rows, not new samples (no
    judge is needed); at the chosen K too, where that is not the protocol's."""
    from dihal.generation_rows import GENERATION_KEYS

    def row(role, steps, rule, ppl):
        return {"model": role, "role": role, "layer": LAYER, "sampler_steps": steps, "rule": rule,
                **dict.fromkeys(GENERATION_KEYS, ppl), "repetition": 0.0, "mean_length": 5.0}

    ev = [row("dihal", 4, "ancestral", 10.0), row("backbone", None, None, 5.0),
          row("dihal (chosen K)", 2, "marginal", 9.0)]
    trained = replace(trained_bridge(tiny_backbone, LAYER), metrics=_metrics(1.0, 0.3, 4.0))
    res = full_training(ROLES, lambda layer: trained, tiny_backbone, None, EvalConfig(),
                        chosen={"rule": "marginal", "sampler_steps": 2, "hybrid_nll": 3.9}, from_eval=ev)
    assert [(r["sampler"], r["sampler_steps"], r["gen_ppl"], r["from_eval"]) for r in _stored(res)] == [
        ("protocol", 4, 10.0, True), ("chosen on validation", 2, 9.0, True)] * len(ROLES)


def test_full_training_keeps_every_roles_samples_and_tests_the_roles_paired(tiny_backbone, judge):
    """Every role's samples are kept with their judge scores, and the roles' Gen.PPL are
    compared paired by sample index: two roles on the same bridge draw the same samples, so
    their difference is exactly 0 and not told apart."""
    res = _run(tiny_backbone, judge, {"rule": "ancestral", "sampler_steps": 4, "hybrid_nll": 3.9})
    assert {(s.role, s.sampler) for s in res.samples} == {(r, "protocol") for r in ROLES}
    assert sorted(s.sample.index for s in res.samples if s.role == "oracle") == [0, 1, 2]
    for s in res.samples:
        assert (s.tokens is None) == (not s.sample.text.strip())
        assert s.sample.seed == 0 and s.layer == LAYER and s.sample.model.startswith("DiHAL")
    oracle = next(r for r in _stored(res) if r["role"] == "oracle")
    scored = sum(1 for s in res.samples if s.role == "oracle" and s.tokens)
    assert oracle["pairs_vs_l_star"] == scored
    if scored >= 2:
        assert oracle["log_ppl_diff_vs_l_star"] == 0.0
        assert oracle["verdict_vs_l_star"] == "not distinguishable"
        assert oracle["p_holm_vs_l_star"] >= oracle["p_vs_l_star"]


def test_paired_roles_pair_samples_by_index_not_by_position():
    """A sample the judge could not score (empty) is left out of its pair by INDEX: the other
    samples stay paired with their own index (by position they would slip by one)."""
    import math

    from dihal.compare.stage import paired_roles
    from dihal.generation_inputs import FullTrainingRow

    def samples(role, nll_per_token, empty=()):
        return [RoleSample(role, LAYER, "protocol", Sample("DiHAL", i, 0, "" if i in empty else "x"),
                           nll=None if i in empty else nll_per_token[i] * 10,
                           tokens=None if i in empty else 10) for i in range(len(nll_per_token))]

    a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    b = [v + 0.5 for v in a]  # every paired sample 0.5 nats per token worse
    rows = [FullTrainingRow(r, LAYER, sampler="protocol") for r in ("geometry l*", "oracle", "worst")]
    got = samples("geometry l*", a, empty={1}) + samples("oracle", b) + samples("worst", a)
    oracle, worst = (r.to_dict() for r in paired_roles(rows, got, seed=0)[1:])
    assert oracle["pairs_vs_l_star"] == 5
    assert oracle["log_ppl_diff_vs_l_star"] == pytest.approx(-0.5)
    # paired, every pair differs by exactly 0.5: the interval is a point, the verdict firm
    assert oracle["log_ppl_diff_low_vs_l_star"] == pytest.approx(-0.5)
    assert oracle["verdict_vs_l_star"] == "below"  # l*'s Gen.PPL lower
    assert worst["log_ppl_diff_vs_l_star"] == pytest.approx(0.0, abs=1e-12)
    assert worst["log_ppl_diff_vs_oracle"] == pytest.approx(0.5)
    # Holm over the three pairs
    ps = [oracle["p_vs_l_star"], worst["p_vs_l_star"], worst["p_vs_oracle"]]
    assert sorted([oracle["p_holm_vs_l_star"], worst["p_holm_vs_l_star"],
                   worst["p_holm_vs_oracle"]])[0] == pytest.approx(min(1.0, 3 * min(ps)))
    assert not math.isnan(worst["p_holm_vs_oracle"])
