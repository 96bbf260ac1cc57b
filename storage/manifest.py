"""Manifests: what an artifact is, how it was made, and the fingerprint that decides reuse.

Every artifact directory holds ``manifest.json``. Its ``fingerprint`` is a hash of the
artifact's config, the code version of the stage, and the fingerprints of its upstream
artifacts. A stage whose computed fingerprint equals the stored one skips its work; any change
upstream changes the fingerprint of everything downstream.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

from dihal.atomic import atomic_write_json

MANIFEST = "manifest.json"


def _canonical(obj: Any) -> Any:
    if is_dataclass(obj) and not isinstance(obj, type):
        return _canonical(asdict(obj))
    if isinstance(obj, dict):
        return {str(k): _canonical(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, list | tuple):
        return [_canonical(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def fingerprint(*parts: Any) -> str:
    """A stable sha256 hex digest of JSON-able parts (dataclasses, dicts, lists, scalars)."""
    blob = json.dumps(_canonical(list(parts)), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def file_sha256(path: Path | str, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class Manifest:
    stage: str
    backbone: str | None
    fingerprint: str
    config: dict[str, Any]
    upstream: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return _canonical(asdict(self))


def write_manifest(directory: Path | str, manifest: Manifest) -> Path:
    return atomic_write_json(Path(directory) / MANIFEST, manifest.to_json())


class CorruptArtifactError(RuntimeError):
    """An artifact on disk cannot be read; the message names the path and the fix."""


def read_manifest(directory: Path | str) -> Manifest | None:
    """The manifest of an artifact directory, or None where there is none yet."""
    path = Path(directory) / MANIFEST
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text())
        return Manifest(**raw)
    except (json.JSONDecodeError, TypeError) as exc:
        raise CorruptArtifactError(
            f"{path} is not a valid manifest ({exc}). Delete {Path(directory)} and materialise "
            "the asset again."
        ) from exc


def is_current(directory: Path | str, fp: str) -> bool:
    """True when the artifact at ``directory`` was made with fingerprint ``fp``."""
    m = read_manifest(directory)
    return m is not None and m.fingerprint == fp
