"""Is an evaluation asset stale? Its stored upstream fingerprints differ from the current
upstream artifacts (storage only; no heavy imports)."""

from __future__ import annotations

from dihal.run.stages import asset_key
from storage import (
    ArtifactLayout,
    Bridge,
    Bridgeability,
    Evaluation,
    HiddenStates,
    SamplerCurve,
    bridgeability_inputs,
    eval_inputs,
)


def stale_assets(layout: ArtifactLayout, backbone: str, n_layers: int) -> list[str]:
    """Which of bridgeability_<b>, sampler_steps_<b>, eval_<b> are out of date with their upstream artifacts.
    An asset whose upstream does not exist yet is not stale (it cannot run)."""
    from dihal.config import MIN_SWEPT_LAYERS

    stale = []
    hs = HiddenStates(layout, backbone).manifest()
    if hs is not None:
        inputs = bridgeability_inputs(layout, backbone, n_layers, hs)
        want = {a.name: m.fingerprint for group in inputs.values() for a, m in group}
        mine = Bridgeability(layout, backbone).manifest()
        if (inputs["score"] and inputs["geometry"] and len(inputs["sweep"]) >= MIN_SWEPT_LAYERS
                and (mine is None or mine.upstream != want)):
            stale.append(asset_key("bridgeability", backbone))
    bridge = Bridge(layout, backbone)
    if (bm := bridge.manifest()) is not None and hs is not None:
        curve = SamplerCurve(layout, backbone).manifest()
        if curve is None or curve.upstream != {bridge.name: bm.fingerprint,
                                               HiddenStates(layout, backbone).name: hs.fingerprint}:
            stale.append(asset_key("sampler_steps", backbone))  # eval reads its chosen K
        mine = Evaluation(layout, backbone).manifest()
        inputs = eval_inputs(layout, backbone, hs, int(bm.info["metrics"]["layer"]))
        want = {a.name: m.fingerprint if m else None for a, m in inputs}
        if mine is None or mine.upstream != want:
            stale.append(asset_key("eval", backbone))
    return stale
