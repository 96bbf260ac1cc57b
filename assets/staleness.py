"""Is an evaluation asset stale? Its stored upstream fingerprints differ from the current
upstream artifacts (storage only; no heavy imports)."""

from __future__ import annotations

from storage import ArtifactLayout, Manifest, read_manifest


def swept_layers(layout: ArtifactLayout, backbone: str, n_layers: int, hs_fp: str) -> list[Manifest]:
    """Manifests of the sweep partitions trained on the current hidden states."""
    found = []
    for layer in range(1, n_layers):
        m = read_manifest(layout.bridge_sweep(backbone, layer))
        if m is not None and m.upstream.get(f"hidden_states_{backbone}") == hs_fp:
            found.append(m)
    return found


def bridgeability_upstream(score: Manifest, swept: list[Manifest], backbone: str) -> dict[str, str]:
    return {f"layer_score_{backbone}": score.fingerprint,
            **{f"bridge_sweep_{backbone}[{m.info['metrics']['layer']}]": m.fingerprint
               for m in swept}}


def stale_assets(layout: ArtifactLayout, backbone: str) -> list[str]:
    """Which of bridgeability_<b>, eval_<b> are out of date with their upstream artifacts.
    An asset whose upstream does not exist yet is not stale (it cannot run)."""
    from dihal.registry import get_spec

    stale = []
    hs = read_manifest(layout.hidden_states(backbone))
    score = read_manifest(layout.layer_score(backbone))
    if hs is not None and score is not None:
        swept = swept_layers(layout, backbone, get_spec(backbone).n_layers, hs.fingerprint)
        mine = read_manifest(layout.bridgeability(backbone))
        if len(swept) >= 3 and (mine is None or mine.upstream != bridgeability_upstream(score, swept, backbone)):
            stale.append(f"bridgeability_{backbone}")
    bridge = read_manifest(layout.bridge(backbone))
    if bridge is not None:
        mine = read_manifest(layout.evaluation(backbone))
        if mine is None or mine.upstream != {f"bridge_{backbone}": bridge.fingerprint}:
            stale.append(f"eval_{backbone}")
    return stale
