"""The sampler-steps curve under both update rules, and the choice of (rule, K) by held-out
hybrid NLL."""

import pytest
import torch

from dihal.config import BridgeProtocol, ExtractConfig, SamplerCurveConfig
from dihal.generation_inputs import CurvePoint
from dihal.replace.control_hybrids import bridge_hybrid
from dihal.replace.sampler_steps import choose_steps, sampler_steps_curve
from dihal.results import SamplerCurveResult
from storage.states import StateReader
from tests.tiny import curve_point, dump_states, random_sequences


def test_the_curve_measures_each_rule_at_each_k(tiny_backbone, tmp_path):
    from dihal.replace.stage import train_layer

    seqs = random_sequences(tiny_backbone, n_train=8, n_val=6)
    reader = StateReader(dump_states(tiny_backbone, seqs, tmp_path))
    protocol = BridgeProtocol(d_model=32, n_layers=1, n_heads=2, batch_size=4, sampler_steps=2,
                              eval_sequences=4, pin_first=False, epochs=10.0, lr=1e-2)
    trained = train_layer(tiny_backbone, reader, 2, protocol, tmp_path / "ckpt",
                          train_ids=seqs["train"], extract=ExtractConfig())
    cfg = SamplerCurveConfig(steps=(1, 2, 4), n_samples=2, length=4,
                             rules=("ancestral", "marginal"))
    rows = sampler_steps_curve(tiny_backbone, trained, reader, cfg).rows
    assert [(p.rule, p.sampler_steps) for p in rows] == [
        ("ancestral", 1), ("ancestral", 2), ("ancestral", 4),
        ("marginal", 1), ("marginal", 2), ("marginal", 4)]
    by = {(p.rule, p.sampler_steps): p for p in rows}
    # the bridge's own measurement is reused for its trained K under the default rule only
    assert by[("ancestral", 2)].from_bridge_metrics
    assert not by[("marginal", 2)].from_bridge_metrics
    assert by[("ancestral", 2)].hybrid_nll == trained.metrics.hybrid_nll
    # one step from t = 1 lands on z0_hat under either rule, so the marginal rule's K = 1 row is
    # the ancestral one's, not measured again (and the two hybrids' logits are the same)...
    assert by[("marginal", 1)].same_as_rule == "ancestral"
    assert by[("marginal", 1)].hybrid_nll == by[("ancestral", 1)].hybrid_nll
    ids = torch.as_tensor(seqs["val"][:2])
    one = {rule: bridge_hybrid(tiny_backbone, trained, sampler_steps=1, rule=rule).logits(ids)
           for rule in ("ancestral", "marginal")}
    torch.testing.assert_close(one["marginal"], one["ancestral"], rtol=1e-6, atol=1e-6)
    # ...more steps differ
    assert by[("marginal", 2)].same_as_rule is None
    assert by[("marginal", 4)].recon_error != pytest.approx(by[("ancestral", 4)].recon_error)
    assert all(p.ms_per_token > 0 for p in rows)
    # the stored table is the points' fields, in order, and reads back as the same points
    result = SamplerCurveResult(rows, 2)
    assert list(result.info()["rows"][0]) == list(CurvePoint.__dataclass_fields__)
    assert SamplerCurveResult.from_dict(result.info()) == result


def test_choose_steps_takes_the_lowest_held_out_nll():
    rows = [CurvePoint.from_dict(curve_point(rule=rule, sampler_steps=k, hybrid_nll=nll)) for rule, k, nll in
            (("ancestral", 1, 3.0), ("ancestral", 4, 2.5), ("marginal", 2, 2.5),
             ("marginal", 16, 2.7))]
    assert choose_steps(rows) == {"rule": "marginal", "sampler_steps": 2, "hybrid_nll": 2.5}  # tie: smaller K
    assert choose_steps(rows[:2]) == {"rule": "ancestral", "sampler_steps": 4, "hybrid_nll": 2.5}
    with pytest.raises(ValueError, match="at least one point"):
        choose_steps([])
