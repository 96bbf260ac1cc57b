"""Every field of every config in dihal.config is checked on construction: a bad value raises a
ValueError that names the class, the field and the value; the defaults construct."""

import dataclasses
import math

import pytest

from dihal import config as dc

BAD = {
    dc.CorpusConfig: {
        "paths": ["a.json.gz", ("",), (3,)], "url_list": [""], "max_shards": [0, -1, 1.5],
        "max_docs": [0, -3], "on_malformed": ["ignore"], "min_chars": [-1, True],
        "hf_dataset": ["", 3], "hf_config": [""], "hf_split": ["", None], "hf_text_field": [" "],
        "hf_id_field": [""], "hf_revision": [""],
    },
    dc.SequenceConfig: {
        "seq_len": [3, 16.0], "n_train": [0], "n_val": [0], "val_fraction": [0.0, 1.0, math.nan],
        "seed": [-1, "0"], "max_tokens_per_doc": [0],
    },
    dc.ExtractConfig: {"batch_size": [0], "dtype": ["bfloat16"], "store_train": ["no"]},
    dc.GeometryConfig: {
        "n_tokens": [1], "n_anchors": [0], "k_neighbors": [1], "n_pairs": [0],
        "gamma_rel": [0.0, math.inf, True], "mono_stat": ["mean"], "normalizations": [("l2",), ()],
        "seed": [-1], "n_resamples": [-1, 1.5],
    },
    dc.BridgeProtocol: {
        "d_model": [0], "n_layers": [0], "n_heads": [0], "mlp_ratio": [0.0], "lr": [0.0, -1e-3, math.inf],
        "weight_decay": [-0.1], "warmup_frac": [1.0, -0.1], "batch_size": [0],
        "epochs": [0, -1.0, math.nan], "grad_clip": [-1.0], "seed": [-1, 1.5], "mixed_precision": ["fp16"],
        "sigma": [0.0], "sampler_steps": [0], "eval_sequences": [0], "pin_first": [1, "yes"],
        "checkpoint_every": [0], "seeds": [0, 1.5],
        # not layers, a layer twice, layer 0; and layers named for several seeds under seeds 1
        "seed_layers": ["1", (True,), (1, 1), (0,), (2,)],
    },
    dc.EvalConfig: {
        "n_samples": [0], "length": [0], "temperature": [0.0, math.inf], "seed": [-1],
        "batch_size": [0], "eta": [-0.5],
        "frontier_temperatures": [(0.0,), (0.7, 0.7), (0.7, math.inf), "0.7", (True,), (-1.0,)],
    },
    dc.BaselineRunConfig: {
        "lr": [0.0], "seed": [-1], "n_samples": [0], "length": [0], "temperature": [0.0, math.inf],
        "restrict_vocab": ["no"],
        "frontier_temperatures": [(0.0,), (1, 1.0), (math.nan,), 0.7, ("0.7",)],
    },
    dc.LayerScoreConfig: {"primary_norm": ["l2"], "sequence_resamples": [-1, 1.5],
                          "split_halves": [-1]},
    dc.SamplerCurveConfig: {"steps": [(), (0,), (2, 2), "16", (1.5,)], "n_samples": [0],
                            "length": [0], "seed": [-1],
                            "rules": [(), ("ddim",), ("marginal", "marginal"), "marginal"]},
    dc.BudgetConfig: {"budgets": [(), (0,), (4, 4), "16"], "residual": [1, "yes"],
                      "eval_sequences": [0, 1.5, True, "8"],
                      "sampler_steps": [0, True, dc.MAX_SAMPLER_STEPS + 1]},
}
CASES = [(cls, name, value) for cls, fields in BAD.items() for name, values in fields.items()
         for value in values]


def test_every_field_of_every_config_has_a_bad_value_here():
    for cls, fields in BAD.items():
        assert set(fields) == {f.name for f in dataclasses.fields(cls)}, cls.__name__


@pytest.mark.parametrize("cls", list(BAD), ids=lambda c: c.__name__)
def test_defaults_construct(cls):
    cls()


@pytest.mark.parametrize(("cls", "name", "value"), CASES,
                         ids=[f"{c.__name__}.{n}={v!r}" for c, n, v in CASES])
def test_a_bad_value_names_class_field_and_value(cls, name, value):
    with pytest.raises(ValueError, match=rf"^{cls.__name__}\.{name} must be .*, got ") as err:
        cls(**{name: value})
    assert repr(value) in str(err.value)


def test_cross_field_rules():
    with pytest.raises(ValueError, match=r"BridgeProtocol\.d_model \(10\) must be a multiple of n_heads"):
        dc.BridgeProtocol(d_model=10, n_heads=4)
    with pytest.raises(ValueError, match="even quotient"):
        dc.BridgeProtocol(d_model=12, n_heads=4)  # head size 3: no rotary positions
    with pytest.raises(ValueError, match="paths or a url_list, not both"):
        dc.CorpusConfig(paths=("a.json.gz",), url_list="urls.txt")
    with pytest.raises(ValueError, match="a Hugging Face dataset .* or shards"):
        dc.CorpusConfig(paths=("a.json.gz",), hf_dataset="org/text", max_docs=10)
    with pytest.raises(ValueError, match="max_docs is needed with hf_dataset 'org/text'"):
        dc.CorpusConfig(hf_dataset="org/text")
    with pytest.raises(ValueError, match=r"GeometryConfig\.n_anchors \(5\) must be <= n_tokens"):
        dc.GeometryConfig(n_tokens=4, n_anchors=5, k_neighbors=2)


def test_accepted_edges_and_normalised_types():
    assert dc.CorpusConfig(paths=["a.json.gz"], max_docs=1, max_shards=1, min_chars=0).paths == (
        "a.json.gz",)
    assert dc.BridgeProtocol(epochs=2, warmup_frac=0.0, grad_clip=0.0, weight_decay=0.0).epochs == 2
    dc.EvalConfig(eta=1.0, temperature=0.5)
    dc.SequenceConfig(max_tokens_per_doc=None, seq_len=4)


def test_seed_layers_resolve_per_layer_and_leave_the_stored_protocol_as_before():
    """seed_layers names the layers trained under `seeds` (the others: 1); a bridge stores the
    protocol resolved for its layer, whose dict and fingerprint carry no seed_layers."""
    from storage.manifest import fingerprint

    p = dc.BridgeProtocol(seeds=2, seed_layers=[4, 1])  # a run config's list, any order
    assert p.seed_layers == (1, 4) and p.to_dict()["seed_layers"] == [1, 4]
    assert [p.for_layer(ll).seeds for ll in (1, 2, 4)] == [2, 1, 2]
    assert p.for_layer(2) == dc.BridgeProtocol() and p.for_layer(2).seed_layers == ()
    assert "seed_layers" not in dc.BridgeProtocol().to_dict()
    assert dc.BridgeProtocol(seeds=3).for_layer(7).seeds == 3  # empty: every layer
    # the fingerprint of an unset seed_layers is the one made before the field existed
    before = {k: v for k, v in dataclasses.asdict(dc.BridgeProtocol()).items() if k != "seed_layers"}
    assert fingerprint(dc.BridgeProtocol()) == fingerprint(before)
    assert fingerprint(p) != fingerprint(p.for_layer(1))
    with pytest.raises(ValueError, match="seed_layers must be empty while seeds is 1"):
        dc.BridgeProtocol(seed_layers=(3,))


@pytest.mark.parametrize("cls", [dc.EvalConfig, dc.BaselineRunConfig], ids=lambda c: c.__name__)
def test_frontier_temperatures_default_list_and_empty(cls):
    """The same default in both configs: the main rows' temperature alone (its points are the
    main rows, nothing is sampled again), the whole frontier being the study and gpu presets';
    a run config's list of numbers becomes a tuple of floats; empty means no frontier. The
    default is part of the fingerprint: artifacts made under the old default are made again."""
    from storage.manifest import fingerprint

    assert cls().frontier_temperatures == dc.DEFAULT_FRONTIER_TEMPERATURES == (cls().temperature,)
    assert dc.FRONTIER_TEMPERATURES == (0.7, 0.85, 1.0)
    assert cls().temperature in dc.FRONTIER_TEMPERATURES  # the whole frontier holds the main row
    whole = cls(frontier_temperatures=dc.FRONTIER_TEMPERATURES)
    assert fingerprint(cls()) != fingerprint(whole)
    assert cls(frontier_temperatures=[1, 0.5]).frontier_temperatures == (1.0, 0.5)
    assert all(isinstance(t, float) for t in cls(frontier_temperatures=[1]).frontier_temperatures)
    assert cls(frontier_temperatures=()).frontier_temperatures == ()


@pytest.mark.parametrize(("cls", "name", "value", "limit", "why"), [
    (dc.BridgeProtocol, "epochs", 1e12, "10,000,000", "at least one optimiser step"),
    (dc.BridgeProtocol, "epochs", 10_000_001, "10,000,000", "about 18 days"),
    (dc.BridgeProtocol, "sampler_steps", 10**12, "1,000", "a denoiser pass per generated token"),
    (dc.SamplerCurveConfig, "steps", (1, 2, 1001), "1,000", "a denoiser pass per generated token"),
])
def test_a_training_or_sampling_budget_over_its_cap_is_refused_naming_the_limit(
        cls, name, value, limit, why):
    with pytest.raises(ValueError) as err:
        cls(**{name: value})
    msg = str(err.value)
    assert msg.startswith(f"{cls.__name__}.{name} must be ") and f"got {value!r}" in msg
    assert limit in msg and why in msg
    cls(**{name: (1, 1000) if cls is dc.SamplerCurveConfig else dc.MAX_TRAIN_STEPS
           if name == "epochs" else dc.MAX_SAMPLER_STEPS})  # the caps themselves pass


def test_a_preset_with_an_absurd_training_budget_is_refused_by_name(tmp_path):
    import json

    from dihal.run.profiles import resolve_preset

    path = tmp_path / "huge.json"
    for stage in ("bridge_sweep", "bridge"):  # the sweep's budget, full training's
        path.write_text(json.dumps({stage: {"epochs": 10**12}}))
        with pytest.raises(ValueError, match=rf"preset {path}: {stage}: BridgeProtocol.epochs "
                           r"must be at most 10,000,000 \(.*\), got 1000000000000"):
            resolve_preset(str(path))
