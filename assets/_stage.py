"""What every stage asset shares: upstream lookup, fingerprint-based reuse, result metadata."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import dagster as dg

from storage import Manifest, fingerprint, read_manifest

# Bumped when a stage's code changes its output; part of every fingerprint and the Dagster
# code_version, so the UI marks downstream assets stale.
CODE_VERSIONS = {
    "corpus": "1",
    "sequences": "1",
    "hidden_states": "1",
    "geometry": "1",
    "layer_score": "1",
    "bridge_sweep": "1",
    "bridgeability": "1",
    "bridge": "2",  # 2: train_tokens counts sequences consumed x length
    "eval": "1",
    "baseline": "1",
    "comparison": "1",
    "full_training": "1",
    "report": "2",  # 2: k_eff per normalisation
}


def throttled(log, every: float = 5.0):
    """log.info, at most once every `every` seconds (progress of long loops)."""
    import time

    last = [0.0]

    def emit(msg: str) -> None:
        now = time.monotonic()
        if now - last[0] >= every:
            last[0] = now
            log.info(msg)

    return emit


def require_upstream(directory: Path, asset: str) -> Manifest:
    """The manifest of an upstream artifact, or a failure naming the command that makes it."""
    m = read_manifest(directory)
    if m is None:
        raise dg.Failure(
            description=(
                f"upstream asset {asset} has not been materialised (nothing at {directory}). "
                f"Run: dagster asset materialize --select '*{asset}'"
            )
        )
    return m


def stage_fingerprint(stage: str, config: Any, upstream: dict[str, str], **extra: Any) -> str:
    return fingerprint(stage, CODE_VERSIONS[stage], config, upstream, extra)


def reuse(directory: Path, fp: str) -> Manifest | None:
    """The existing artifact if it was made from exactly this fingerprint."""
    m = read_manifest(directory)
    return m if m is not None and m.fingerprint == fp else None


def result(manifest: Manifest, directory: Path, *, cached: bool, **metadata: Any) -> dg.MaterializeResult:
    meta: dict[str, Any] = {
        "path": dg.MetadataValue.path(str(directory)),
        "fingerprint": manifest.fingerprint[:16],
        "cached": cached,
    }
    for k, v in {**manifest.info.get("metadata", {}), **metadata}.items():
        meta[k] = dg.MetadataValue.json(v) if isinstance(v, dict | list) else v
    return dg.MaterializeResult(metadata=meta, data_version=dg.DataVersion(manifest.fingerprint))


def png_markdown(png: Path, title: str) -> dg.MetadataValue:
    """A PNG embedded in Markdown metadata, so the plot shows in the web UI."""
    b64 = base64.b64encode(png.read_bytes()).decode("ascii")
    return dg.MetadataValue.md(f"**{title}**\n\n![{title}](data:image/png;base64,{b64})")


def table_markdown(rows: list[dict], columns: list[str], floatfmt: str = ".4g") -> dg.MetadataValue:
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    body = ""
    for r in rows:
        cells = [format(r[c], floatfmt) if isinstance(r[c], float) else str(r[c]) for c in columns]
        body += "| " + " | ".join(cells) + " |\n"
    return dg.MetadataValue.md(head + body)
