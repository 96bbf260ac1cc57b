"""The temperature frontier: Gen.PPL against diversity of each model at several
decoding temperatures, so that a lower Gen.PPL can be read against a lower diversity (at one,
the default's, the models and the held-out text at that temperature only). Lean points (no
per-sample lists), the points on the frontier, and the sentence that reads them. Standard
library only."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from dihal.generation_rows import EVAL_ROW, FRONTIER_POINT, POINT_KEYS, GenerationRow


def point(model: str, role: str, temperature: float | None, metrics: GenerationRow, *,
          sampled: bool, n_samples: int | None = None) -> GenerationRow:
    """One frontier point: the model's metrics at `temperature` (None: a recipe that rounds
    deterministically), lean (POINT_KEYS; None where `metrics` has one not); `sampled` False
    where the point is a main row's (not sampled again)."""
    out = replace(metrics.select(FRONTIER_POINT, POINT_KEYS), model=model, role=role,
                  temperature=temperature, sampled=sampled)
    return out if n_samples is None else replace(out, n_samples=n_samples)


def points_at(temperatures: Sequence[float], measured: dict[float | None, GenerationRow],
              measure: Callable[[float], GenerationRow],
              make: Callable[[float | None, GenerationRow, bool], GenerationRow]
              ) -> list[GenerationRow]:
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


ANCHOR_ROLE = "reference"  # the held-out text's point: real text, the frontier's anchor
ANCHOR_MODEL = "held-out text"


def anchor_point(metrics: dict, n_samples: int) -> GenerationRow:
    """The frontier's anchor: held-out corpus text cut like the samples (as many texts as each
    model has samples: pooled diversity falls with the count), scored by the same judge and
    metric code (dihal.evaluate.generation.text_metrics, `metrics`), at no temperature."""
    return point(ANCHOR_MODEL, ANCHOR_ROLE, None, GenerationRow.from_dict(metrics, EVAL_ROW),
                 sampled=False, n_samples=n_samples)


def anchor_of(points: Iterable[dict]) -> dict | None:
    """The held-out text's point among `points` (finite), or None."""
    return next((p for p in points if p.get("role") == ANCHOR_ROLE and _finite(p)), None)


def _finite(p: dict) -> bool:
    return all(isinstance(p.get(k), int | float) and math.isfinite(p[k])
               for k in ("gen_ppl", "diversity"))


def _capped(v: float, cap: float | None) -> float:
    return v if cap is None else min(v, cap)


def dominates(a: dict, b: dict, cap: float | None = None) -> bool:
    """`a` has the lower Gen.PPL at equal or higher diversity, or the higher diversity at equal
    or lower Gen.PPL: `b` is off the frontier. With `cap` (the held-out text's diversity),
    diversity counts only up to it: diversity beyond real text's is degenerate, not better."""
    da, db = _capped(a["diversity"], cap), _capped(b["diversity"], cap)
    return ((a["gen_ppl"] < b["gen_ppl"] and da >= db)
            or (a["gen_ppl"] <= b["gen_ppl"] and da > db))


def _interval(p: dict, key: str) -> tuple[float, float]:
    """p's 95 % interval of `key`, or the point itself where it has none."""
    lo, hi = p.get(f"{key}_low"), p.get(f"{key}_high")
    ok = all(isinstance(v, int | float) and math.isfinite(v) for v in (lo, hi))
    return (lo, hi) if ok else (p[key], p[key])


def clearly_dominates(a: dict, b: dict, cap: float | None = None) -> bool:
    """`a` dominates `b` (dominates, the same point test, so never with a lower diversity)
    and beyond both points' 95 % intervals: a's Gen.PPL interval lies wholly below b's, or
    a's diversity interval (capped at `cap` as the points are) wholly above b's. Two
    intervals that do not overlap is a conservative test (each side's interval resamples its
    own samples); a point without intervals counts as its own interval."""
    if not dominates(a, b, cap):
        return False
    (_, pa_hi), (pb_lo, _) = _interval(a, "gen_ppl"), _interval(b, "gen_ppl")
    (da_lo, _), (_, db_hi) = _interval(a, "diversity"), _interval(b, "diversity")
    return pa_hi < pb_lo or _capped(da_lo, cap) > _capped(db_hi, cap)


# clearly_dominates in words: the report prints it beside the points it marks
CLEAR_RULE = ("dominated only where another point dominates it as points, a lower Gen.PPL at "
              "equal or higher diversity or a higher diversity at equal or lower Gen.PPL, and "
              "beyond the intervals too: its Gen.PPL interval wholly below, or its diversity "
              "interval wholly above; a conservative test")


def on_frontier(points: Iterable[dict], *, clearly: bool = False) -> list[bool]:
    """For each point: no point (of any model, at any temperature, the held-out text's
    included) dominates it (with `clearly`: dominates it and beyond both intervals,
    clearly_dominates); diversity counts only up to the held-out text's where the points hold
    its anchor. A point without a finite Gen.PPL or diversity is never on it and dominates
    nothing."""
    points = list(points)
    ok = [p for p in points if _finite(p)]
    ref = anchor_of(points)
    cap = ref["diversity"] if ref is not None else None
    beats = clearly_dominates if clearly else dominates
    return [_finite(p) and not any(beats(q, p, cap) for q in ok if q is not p) for p in points]


def at_matched_diversity(points: list[dict], diversity: float) -> list[dict]:
    """Each model's Gen.PPL at one diversity (the held-out text's), interpolated linearly in
    log Gen.PPL between its two points that bracket it (its temperatures); None where its
    points do not reach that diversity. {"model", "gen_ppl" (None: not reached), "low", "high"
    (its diversity range)}, one per model with a finite point, the anchor left out."""
    out = []
    for m in dict.fromkeys(p["model"] for p in points if p.get("role") != ANCHOR_ROLE):
        pts = sorted((p["diversity"], math.log(p["gen_ppl"])) for p in points
                     if p["model"] == m and _finite(p) and p["gen_ppl"] > 0)
        if not pts:
            continue
        got = None
        for (d0, g0), (d1, g1) in zip(pts, pts[1:], strict=False):
            if d0 <= diversity <= d1:
                got = math.exp(g0 if d1 == d0 else g0 + (g1 - g0) * (diversity - d0) / (d1 - d0))
                break
        if got is None and any(d == diversity for d, _ in pts):
            got = math.exp(next(g for d, g in pts if d == diversity))
        out.append({"model": m, "gen_ppl": got, "low": pts[0][0], "high": pts[-1][0]})
    return out


def _t(t: float | None) -> str:
    return "none" if t is None else f"{t:g}"


def measured_temperatures(points: Iterable[dict]) -> list[float]:
    """The decoding temperatures the points were sampled at, sorted (the held-out text's and a
    deterministic recipe's None left out). One temperature (the default's, the main rows'):
    the frontier compares the models at that temperature only."""
    return sorted({p["temperature"] for p in points if p.get("temperature") is not None})


def frontier_sentence(points: list[dict], first: str = "dihal") -> str:
    """Which models lie on the frontier at the temperatures measured (a point no other point
    dominates, diversity counted up to the held-out text's where its anchor was measured),
    where the model of role `first` stands, each model's Gen.PPL at the held-out text's
    diversity, and the same frontier read with the intervals."""
    if not points:
        return "No temperature frontier was measured (frontier_temperatures is empty)."
    flags = on_frontier(points)
    models = list(dict.fromkeys(p["model"] for p in points if p.get("role") != ANCHOR_ROLE))
    temps = measured_temperatures(points)
    one = len(temps) == 1
    at = {m: [_t(p["temperature"]) for p, f in zip(points, flags, strict=True)
              if f and p["model"] == m] for m in models}
    on = [m for m in models if at[m]]
    ref = anchor_of(points)
    line = _anchor_reading(points, ref)
    if not on:
        return line + ("No model's point lies on the frontier: the held-out text dominates "
                       "every one." if ref is not None else
                       "No frontier point has a finite Gen.PPL and diversity (every sample "
                       "empty, or too short for an n-gram).")
    line += ((f"At the one temperature measured (T = {_t(temps[0])}), " if one else
              f"At the temperatures measured ({', '.join(map(_t, temps))}), ")
             + ("every one of the " + str(len(models)) + " models has a point"
                if len(on) == len(models) else
                f"{len(on)} of the {len(models)} models have a point")
             + " on the frontier (no other point has a lower Gen.PPL at equal or higher "
             "diversity" + (", diversity counted up to the held-out text's" if ref else "")
             + "): " + ", ".join(f"{m} (T = {', '.join(at[m])})" for m in on))
    off = [m for m in models if not at[m]]
    if off:
        line += f"; every point of {', '.join(off)} is dominated"
    mine = next((p["model"] for p in points if p["role"] == first), None)
    if mine is not None:
        where = "at the one temperature measured" if one else "at each temperature measured"
        line += (f". {mine} lies on it at T = {', '.join(at[mine])}" if at[mine] else
                 f". {mine} does not: {where} another point has a lower Gen.PPL at equal or "
                 "higher diversity")
    read = _one_temperature_reading(points, ref) if one else _matched_reading(points, ref)
    return line + ". " + read + _clear_reading(points, flags, mine, one)


def frontier_answer(points: list[dict], first: str = "dihal") -> str:
    """frontier_sentence in one short sentence: whether the model of role `first` lies on the
    frontier (and if not, whether beyond the 95 % intervals), and how many models do."""
    if not points:
        return "No temperature frontier was measured (frontier_temperatures is empty)."
    flags, clear = on_frontier(points), on_frontier(points, clearly=True)
    models = list(dict.fromkeys(p["model"] for p in points if p.get("role") != ANCHOR_ROLE))
    on = [m for m in models if any(f for p, f in zip(points, flags, strict=True)
                                   if p["model"] == m)]
    def count(it: str = "it") -> str:
        if not on:
            return f"no model lies on {it}" + (": the held-out text dominates every point"
                                               if anchor_of(points) is not None else "")
        return (f"{len(on)} of {len(models)} models lie on {it}"
                + (f" ({', '.join(on)})" if len(on) <= 5 else ""))

    mine = next((p["model"] for p in points if p.get("role") == first), None)
    if mine is None:
        text = count("the Gen.PPL/diversity frontier")
        return f"{text[0].upper()}{text[1:]}; no {first} point was measured."

    def temps(marks: list[bool]) -> list[str]:
        return [_t(p["temperature"]) for p, f in zip(points, marks, strict=True)
                if f and p["model"] == mine]

    one = len(measured_temperatures(points)) == 1
    if at := temps(flags):
        return (f"{mine} lies on the Gen.PPL/diversity frontier at T = {', '.join(at)}; "
                f"{count()}.")
    if maybe := temps(clear):
        return (f"{mine} is off the Gen.PPL/diversity frontier, but within the 95 % intervals "
                f"it may lie on it (T = {', '.join(maybe)}); {count()}.")
    where = "at the one temperature measured" if one else "at every temperature measured"
    return (f"{mine} is off the Gen.PPL/diversity frontier beyond the 95 % intervals {where}; "
            f"{count()}.")


def _one_temperature_reading(points: list[dict], ref: dict | None) -> str:
    """What a frontier at one temperature cannot show (what a lower temperature buys, each
    model's Gen.PPL at the held-out text's diversity: at_matched_diversity needs two points of
    a model around it), and what it does: each model's diversity against the held-out
    text's."""
    line = ("Measured at one temperature, each point is a main-table row, so the frontier "
            "compares the models at that temperature only: what a lower temperature buys in "
            "Gen.PPL for diversity, and each model's Gen.PPL at the held-out text's diversity, "
            "need two or more temperatures. ")
    if ref is None:
        return line
    pts = [p for p in points if p is not ref and _finite(p)]
    less = [f"{p['model']} ({p['diversity']:.3f})" for p in pts
            if p["diversity"] < ref["diversity"]]
    more = [f"{p['model']} ({p['diversity']:.3f})" for p in pts
            if p["diversity"] >= ref["diversity"]]
    parts = ([f"less diverse than the held-out text ({ref['diversity']:.3f}): "
              + ", ".join(less)] if less else []) + (
        [f"as diverse or more: {', '.join(more)}"] if more else [])
    text = "; ".join(parts)
    return line + (text[0].upper() + text[1:] + ". " if text else "")


def _anchor_reading(points: list[dict], ref: dict | None) -> str:
    """The held-out text's point, and what it does to the frontier; "" without one."""
    if ref is None:
        return ("No held-out text was scored as the frontier's anchor (the eval was given "
                "none, or its metrics are not finite): diversity is read without the real text's, so a degenerate sample's "
                "high diversity would count. " if points else "")
    more = [f"{p['model']} (T = {_t(p['temperature'])})" for p in points
            if p is not ref and _finite(p) and p["diversity"] > ref["diversity"]]
    return (f"Held-out text, cut and scored like the samples, has Gen.PPL {ref['gen_ppl']:.1f} "
            f"at diversity {ref['diversity']:.3f}: the anchor; diversity beyond it counts as "
            "no better" + (f" ({len(more)} point{'s' if len(more) > 1 else ''} exceed it: "
                           f"{', '.join(more)})" if more else "") + ". ")


def _matched_reading(points: list[dict], ref: dict | None) -> str:
    """Every model's Gen.PPL at the held-out text's diversity (at_matched_diversity)."""
    if ref is None:
        return ""
    got = at_matched_diversity(points, ref["diversity"])
    reached = [g for g in got if g["gen_ppl"] is not None]
    missed = [g for g in got if g["gen_ppl"] is None]
    if not got:
        return ""
    line = (f"At the held-out text's diversity ({ref['diversity']:.3f}; Gen.PPL interpolated "
            "in log between each model's temperatures), "
            + ("; ".join(f"{g['model']} has Gen.PPL {g['gen_ppl']:.1f}" for g in reached)
               if reached else "no model's temperatures reach it"))
    if missed:
        line += ("; not reached at the temperatures measured: " + ", ".join(
            f"{g['model']} (diversity {g['low']:.3f}..{g['high']:.3f})" for g in missed))
    return line + ". "


def _clear_reading(points: list[dict], flags: list[bool], mine: str | None,
                   one: bool = False) -> str:
    """The same frontier read with the intervals: which of the points off it are dominated
    beyond both 95 % intervals (clearly_dominates), and so whether the first model's being
    off it (or another's) is more than sampling noise (`one`: at one temperature)."""
    clear = on_frontier(points, clearly=True)
    off = [p for p, f in zip(points, flags, strict=True) if not f and _finite(p)]
    if not off:
        return "Read with the 95 % intervals, no point is off the frontier either."
    beyond = [p for p, f, c in zip(points, flags, clear, strict=True)
              if not f and not c and _finite(p)]
    named = ", ".join(f"{p['model']} (T = {_t(p['temperature'])})" for p in beyond)
    line = (f"Read with the 95 % intervals ({CLEAR_RULE}), {len(beyond)} of the {len(off)} "
            "dominated points "
            "stay dominated" + (f": {named}" if beyond else
                                ": every domination above is within sampling noise"))
    if mine is not None and not any(f for p, f in zip(points, flags, strict=True)
                                    if p["model"] == mine):
        kept = [p for p, c in zip(points, clear, strict=True) if p["model"] == mine and c]
        where = "at the one temperature measured" if one else "at every temperature"
        line += (f"; {mine} is off the frontier beyond the intervals {where}"
                 if not kept else
                 f"; within the intervals {mine} may lie on it (T = "
                 f"{', '.join(_t(p['temperature']) for p in kept)})")
    return line + "."
