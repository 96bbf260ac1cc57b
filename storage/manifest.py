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
from dihal.errors import CorruptArtifactError

MANIFEST = "manifest.json"
SELF_DIGEST = "self_sha256"  # the manifest's digest of its own content (every other key)


def canonical(obj: Any) -> Any:
    """JSON-able form of dataclasses, dicts (sorted), tuples (as lists) and paths."""
    if is_dataclass(obj) and not isinstance(obj, type):
        # a config may leave out a field at its unset default (BridgeProtocol.seed_layers), so
        # the fingerprints made before that field existed stay valid
        own = getattr(obj, "fingerprint_fields", None)
        return canonical(own() if callable(own) else asdict(obj))
    if isinstance(obj, dict):
        return {str(k): canonical(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, list | tuple):
        return [canonical(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def fingerprint(*parts: Any) -> str:
    """A stable sha256 hex digest of JSON-able parts (dataclasses, dicts, lists, scalars)."""
    blob = json.dumps(canonical(list(parts)), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Manifest:
    stage: str
    backbone: str | None
    fingerprint: str
    config: dict[str, Any]
    upstream: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    # every file the artifact owns, relative to its folder: [size in bytes, sha256]
    files: dict[str, list] = field(default_factory=dict)
    # the code version of `stage` that made it (dihal.run.stages); "" in a manifest written
    # before the versions were recorded. A reader refuses any other than its own code's
    # (Artifact.require): what an older stage version made is stale, never read
    code_version: str = ""

    def to_json(self) -> dict[str, Any]:
        return canonical(asdict(self))


def digest_files(directory: Path, skip: tuple[str, ...] = ()) -> dict[str, list]:
    """[size, sha256] of every file below `directory` (relative POSIX paths), except the
    manifest, top-level dot files (markers) and the top-level names in `skip`."""
    from dihal.atomic import file_sha256

    out = {}
    for f in sorted(p for p in Path(directory).rglob("*") if p.is_file()):
        rel = f.relative_to(directory).as_posix()
        top = rel.split("/")[0]
        if rel == MANIFEST or top in skip or top.startswith("."):
            continue
        out[rel] = [f.stat().st_size, file_sha256(f)]
    return out


def check_files(directory: Path, files: dict[str, list], *, digests: bool) -> list[str]:
    """What is wrong with the files of an artifact against its record: missing, truncated or
    grown, changed content (with `digests`). Empty when all is well."""
    from dihal.atomic import file_sha256

    problems = []
    for rel, (size, sha) in files.items():
        f = Path(directory) / rel
        if not f.is_file():
            problems.append(f"{rel}: missing")
        elif f.stat().st_size != size:
            problems.append(f"{rel}: {f.stat().st_size} bytes, recorded {size}")
        elif digests and file_sha256(f) != sha:
            problems.append(f"{rel}: content changed (sha256 differs)")
    return problems


def content_digest(raw: dict[str, Any]) -> str:
    """The sha256 of a manifest's content: every key but its own digest, in canonical JSON."""
    body = {k: v for k, v in raw.items() if k != SELF_DIGEST}
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def write_manifest(directory: Path | str, manifest: Manifest) -> Path:
    """manifest.json, carrying the digest of its own content (checked on every read)."""
    raw = manifest.to_json()
    # the digest is taken of the JSON as it will read back (tuples as lists, ...)
    raw = json.loads(json.dumps(raw, sort_keys=True, default=str))
    return atomic_write_json(Path(directory) / MANIFEST, {**raw, SELF_DIGEST: content_digest(raw)})


def read_manifest(directory: Path | str) -> Manifest | None:
    """The manifest of an artifact directory, or None where there is none yet; its content is
    checked against its own digest first (a changed value, such as a layer score's l*, is
    never read as data)."""
    path = Path(directory) / MANIFEST
    if not path.exists():
        return None
    redo = (f"Materialise the asset that makes {Path(directory)} again: a damaged artifact is "
            "re-made, never reused.")
    try:
        raw = json.loads(path.read_text())
        if not isinstance(raw, dict):
            raise TypeError(f"a JSON {type(raw).__name__}, not an object")
        recorded = raw.pop(SELF_DIGEST, None)
        if recorded is None:
            raise CorruptArtifactError(
                f"{path} carries no digest of its own content (written by an older version of "
                f"dihal): its values cannot be checked. {redo}")
        if recorded != content_digest(raw):
            raise CorruptArtifactError(
                f"{path}: content changed (its sha256 differs from the digest it carries): its "
                f"values (fingerprint, file digests, results) cannot be trusted. {redo}")
        return Manifest(**raw)
    except (json.JSONDecodeError, TypeError, UnicodeDecodeError) as exc:
        raise CorruptArtifactError(f"{path} is not a valid manifest ({exc}). {redo}") from exc
