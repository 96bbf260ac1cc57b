"""Checks on the science, as pure functions: each returns (passed, what it found). The Dagster
layer shows them in the Checks tab (assets/checks.py)."""

from __future__ import annotations

import json

from dihal.rows import BridgeMetrics

MIN_LAYERS_FOR_SPEARMAN = 5  # a rank correlation over fewer layers says little


def loss_fell(m: BridgeMetrics) -> tuple[bool, dict]:
    """The bridge learned something: its validation loss is below the untrained denoiser's."""
    return m.val_loss < m.init_val_loss, {
        "val_loss": m.val_loss, "init_val_loss": m.init_val_loss,
        "ratio": m.val_loss / m.init_val_loss if m.init_val_loss else float("nan")}


def enough_layers(swept_layers: list[int]) -> tuple[bool, dict]:
    """Bridgeability's Spearman figures rest on at least MIN_LAYERS_FOR_SPEARMAN layers."""
    return len(swept_layers) >= MIN_LAYERS_FOR_SPEARMAN, {
        "swept_layers": len(swept_layers), "needed": MIN_LAYERS_FOR_SPEARMAN}


BUDGET = ("denoiser_parameters", "train_tokens", "sampler_steps", "seq_len")


def budgets_matched(rows: list[dict], param_tol: float = 0.10) -> tuple[bool, dict]:
    """Every generated row of a comparison ran at DiHAL's budget: denoiser parameters within
    +-param_tol, the same training tokens, sampler steps and sequence length (the backbone, the
    autoregressive reference, has no budget; nor have the control hybrids, and DiHAL at the K
    chosen on validation is the same bridge sampled otherwise: only baselines are checked)."""
    ref = next((r for r in rows if r["role"] == "dihal"), None)
    if ref is None:
        return False, {"problem": "no DiHAL row"}
    problems = []
    for r in rows:
        if r["role"] not in ("dihal", "baseline"):
            continue
        for k in BUDGET:
            a, b = ref.get(k), r.get(k)
            if k == "seq_len" and a is None:  # DiHAL's own length comes from the baselines
                continue
            if b is None or (k == "denoiser_parameters" and abs(b / a - 1) > param_tol) or (
                    k != "denoiser_parameters" and b != a):
                problems.append(f"{r['model']}: {k} {b} vs {a}")
    return not problems, {"rows": len(rows), "problems": "; ".join(problems) or "none"}


def samples_readable(lines: list[str], n_samples: int) -> tuple[bool, dict]:
    """Every sample line parses, holds a text, every model has `n_samples` of them and at
    least one that is not empty."""
    by_model: dict[str, list[str]] = {}
    bad = 0
    for line in lines:
        try:
            s = json.loads(line)
            if not isinstance(s.get("text"), str):
                raise TypeError("text is not a string")
            by_model.setdefault(s["model"], []).append(s["text"])
        except (json.JSONDecodeError, TypeError, KeyError, AttributeError):
            bad += 1
    counts = {m: len(t) for m, t in by_model.items()}
    empty = {m: sum(not t.strip() for t in texts) for m, texts in by_model.items()}
    ok = (bad == 0 and bool(by_model) and all(n == n_samples for n in counts.values())
          and all(empty[m] < counts[m] for m in by_model))
    return ok, {"unreadable_lines": bad, "samples": counts, "empty": empty,
                "replacement_chars": sum(t.count("\ufffd") for ts in by_model.values() for t in ts)}


def names_fingerprints(text: str, fingerprints: dict[str, str]) -> tuple[bool, dict]:
    """The report names every input artifact's fingerprint (its first 16 hex digits)."""
    missing = [name for name, fp in fingerprints.items() if fp[:16] not in text]
    return not missing and bool(fingerprints), {"inputs": len(fingerprints),
                                                "missing": ", ".join(missing) or "none"}
