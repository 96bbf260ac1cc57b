"""Lineage queries: which artifacts on disk were made from which (the current sweep bridges of
a dump, their regression controls, the baselines of a bridge, the other backbones of a root)."""

from __future__ import annotations

from pathlib import Path

from storage.artifacts import (
    Artifact,
    BaselineRun,
    Bridge,
    Bridgeability,
    BudgetGeneration,
    BudgetStudy,
    Evaluation,
    FullRegressionControl,
    Geometry,
    HiddenStates,
    LayerScore,
    RegressionControl,
    SamplerCurve,
    SweepBridge,
)
from storage.layout import ArtifactLayout
from storage.manifest import Manifest


def swept_bridges(layout: ArtifactLayout, backbone: str, n_layers: int,
                  hidden_states: Manifest) -> list[tuple[SweepBridge, Manifest]]:
    """The sweep partitions trained on the current hidden states, by layer."""
    found = []
    for layer in range(1, n_layers):
        art = SweepBridge(layout, backbone, layer)
        m = art.manifest()
        if m is not None and m.upstream.get(HiddenStates(layout, backbone).name) == hidden_states.fingerprint:
            found.append((art, m))
    return found


def regression_controls(layout: ArtifactLayout, backbone: str,
                        swept: list[tuple[SweepBridge, Manifest]]) -> list[tuple[RegressionControl, Manifest]]:
    """The regression controls made against the given (current) sweep bridges, by layer."""
    found = []
    for bridge, bm in swept:
        art = RegressionControl(layout, backbone, bridge.key)
        m = art.manifest()
        if m is not None and m.upstream.get(bridge.name) == bm.fingerprint:
            found.append((art, m))
    return found


def bridgeability_inputs(layout: ArtifactLayout, backbone: str, n_layers: int,
                         hidden_states: Manifest) -> dict[str, list[tuple[Artifact, Manifest]]]:
    """What bridgeability_<b> is made from: {"score": [layer score], "geometry": [...],
    "sweep": current sweep bridges, "regression": their regression controls}; an entry is
    empty where the artifact does not exist yet."""
    out = {}
    for key, cls in (("score", LayerScore), ("geometry", Geometry)):
        art = cls(layout, backbone)
        m = art.manifest()
        out[key] = [(art, m)] if m is not None else []
    out["sweep"] = swept_bridges(layout, backbone, n_layers, hidden_states)
    out["regression"] = regression_controls(layout, backbone, out["sweep"])
    return out



def current_baselines(layout: ArtifactLayout, backbone: str, names: tuple[str, ...],
                      bridge: Manifest) -> list[tuple[BaselineRun, Manifest]]:
    """The baseline runs made against the current bridge, in `names` order."""
    found = [(a, a.manifest()) for a in (BaselineRun(layout, backbone, n) for n in names)]
    return [(a, m) for a, m in found
            if m is not None and m.upstream.get(Bridge(layout, backbone).name) == bridge.fingerprint]


def current_budget_studies(layout: ArtifactLayout, backbone: str) -> list[BudgetStudy]:
    """The budget study's layers (budget_<b> partitions) made on the current hidden states,
    found on disk, by layer (a study made on other hidden states is not this run's)."""
    states = HiddenStates(layout, backbone).manifest()
    folder = layout.stage(BudgetStudy.stage, backbone)
    if states is None or not folder.is_dir():
        return []
    found = []
    for d in sorted(folder.glob("layer_[0-9][0-9][0-9]")):
        art = BudgetStudy(layout, backbone, int(d.name.split("_")[1]))
        m = art.manifest()
        if m is not None and m.upstream.get(HiddenStates(layout, backbone).name) == states.fingerprint:
            found.append(art)
    return found


def current_budget_generation(layout: ArtifactLayout, backbone: str) -> BudgetGeneration | None:
    """budget_generation_<b> where it was made on the current hidden states, else None (one
    made on other hidden states is not this run's)."""
    states = HiddenStates(layout, backbone).manifest()
    art = BudgetGeneration(layout, backbone)
    m = art.manifest()
    if states is None or m is None:
        return None
    return art if m.upstream.get(HiddenStates(layout, backbone).name) == states.fingerprint else None


def other_backbones(layout: ArtifactLayout, backbone: str) -> list[str]:
    """The other backbones of the artifact root whose layer score and bridgeability exist
    (found on disk: a folder of the root with both artifacts' manifests), sorted."""
    return [d.name for d in sorted(Path(layout.root).iterdir())
            if d.is_dir() and d.name != backbone and not d.name.startswith(".")
            and LayerScore(layout, d.name).manifest() is not None
            and Bridgeability(layout, d.name).manifest() is not None]


def cross_backbone_artifacts(layout: ArtifactLayout, backbone: str) -> list[Artifact]:
    """What the cross-backbone table reads of the other materialised backbones (the report's
    fingerprint includes them, so the report is made again when one changes or appears)."""
    out: list[Artifact] = []
    for b in other_backbones(layout, backbone):
        out += [LayerScore(layout, b), Bridgeability(layout, b)]
        if Evaluation(layout, b).manifest() is not None:
            out.append(Evaluation(layout, b))
    return out



def eval_inputs(layout: ArtifactLayout, backbone: str, hidden_states: Manifest,
                layer: int) -> list[tuple[Artifact, Manifest | None]]:
    """What eval_<b> is made from: the bridge at l*, the sampler-steps curve (the K chosen on
    validation), the hidden states (the ridge control's pairs) and, where the eval trained it
    on the current hidden states, the full-budget regression control of layer `layer` (the
    regression row); each with its manifest (None where it does not exist yet)."""
    out: list[tuple[Artifact, Manifest | None]] = [
        (a, a.manifest()) for a in (Bridge(layout, backbone), SamplerCurve(layout, backbone))]
    out.append((HiddenStates(layout, backbone), hidden_states))
    control = FullRegressionControl(layout, backbone, layer)
    m = control.manifest()
    if m is not None and m.upstream.get(HiddenStates(layout, backbone).name) == hidden_states.fingerprint:
        out.append((control, m))
    return out
