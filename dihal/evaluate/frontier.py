"""The temperature frontier (issue 18): Gen.PPL against diversity of each model at several
decoding temperatures, so that a lower Gen.PPL can be read against a lower diversity. Lean
points (no per-sample lists), the points on the frontier, and the sentence that reads them.
Standard library only."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

# what a frontier point keeps of dihal.evaluate.generation.text_metrics (beside model, role, temperature)
POINT_KEYS = ("gen_ppl", "gen_ppl_low", "gen_ppl_high", "gen_ppl_at_length",
              "gen_ppl_at_length_low", "gen_ppl_at_length_high", "ppl_length", "diversity",
              "diversity_low", "diversity_high", "diversity_spacy", "repetition", "mean_length",
              "mean_judge_length", "empty_samples", "ms_per_token", "n_samples")


def point(model: str, role: str, temperature: float | None, metrics: dict, *,
          sampled: bool, n_samples: int | None = None) -> dict:
    """One frontier point: the model's metrics at `temperature` (None: a recipe that rounds
    deterministically), lean; `sampled` False where the point is a main row's (not sampled
    again)."""
    out = {"model": model, "role": role, "temperature": temperature,
           **{k: metrics.get(k) for k in POINT_KEYS}, "sampled": sampled}
    if n_samples is not None:
        out["n_samples"] = n_samples
    return out


def points_at(temperatures: Sequence[float], measured: dict, measure: Callable[[float], dict],
              make: Callable[[float | None, dict, bool], dict]) -> list[dict]:
    """One point per temperature: from `measured` (temperature -> metrics already there, e.g.
    the main row's) where it holds that temperature, else from `measure(temperature)`;
    `make(temperature, metrics, sampled)` builds the point."""
    out = []
    for t in temperatures:
        if t in measured:
            out.append(make(t, measured[t], False))
        else:
            out.append(make(t, measure(t), True))
    return out


def _finite(p: dict) -> bool:
    return all(isinstance(p.get(k), int | float) and math.isfinite(p[k])
               for k in ("gen_ppl", "diversity"))


def dominates(a: dict, b: dict) -> bool:
    """`a` has the lower Gen.PPL at equal or higher diversity, or the higher diversity at equal
    or lower Gen.PPL: `b` is off the frontier."""
    return ((a["gen_ppl"] < b["gen_ppl"] and a["diversity"] >= b["diversity"])
            or (a["gen_ppl"] <= b["gen_ppl"] and a["diversity"] > b["diversity"]))


def _interval(p: dict, key: str) -> tuple[float, float]:
    """p's 95 % interval of `key`, or the point itself where it has none."""
    lo, hi = p.get(f"{key}_low"), p.get(f"{key}_high")
    ok = all(isinstance(v, int | float) and math.isfinite(v) for v in (lo, hi))
    return (lo, hi) if ok else (p[key], p[key])


def clearly_dominates(a: dict, b: dict) -> bool:
    """`a` dominates `b` beyond both points' 95 % intervals: a's Gen.PPL interval lies wholly
    below b's and a's diversity interval is not wholly below b's, or a's diversity interval
    lies wholly above b's and a's Gen.PPL interval is not wholly above b's. Two intervals
    that do not overlap is a conservative test (each side's interval resamples its own
    samples); a point without intervals counts as its own interval."""
    (pa_lo, pa_hi), (pb_lo, pb_hi) = _interval(a, "gen_ppl"), _interval(b, "gen_ppl")
    (da_lo, da_hi), (db_lo, db_hi) = _interval(a, "diversity"), _interval(b, "diversity")
    return ((pa_hi < pb_lo and da_hi >= db_lo) or (da_lo > db_hi and pa_lo <= pb_hi))


def on_frontier(points: Iterable[dict], *, clearly: bool = False) -> list[bool]:
    """For each point: no point (of any model, at any temperature) dominates it (with
    `clearly`: dominates it beyond both intervals, clearly_dominates). A point without a
    finite Gen.PPL or diversity is never on it and dominates nothing."""
    points = list(points)
    ok = [p for p in points if _finite(p)]
    beats = clearly_dominates if clearly else dominates
    return [_finite(p) and not any(beats(q, p) for q in ok if q is not p) for p in points]


def _t(t: float | None) -> str:
    return "none" if t is None else f"{t:g}"


def frontier_sentence(points: list[dict], first: str = "dihal") -> str:
    """Which models lie on the frontier at the temperatures measured (a point no other point
    dominates), and where the model of role `first` stands."""
    if not points:
        return ("No temperature frontier was measured (frontier_temperatures is empty, or the "
                "artifacts were made before it existed).")
    flags = on_frontier(points)
    models = list(dict.fromkeys(p["model"] for p in points))
    temps = sorted({p["temperature"] for p in points if p["temperature"] is not None})
    at = {m: [_t(p["temperature"]) for p, f in zip(points, flags, strict=True)
              if f and p["model"] == m] for m in models}
    on = [m for m in models if at[m]]
    if not on:
        return ("No frontier point has a finite Gen.PPL and diversity (every sample empty, or "
                "too short for an n-gram).")
    line = (f"At the temperatures measured ({', '.join(map(_t, temps))}), "
            + ("every one of the " + str(len(models)) + " models has a point"
               if len(on) == len(models) else
               f"{len(on)} of the {len(models)} models have a point")
            + " on the frontier (no other point has a lower Gen.PPL at equal or higher "
            "diversity): " + ", ".join(f"{m} (T = {', '.join(at[m])})" for m in on))
    off = [m for m in models if not at[m]]
    if off:
        line += f"; every point of {', '.join(off)} is dominated"
    mine = next((p["model"] for p in points if p["role"] == first), None)
    if mine is not None:
        line += (f". {mine} lies on it at T = {', '.join(at[mine])}" if at[mine] else
                 f". {mine} does not: at each temperature measured another point has a lower "
                 "Gen.PPL at equal or higher diversity")
    return line + ". " + _clear_reading(points, flags, mine)


def _clear_reading(points: list[dict], flags: list[bool], mine: str | None) -> str:
    """The same frontier read with the intervals: which of the points off it are dominated
    beyond both 95 % intervals (clearly_dominates), and so whether the first model's being
    off it (or another's) is more than sampling noise."""
    clear = on_frontier(points, clearly=True)
    off = [p for p, f in zip(points, flags, strict=True) if not f and _finite(p)]
    if not off:
        return "Read with the 95 % intervals, no point is off the frontier either."
    beyond = [p for p, f, c in zip(points, flags, clear, strict=True)
              if not f and not c and _finite(p)]
    named = ", ".join(f"{p['model']} (T = {_t(p['temperature'])})" for p in beyond)
    line = ("Read with the 95 % intervals (dominated only where another point's Gen.PPL "
            "interval lies wholly below at a diversity interval not wholly below, or the "
            f"mirror; a conservative test), {len(beyond)} of the {len(off)} dominated points "
            "stay dominated" + (f": {named}" if beyond else
                                ": every domination above is within sampling noise"))
    if mine is not None and not any(f for p, f in zip(points, flags, strict=True)
                                    if p["model"] == mine):
        kept = [p for p, c in zip(points, clear, strict=True) if p["model"] == mine and c]
        line += (f"; {mine} is off the frontier beyond the intervals at every temperature"
                 if not kept else
                 f"; within the intervals {mine} may lie on it (T = "
                 f"{', '.join(_t(p['temperature']) for p in kept)})")
    return line + "."
