"""The time model of a GPU profile's whole chain: every step the driver runs, counted from the
profile (seeds, controls, measure_bridge after each training and replicate, layer_score's
sequence resamples and split halves, the standardiser fits, the eval's control hybrids and
temperature frontier, decoding at the profile's length), each priced by a unit cost that
benchmarks/gpu_check.py measured, with its source: measured on the device at the profile's
size, or measured at other sizes (the CPU dry run, a cut run) and scaled by the rule named.

    units = units_of(check_results)        # gpu_check.json's measurements -> unit costs
    rows = profile_rows(units, PROFILES["gpu-smollm2"], n_layers=30, swept=[...])

Each row: {"step", "count", "each_s", "seconds", "source"}. What the model leaves out is listed
in NOT_COUNTED. tests/unit/test_gpu_model.py checks the model against a tiny run's real step times.
"""

from __future__ import annotations

import math

# the steps the device cannot run (the image lacks the judge's weights, mauve-text, faiss,
# spacy, dagster and zarr) or that no measurement prices; a user's own GPU machine runs them
NOT_COUNTED = (
    "the judge's Gen.PPL and MAUVE scoring (the judge and MAUVE's packages are not on the "
    "device)", "the baselines' sampling (their own samplers; not measured)",
    "DiHAL at the (rule, K) chosen on validation, where it differs from the protocol's",
    "the validation loss at initialisation and every eval_every steps of each training",
    "the sampler-steps curve's latency decodes and the eval cost table's timed decodes "
    "(a few short sequences each)",
    "Dagster's own import, run queue and the store's Zarr/Parquet writes")


def _unit(value: float, per: str, source: str, **size) -> dict:
    return {"value": float(value), "per": per, "source": source, **size}


def units_of(r: dict) -> dict:
    """The unit costs in a gpu_check.json (`r`), each with its size and source."""
    where = r.get("device", "?")
    tiny = bool(r.get("tiny"))
    src = f"measured on {where}" + (" (tiny model)" if tiny else "")
    u: dict = {}
    if "tokens_per_s" in r.get("dump", {}):
        u["forward"] = _unit(1.0 / r["dump"]["tokens_per_s"], "s per token", src)
    if "layers" in r.get("pairs", {}):
        u["pairs"] = {int(k): _unit(1.0 / v["tokens_per_s"], "s per token", src)
                      for k, v in r["pairs"]["layers"].items()}
        u["standardise"] = _unit(r["pairs"]["standardise_s_per_token"], "s per token per fit",
                                 src)
    if r.get("bridge", {}).get("runs"):
        b = r["bridge"]
        u["bridge_step"] = _unit(min(x["ms_per_step"] for x in b["runs"]) / 1e3, "s per step",
                                 src, batch=b["batch"])
    if "seconds" in r.get("measure", {}):
        m = r["measure"]
        u["measure_bridge"] = _unit(m["seconds"], "s per measure", src,
                                    sequences=m["sequences"], steps=m["steps"])
    g = r.get("geometry", {})
    if "resampled_s" in g:
        u["geometry_layer"] = _unit(g["resampled_s"], "s per layer", src, tokens=g["tokens"],
                                    resamples=g["resamples"])
        u["sequence_geometry"] = _unit(g["sequence_s"], "s per layer and sample", src,
                                       tokens=g["tokens"])
    d = r.get("decode", {})
    if "ms_per_step" in d:
        u["decode"] = {k: _unit(v / 1e3, "s per position", src, batch=d["batch"])
                       for k, v in d["ms_per_step"].items()}
    if "ms_per_step" in r.get("baseline", {}):
        u["baseline_step"] = _unit(r["baseline"]["ms_per_step"] / 1e3, "s per step", src,
                                   batch=r["baseline"]["batch"])
    if "imports_s" in r.get("startup", {}):
        s = r["startup"]
        u["startup"] = _unit(s["imports_s"] + s["model_load_s"], "s per run", src)
    return u


def _scaled(unit: dict, factor: float, rule: str) -> tuple[float, str]:
    if math.isclose(factor, 1.0, rel_tol=1e-9):
        return unit["value"], unit["source"]
    return unit["value"] * factor, f"{unit['source']}, scaled x{factor:.3g} ({rule})"


def _pairs_each(units: dict, layer: int) -> tuple[float, str]:
    """s per token of one layer's training pairs: interpolated over the measured layers."""
    pts = sorted(units["pairs"].items())
    lo = max((p for p in pts if p[0] <= layer), default=pts[0])
    hi = min((p for p in pts if p[0] >= layer), default=pts[-1])
    if lo[0] == hi[0]:
        return lo[1]["value"], lo[1]["source"]
    w = (layer - lo[0]) / (hi[0] - lo[0])
    value = (1 - w) * lo[1]["value"] + w * hi[1]["value"]
    return value, f"{lo[1]['source']}, interpolated between layers {lo[0]} and {hi[0]}"


def _row(step: str, count: float, each: float, source: str) -> dict:
    return {"step": step, "count": count, "each_s": each, "seconds": count * each,
            "source": source}


def training_rows(units: dict, proto: dict, n_train: int, seq_len: int, layers: list[int],
                  *, seeds: int, controls: int, what: str) -> list[dict]:
    """The rows of training `seeds` bridges and `controls` regression controls at each of
    `layers` (their pairs built once a layer, two standardiser fits each), and measure_bridge
    after every one of them."""
    tokens = n_train * seq_len
    batch = proto.get("batch_size", 4)
    steps = math.ceil(round(proto.get("epochs", 1.0) * n_train) / batch)
    step_s, src = _scaled(units["bridge_step"], batch / units["bridge_step"]["batch"],
                          "linear in the batch")
    per_layer = [_pairs_each(units, ll) for ll in layers]
    m = units["measure_bridge"]
    e = min(proto.get("eval_sequences", 32), n_train)
    measure_s, msrc = _scaled(m, e / m["sequences"], "linear in the held-out sequences")
    fit_s = units["standardise"]["value"]
    trainings = len(layers) * (seeds + controls)
    return [
        _row(f"{what}: training pairs ({len(layers)} layers x {tokens:,} tokens)", 1,
             sum(v for v, _ in per_layer) * tokens, per_layer[0][1]),
        _row(f"{what}: standardiser fits (2 a layer, on the host)", 2 * len(layers),
             fit_s * tokens, units["standardise"]["source"]),
        _row(f"{what}: trainings ({seeds} seeds + {controls} control x {len(layers)} layers, "
             f"{steps} steps each)", trainings, steps * step_s, src),
        _row(f"{what}: measure_bridge after each training", trainings, measure_s, msrc),
    ]


def locate_rows(units: dict, prof: dict, n_layers: int) -> list[dict]:
    """The dump of the held-out split, the geometry of every layer, and layer_score's
    recomputed geometry: (sequence resamples + 2 x split halves) x the N - 1 candidates."""
    seq = prof["sequences"]
    val_tokens = seq["n_val"] * seq.get("seq_len", 128)
    geo = prof.get("geometry", {})
    n_tok = geo.get("n_tokens", 4096)
    g = units["geometry_layer"]
    rs = geo.get("n_resamples", 100)
    geo_s, gsrc = _scaled(g, (n_tok / g["tokens"]) * ((1 + rs) / (1 + g["resamples"])),
                          "linear in tokens and in 1 + resamples")
    sq = units["sequence_geometry"]
    seq_s, ssrc = _scaled(sq, n_tok / sq["tokens"], "linear in tokens")
    ls = prof.get("layer_score", {})
    samples = ls.get("sequence_resamples", 5) + 2 * ls.get("split_halves", 1)
    return [
        _row(f"hidden_states: forward of the held-out split ({val_tokens:,} tokens)",
             val_tokens, units["forward"]["value"], units["forward"]["source"]),
        _row(f"geometry: {n_layers} layers at {n_tok:,} tokens, {rs} resamples", n_layers,
             geo_s, gsrc),
        _row(f"layer_score: {samples} sequence samples x {n_layers - 1} candidate layers",
             samples * (n_layers - 1), seq_s, ssrc),
    ]


def eval_rows(units: dict, prof: dict) -> list[dict]:
    """The eval's sampling at the profile's count and length: DiHAL, the backbone, the
    regression, layer-drop and ridge hybrids, and the frontier's other temperatures (DiHAL
    and the backbone sampled again)."""
    from dihal.config import EvalConfig

    ev = prof.get("eval", {})
    n, length, batch = ev.get("n_samples", 64), ev.get("length", 64), ev.get("batch_size", 32)
    batches = math.ceil(n / batch)
    temps = ev.get("frontier_temperatures", EvalConfig().frontier_temperatures)
    others = len(set(temps) - {ev.get("temperature", 1.0)})
    rows = []
    systems = {"dihal": 1 + others, "backbone": 1 + others, "regression": 1, "layer_drop": 2}
    for name, times in systems.items():  # the ridge hybrid decodes as layer-drop does
        d = units["decode"][name]
        each, src = _scaled(d, min(batch, n) / d["batch"], "linear in the batch")
        what = "layer-drop and ridge" if name == "layer_drop" else name
        rows.append(_row(f"eval: {what} sampling, {n} x {length} tokens"
                         + (f" at {times} temperatures" if times > 1 and name in
                            ("dihal", "backbone") else ""), times * batches * length, each, src))
    return rows


def sampler_rows(units: dict, prof: dict, n_train: int, seq_len: int, layer: int) -> list[dict]:
    """The sampler-steps curve at l* (the bridge re-measured at each rule and K) and the eval's
    ridge map (its training pairs built again at l*, two standardiser fits)."""
    from dihal.config import SamplerCurveConfig

    curve = SamplerCurveConfig(**prof.get("sampler_steps", {}))
    m = units["measure_bridge"]
    k0 = m["steps"]
    e = min(prof["bridge"].get("eval_sequences", 32), n_train)
    each, src = _scaled(m, (e / m["sequences"]) * (sum(curve.steps) / len(curve.steps)) / k0,
                        "linear in held-out sequences and in the mean K over the protocol's K")
    pairs_s, psrc = _pairs_each(units, layer)
    tokens = n_train * seq_len
    return [_row(f"sampler_steps: {len(curve.rules)} rules x K in {list(curve.steps)}",
                 len(curve.rules) * len(curve.steps), each, src),
            _row(f"eval: the ridge map's training pairs at l* ({tokens:,} tokens) and 2 fits", 1,
                 (pairs_s + 2 * units["standardise"]["value"]) * tokens, psrc)]


def profile_rows(units: dict, prof: dict, n_layers: int, swept: list[int]) -> list[dict]:
    """Every counted step of profile `prof` on a backbone of `n_layers` layers sweeping
    `swept`; see the module docstring."""
    from dihal.registry import BASELINES

    seq = prof["sequences"]
    n_train, seq_len = seq["n_train"], seq.get("seq_len", 128)
    sweep, full = prof["bridge_sweep"], {**prof["bridge_sweep"], **prof["bridge"]}
    mid = n_layers // 2  # l*, the oracle and the worst layer: mid-depth taken for each
    rows = locate_rows(units, prof, n_layers)
    rows += training_rows(units, sweep, n_train, seq_len, swept, seeds=sweep.get("seeds", 1),
                          controls=1, what="sweep")
    rows += training_rows(units, full, n_train, seq_len, [mid] * 3, seeds=full.get("seeds", 1),
                          controls=0, what="full bridges (l*, oracle, worst)")
    rows += training_rows(units, full, n_train, seq_len, [mid], seeds=0, controls=1,
                          what="eval's full-budget regression control at l*")
    rows += eval_rows(units, prof)
    rows += sampler_rows(units, prof, n_train, seq_len, mid)
    b = units["baseline_step"]
    steps = math.ceil(n_train / sweep.get("batch_size", 4))
    each, src = _scaled(b, sweep.get("batch_size", 4) / b["batch"], "linear in the batch")
    rows.append(_row(f"baselines: {len(BASELINES)} trainings of {steps} steps "
                     "(one measured, the others taken as equal)", len(BASELINES), steps * each,
                     src))
    runs = len(swept) + len(BASELINES) + 5  # partitions, baselines, locate/bridge/eval/compare/..
    rows.append(_row(f"start-up: imports and model load in each of {runs} Dagster runs", runs,
                     units["startup"]["value"], units["startup"]["source"]))
    return rows
