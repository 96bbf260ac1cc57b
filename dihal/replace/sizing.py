"""Replace: the bridgeability measurement sized by what it needs.

The sweep's saved bridges and ridge controls are measured again, without retraining, on the
first n of the held-out sequences the sweep measured them on and with the sampler's K steps
replaced (a `Setting`), exactly as the sweep measures them (dihal.replace.stage.measure_bridge
for a bridge; held_out_scores, as ridge_control measures it, for its ridge map). From each
setting's numbers this module derives what the bridgeability stage derives from the sweep's
(dihal.replace.bridgeability: the layer ranking by hybrid NLL, the pre-registered primary
test's p and its design's floor, the oracle and the worst layer, the layers where the bridge
beats its control) and compares them with the full measurement's: the Spearman of the two
rankings and whether every verdict is the same. A setting is adopted where its ranking agrees
with the full one at least as well as a second training seed's does (`DEFAULT_AGREEMENT`) and
no verdict moves; the smallest such setting is named (`adopted`).

The full measurement is the sweep's own, as stored with each bridge. Only the kept bridge of
each layer is saved (a replicate seed's weights are not), so every setting's verdicts, the full
measurement's included, are derived over one seed per layer; the run's own bridgeability
resamples the replicates too, so its p-value can differ from the reference row's here. Pure
compute, no Dagster, no storage: the caller reads the artifacts (`SavedLayer`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from dihal.bridge import BrownianBridge, validation_loss
from dihal.bridge.data import Standardizer
from dihal.config import BridgeProtocol
from dihal.errors import DihalError
from dihal.identity import revision_content
from dihal.inputs import ScoreRow
from dihal.locate.score import spearman
from dihal.replace.bridgeability import bridgeability_table, regression_table
from dihal.replace.control_hybrids import RidgeMap, ridge_hybrid
from dihal.replace.stage import (
    LayerData,
    check_candidate,
    held_out,
    held_out_reference,
    held_out_scores,
    measure_bridge,
    restore_bridge,
)
from dihal.results import TrainedBridge
from dihal.rows import PRIMARY_TARGET, BridgeMetrics, PrimaryTest

DEFAULT_AGREEMENT = 0.964
"""Spearman, over 7 layers of SmolLM2, between the hybrid-NLL layer rankings of the sweep's
default protocol and of the same protocol under its second training seed
(benchmarks/RESULTS.md, "A cheaper sweep protocol against the default's own seed spread"): how
much two equally good runs of the full measurement already disagree."""

AGREEMENT_MIN_LAYERS = 7
"""The fewest layers with a replicate seed over which a run's own seed agreement replaces
DEFAULT_AGREEMENT: as many as that measurement had (over 4 layers, the default cpu profile's
seed layers, one swap of neighbours moves Spearman by 0.2)."""

_METRIC_FIELDS = frozenset(f.name for f in fields(BridgeMetrics))


@dataclass(frozen=True, order=True)
class Setting:
    """How a bridge is measured: on the first `sequences` held-out sequences, sampling with
    `sampler_steps` (K) steps."""

    sequences: int
    sampler_steps: int

    def __post_init__(self) -> None:
        for name in ("sequences", "sampler_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"a measurement setting's {name} must be an integer >= 1, "
                                 f"got {value!r}")

    @property
    def label(self) -> str:
        return f"({self.sequences}, {self.sampler_steps})"

    @property
    def size(self) -> tuple[int, int]:
        """What orders settings from the smallest: sequences x K (the denoiser passes of
        the hybrid NLL), then the sequences (the upper layers' passes, the ridge map's)."""
        return self.sequences * self.sampler_steps, self.sequences


def settings_grid(sequences: Iterable[int], steps: Iterable[int]) -> list[Setting]:
    """Every (sequences, K) pair, largest first."""
    return sorted({Setting(int(n), int(k)) for n in sequences for k in steps},
                  key=lambda s: s.size, reverse=True)


def full_setting(protocols: Iterable[dict]) -> Setting:
    """The setting the sweep measured every layer at (its protocols' eval_sequences and
    steps); a DihalError where its layers were measured differently."""
    seen = {Setting(int(p["eval_sequences"]), int(p["sampler_steps"])) for p in protocols}
    if len(seen) != 1:
        raise DihalError(
            "the swept layers were measured at different settings "
            f"({', '.join(s.label for s in sorted(seen)) or 'none'}, as (eval_sequences, steps)): "
            "re-materialise the sweep with one config before sizing its measurement")
    return seen.pop()


@dataclass(frozen=True)
class SavedLayer:
    """A swept layer as its sweep saved it: the kept bridge and its ridge control."""

    bridge: TrainedBridge
    control: TrainedBridge

    @property
    def layer(self) -> int:
        return self.bridge.layer


@dataclass(frozen=True)
class Measured:
    """Every swept layer's numbers at one setting (None: the sweep's own, as stored), by
    layer, and the seconds its measurement took (None where not timed here)."""

    setting: Setting | None
    bridges: tuple[BridgeMetrics, ...]
    controls: tuple[BridgeMetrics, ...]
    seconds: float | None = None


@dataclass(frozen=True)
class Verdicts:
    """What the bridgeability stage derives from one measurement: the layer ranking (each
    layer's hybrid NLL, the primary test's target), the primary test, the oracle and the
    worst layer (by `oracle_by`, the stage's chosen measure: the hybrid NLL on the first half
    of the held-out sequences, on all of them where there is no half to hold out) and the
    layers where the bridge has the lower hybrid NLL than its ridge control (`control_nll`)."""

    nll: dict[int, float]
    primary: PrimaryTest
    oracle: int
    worst: int
    oracle_by: str
    bridge_wins: tuple[int, ...]
    control_nll: dict[int, float] = field(default_factory=dict)

    def changes(self, full: Verdicts) -> list[str]:
        """Each verdict that differs from `full`'s, as 'what here (full: there)'; the measure
        the oracle is chosen by too."""
        pairs = (("primary test", self.primary.verdict, full.primary.verdict),
                 ("oracle", self.oracle, full.oracle), ("worst", self.worst, full.worst),
                 ("oracle and worst chosen by", self.oracle_by, full.oracle_by),
                 ("bridge beats its ridge control at layers", list(self.bridge_wins),
                  list(full.bridge_wins)))
        return [f"{what} {here} (full: {there})" for what, here, there in pairs if here != there]


def derive(measured: Measured, score_rows: list[ScoreRow], l_star: int,
           primary_norm: str, *, seed: int = 0) -> Verdicts:
    """The bridgeability stage's verdicts over `measured` (bridgeability_table with one seed
    per layer and no rival predictors, regression_table)."""
    rows = sorted((m.to_dict() for m in measured.bridges), key=lambda r: r["layer"])
    table = bridgeability_table(rows, [r for r in score_rows if r.candidate], (),
                                seed=seed, l_star=l_star, primary_norm=primary_norm)
    wins = tuple(r.layer for r in regression_table(list(measured.bridges),
                                                   list(measured.controls))
                 if r.bridge_better_nll)
    return Verdicts(nll={r["layer"]: float(r[PRIMARY_TARGET]) for r in rows},
                    primary=table["primary"], oracle=int(table["oracle"]),
                    worst=int(table["worst"]), oracle_by=table["oracle_by"]["chosen_by"],
                    bridge_wins=wins,
                    control_nll={m.layer: float(m.hybrid_nll) for m in measured.controls})


# ------------------------------------------------------------------------- measuring again


@dataclass(frozen=True)
class LayerMeasure:
    """One layer at one setting: the bridge's and the control's metrics (measured again; the
    training fields as saved) and the seconds of each measurement."""

    bridge: BridgeMetrics
    control: BridgeMetrics
    bridge_seconds: float
    control_seconds: float


def _remeasured(saved: BridgeMetrics, numbers: dict) -> BridgeMetrics:
    """`saved` with the numbers measured again (the training fields kept)."""
    return replace(saved, **{k: v for k, v in numbers.items() if k in _METRIC_FIELDS})


def _standardizers(tensors: dict) -> tuple[Standardizer, Standardizer]:
    return (Standardizer(tensors["cond_std.mean"], tensors["cond_std.std"]),
            Standardizer(tensors["target_std.mean"], tensors["target_std.std"]))


def _check_saved(saved: SavedLayer, backbone, reader) -> None:
    """The layer a candidate of the dump, the control a ridge map of the same layer, both made
    with this backbone's weights (by content)."""
    layer, control = saved.layer, saved.control
    check_candidate(reader, layer)
    if control.layer != layer or control.hparams.objective != "ridge":
        raise DihalError(
            f"the control given for layer {layer} is not its ridge map (layer "
            f"{control.layer}, objective {control.hparams.objective!r}): materialise "
            "regression_sweep_<backbone> for the layer again")
    for what, trained in (("bridge", saved.bridge), ("ridge control", control)):
        if trained.metrics is None:
            raise DihalError(f"the sweep's {what} of layer {layer} carries no metrics: "
                             "materialise it again")
        made = trained.hparams.revision
        if made is not None and revision_content(made) != revision_content(backbone.weights.revision):
            raise DihalError(
                f"the sweep's {what} of layer {layer} was made with backbone weights {made}, "
                f"not the ones loaded ({backbone.weights.revision}): load the backbone it "
                "was made with, or make the sweep again")


def _ridge_measure(backbone, reader, control: TrainedBridge, protocol: BridgeProtocol,
                   reference) -> tuple[BridgeMetrics, float]:
    """The ridge control's held-out numbers on the sequences of `protocol`, from one pass as
    ridge_control measures them (the map and its penalty as saved: its validation loss, the
    held-out error its penalty was chosen by, is kept)."""
    t = control.tensors
    ridge = RidgeMap(t["ridge.weight"].float(), t["ridge.bias"].float(),
                     float(control.hparams.ridge_lambda),
                     val_mse=control.metrics.val_loss)
    cond_std, target_std = _standardizers(t)
    first = t.get("first_state")
    hybrid = ridge_hybrid(backbone, control.layer, ridge, cond_std, target_std,
                          first.to(backbone.device) if first is not None else None)
    val, val_ids = held_out(reader, control.layer, protocol, cond_std, target_std)
    t0 = time.perf_counter()
    held = held_out_scores(hybrid, val_ids, reference, val=val)
    seconds = time.perf_counter() - t0
    return _remeasured(control.metrics, {
        "recon_error": held.recon_error, "hybrid_nll": held.hybrid_nll,
        "backbone_nll": held.backbone_nll, "top1_agreement": held.top1_agreement,
        "hybrid_ppl": math.exp(held.hybrid_nll),
        "backbone_ppl": math.exp(held.backbone_nll)}), seconds


def remeasure_layer(backbone, reader, saved: SavedLayer,
                    settings: Sequence[Setting]) -> dict[Setting, LayerMeasure]:
    """One swept layer's bridge and ridge control measured again at each setting: the bridge
    by measure_bridge on the first n held-out sequences at K steps, its validation loss (which
    the sweep takes from training) measured apart on the same sequences and not timed; the
    ridge control once per n (K does not enter it)."""
    _check_saved(saved, backbone, reader)
    layer = saved.layer
    bridge = restore_bridge(saved.bridge, device=str(backbone.device))
    denoiser = bridge["denoiser"]
    protocol = saved.bridge.hparams.protocol
    process = BrownianBridge(sigma=protocol.sigma)
    first = bridge["first_state"]
    out: dict[Setting, LayerMeasure] = {}
    for n in sorted({s.sequences for s in settings}, reverse=True):
        at_n = replace(protocol, eval_sequences=n)
        reference = held_out_reference(reader, at_n)
        val, val_ids = held_out(reader, layer, at_n, bridge["cond_std"], bridge["target_std"])
        data = LayerData(layer=layer, train=None, val=val, cond_std=bridge["cond_std"],
                         target_std=bridge["target_std"], val_ids=val_ids,
                         first_state=first.to(backbone.device) if first is not None else None,
                         reference=reference)
        val_loss = validation_loss(denoiser, val, process, seed=protocol.seed)
        control, control_s = _ridge_measure(backbone, reader, saved.control, at_n, reference)
        for s in (s for s in settings if s.sequences == n):
            t0 = time.perf_counter()
            numbers = measure_bridge(backbone, denoiser, data, replace(at_n, sampler_steps=s.sampler_steps),
                                     val_loss=val_loss)
            out[s] = LayerMeasure(_remeasured(saved.bridge.metrics, numbers), control,
                                  time.perf_counter() - t0, control_s)
    return out


@dataclass(frozen=True)
class SweepMeasures:
    """The sweep's own measurement (`stored`), each setting's, and each layer's seconds per
    setting ({setting: {layer: (bridge s, control s)}})."""

    stored: Measured
    settings: dict[Setting, Measured]
    layer_seconds: dict[Setting, dict[int, tuple[float, float]]]
    replicate_nll: dict[int, tuple[float, float]]  # layer -> (kept, first replicate) hybrid NLL


def remeasure_sweep(backbone, reader, layers: Sequence[int],
                    load: Callable[[int], SavedLayer], settings: Sequence[Setting], *,
                    progress: Callable[[str], None] | None = None) -> SweepMeasures:
    """Every layer of `layers` (`load(layer)`: its saved bridge and control) measured again at
    each setting, one layer at a time; `progress` gets a line per layer."""
    if not settings:
        raise ValueError("sizing the measurement needs at least one setting")
    per: dict[Setting, list[LayerMeasure]] = {s: [] for s in settings}
    stored_b, stored_c, replicates = [], [], {}
    for i, layer in enumerate(layers, 1):
        saved = load(layer)
        if saved.layer != layer:
            raise DihalError(f"asked for the sweep's layer {layer}, got layer {saved.layer}")
        t0 = time.perf_counter()
        measured = remeasure_layer(backbone, reader, saved, settings)
        for s in settings:
            per[s].append(measured[s])
        stored_b.append(saved.bridge.metrics)
        stored_c.append(saved.control.metrics)
        if saved.bridge.seed_metrics:
            replicates[layer] = (saved.bridge.metrics.hybrid_nll,
                                 saved.bridge.seed_metrics[0].hybrid_nll)
        if progress:
            parts = ", ".join(f"{s.label} {m.bridge_seconds:.1f} s" for s, m in
                              measured.items())
            ridge = ", ".join(f"n={n} {s:.1f} s" for n, s in sorted(
                {s.sequences: m.control_seconds for s, m in measured.items()}.items(),
                reverse=True))
            progress(f"layer {layer} ({i}/{len(layers)}): bridge {parts}; ridge {ridge}; "
                     f"{time.perf_counter() - t0:.1f} s in all")
    return SweepMeasures(
        stored=Measured(None, tuple(stored_b), tuple(stored_c)),
        settings={s: Measured(s, tuple(m.bridge for m in ms), tuple(m.control for m in ms),
                              sum(m.bridge_seconds + m.control_seconds for m in ms))
                  for s, ms in per.items()},
        layer_seconds={s: {m.bridge.layer: (round(m.bridge_seconds, 2),
                                            round(m.control_seconds, 2)) for m in ms}
                       for s, ms in per.items()},
        replicate_nll=replicates)


# ------------------------------------------------------------------------- the comparison


@dataclass(frozen=True)
class SizingRow:
    """One setting against the full measurement (setting None: the full measurement itself,
    as stored)."""

    setting: Setting | None
    spearman: float  # of its hybrid-NLL layer ranking with the full measurement's
    verdicts: Verdicts
    seconds: float | None
    changed: tuple[str, ...]  # the verdicts that differ from the full measurement's

    @property
    def same(self) -> bool:
        return not self.changed

    def meets(self, agreement: float) -> bool:
        """The adoption rule: the ranking agrees at least `agreement`, no verdict moved."""
        return self.setting is not None and self.same and self.spearman >= agreement

    def to_dict(self) -> dict[str, Any]:
        v = self.verdicts
        return {"sequences": self.setting.sequences if self.setting else None,
                "sampler_steps": self.setting.sampler_steps if self.setting else None,
                "spearman": self.spearman, "primary_p": v.primary.p,
                "primary_floor": v.primary.p_min, "primary_verdict": v.primary.verdict,
                "oracle": v.oracle, "worst": v.worst, "oracle_by": v.oracle_by,
                "bridge_wins": list(v.bridge_wins), "seconds": self.seconds,
                "verdicts_same": self.same, "changed": list(self.changed),
                "hybrid_nll": {str(k): x for k, x in sorted(v.nll.items())},
                "ridge_hybrid_nll": {str(k): x for k, x in sorted(v.control_nll.items())}}


def compare(full: Verdicts, measured: Measured, verdicts: Verdicts) -> SizingRow:
    """A setting's row: its ranking's Spearman with the full one over the same layers, and
    the verdicts that moved."""
    layers = sorted(full.nll)
    if sorted(verdicts.nll) != layers:
        raise ValueError(f"the setting measured layers {sorted(verdicts.nll)}, the full "
                         f"measurement {layers}")
    rho = spearman([full.nll[ll] for ll in layers], [verdicts.nll[ll] for ll in layers])
    return SizingRow(measured.setting, float(rho), verdicts, measured.seconds,
                     tuple(verdicts.changes(full)))


def adopted(rows: Sequence[SizingRow], agreement: float) -> SizingRow | None:
    """The smallest setting (Setting.size) that meets the adoption rule; None where none
    does."""
    ok = [r for r in rows if r.meets(agreement)]
    return min(ok, key=lambda r: r.setting.size) if ok else None


def seed_agreement(replicate_nll: dict[int, tuple[float, float]]) -> float | None:
    """The Spearman, over the layers that have a replicate seed, of the kept bridges' hybrid
    NLL with their first replicate's; None under 3 such layers."""
    if len(replicate_nll) < 3:
        return None
    pairs = [replicate_nll[ll] for ll in sorted(replicate_nll)]
    return float(spearman([a for a, _ in pairs], [b for _, b in pairs]))


def agreement_threshold(given: float | None, run: float | None,
                        run_layers: int) -> tuple[float, str]:
    """(the adoption rule's Spearman, where it comes from): `given` where given; else the
    run's own seed agreement where it rests on at least AGREEMENT_MIN_LAYERS layers; else
    DEFAULT_AGREEMENT."""
    if given is not None:
        return float(given), "given"
    if run is not None and math.isfinite(run) and run_layers >= AGREEMENT_MIN_LAYERS:
        return run, f"this run's kept bridges against their replicate seed over {run_layers} layers"
    return DEFAULT_AGREEMENT, ("the default protocol against its second seed, over 7 layers "
                               "of SmolLM2: benchmarks/RESULTS.md")


@dataclass(frozen=True)
class SizingReport:
    """The full measurement's row, each setting's, the rule's threshold and what it adopts."""

    full_setting: Setting
    reference: SizingRow
    rows: tuple[SizingRow, ...]
    agreement: float
    agreement_source: str
    run_seed_agreement: float | None
    run_seed_layers: int
    layer_seconds: dict[Setting, dict[int, tuple[float, float]]] = field(repr=False)
    # the largest |hybrid NLL measured again - as stored| over the layers' bridges and ridge
    # controls, at the full setting where it is among the settings (how exactly the
    # measurement reproduces the sweep's)
    full_reproduction: float | None = None

    @property
    def adopted(self) -> SizingRow | None:
        return adopted(self.rows, self.agreement)

    def to_dict(self) -> dict[str, Any]:
        chosen = self.adopted
        return {"full_setting": {"sequences": self.full_setting.sequences,
                                 "sampler_steps": self.full_setting.sampler_steps},
                "agreement": self.agreement, "agreement_source": self.agreement_source,
                "run_seed_agreement": self.run_seed_agreement,
                "run_seed_layers": self.run_seed_layers,
                "full_reproduction_max_abs_nll": self.full_reproduction,
                "reference": self.reference.to_dict(),
                "rows": [r.to_dict() for r in self.rows],
                "adopted": None if chosen is None else {"sequences": chosen.setting.sequences,
                                                        "sampler_steps": chosen.setting.sampler_steps},
                "layer_seconds": {f"{s.sequences}x{s.sampler_steps}": {
                    str(ll): {"bridge": b, "control": c} for ll, (b, c) in sorted(per.items())}
                    for s, per in self.layer_seconds.items()}}


def size_measurement(measures: SweepMeasures, full: Setting, score_rows: list[ScoreRow],
                     l_star: int, primary_norm: str, *,
                     agreement: float | None = None) -> SizingReport:
    """Each setting of `measures` against the sweep's own measurement (at `full`): derive,
    compare, and the threshold of the adoption rule."""
    ref = derive(measures.stored, score_rows, l_star, primary_norm)
    reference = SizingRow(None, 1.0, ref, None, ())
    rows = tuple(compare(ref, m, derive(m, score_rows, l_star, primary_norm))
                 for _, m in sorted(measures.settings.items(), key=lambda t: t[0].size,
                                    reverse=True))
    run = seed_agreement(measures.replicate_nll)
    threshold, source = agreement_threshold(agreement, run, len(measures.replicate_nll))
    reproduced = None
    if full in measures.settings:
        again = measures.settings[full]
        reproduced = max(abs(a.hybrid_nll - b.hybrid_nll) for a, b in (
            *zip(again.bridges, measures.stored.bridges, strict=True),
            *zip(again.controls, measures.stored.controls, strict=True)))
    return SizingReport(full, reference, rows, threshold, source, run,
                        len(measures.replicate_nll), measures.layer_seconds, reproduced)


# ------------------------------------------------------------------------- the table

COLUMNS = ("setting (sequences, K)", "Spearman with the full measurement", "primary p", "floor",
           "oracle layer", "worst layer", "seconds of measurement", "verdicts same as full")


def _cells(row: SizingRow, full: Setting) -> list[str]:
    v = row.verdicts
    if row.setting is None:
        head = [f"{full.label}, the sweep's, as stored", "1 (reference)"]
        tail = ["n/a (in the sweep)", "reference"]
    else:
        head = [row.setting.label, f"{row.spearman:+.3f}"]
        tail = [f"{row.seconds:.1f}",
                "yes" if row.same else "no: " + "; ".join(row.changed)]
    return [*head, f"{v.primary.p:.3g}", f"{v.primary.p_min:.3g}", str(v.oracle),
            str(v.worst), *tail]


def _words(setting: Setting) -> str:
    return f"{setting.sequences} held-out sequences and K = {setting.sampler_steps}"


def markdown(report: SizingReport) -> str:
    """The table, one row per setting after the full measurement's, and what the rule
    adopts."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for row in (report.reference, *report.rows):
        lines.append("| " + " | ".join(_cells(row, report.full_setting)) + " |")
    ref = report.reference.verdicts
    chosen = report.adopted
    rule = (f"Spearman >= {report.agreement:.3f} ({report.agreement_source}) and every "
            "verdict unchanged")
    if chosen is None:
        verdict = f"No setting meets the rule ({rule})."
    elif chosen.setting == report.full_setting:
        verdict = (f"Adopted: {_words(chosen.setting)}, the sweep's own: no smaller setting "
                   f"has {rule}.")
    else:
        verdict = f"Adopted: {_words(chosen.setting)}, the smallest setting with {rule}."
    lines += ["", verdict]
    notes = [f"Verdicts of the full measurement: primary test {ref.primary.verdict!r} "
             f"(p {ref.primary.p:.3g}, floor {ref.primary.p_min:.3g}, over "
             f"{ref.primary.layers} layers), oracle {ref.oracle} and worst {ref.worst} by "
             f"{ref.oracle_by}, the bridge beats its ridge control (hybrid NLL) at "
             f"{len(ref.bridge_wins)} of {len(ref.nll)} layers"
             + (f" ({', '.join(map(str, ref.bridge_wins))})" if ref.bridge_wins else "") + "."]
    if report.full_reproduction is not None:
        gap = report.full_reproduction
        notes.append("Measured again at the full setting, the hybrid NLL of every layer's "
                     "bridge and ridge control is "
                     + ("the stored one exactly." if gap == 0 else
                        f"within {gap:.2g} nats of the stored one."))
    if report.run_seed_agreement is not None:
        notes.append(f"This run's own seed agreement (kept bridge against its replicate, "
                     f"hybrid NLL): {report.run_seed_agreement:+.3f} over "
                     f"{report.run_seed_layers} layers.")
    notes.append("Every row's verdicts are derived over the kept bridge of each layer (a "
                 "replicate seed's weights are not saved, so it cannot be measured again); "
                 "seconds: the bridge's measurement at the setting plus its ridge control's, "
                 "summed over the layers.")
    return "\n".join([*lines, "", *notes]) + "\n"
