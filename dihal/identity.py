"""A local model folder known by its content, not by its path.

A folder's identity is the sha256 over the name and sha256 of every file `from_pretrained` reads
from it for the model and its tokenizer (weights, config.json, the tokenizer's files): fine-tune
again and save into the same folder, edit config.json, or swap the tokenizer, and the identity
changes, so every fingerprint that holds it changes and nothing made from the old content is
reused. Each file's digest is cached by its size, mtime, ctime and inode in one small JSON file,
so a folder whose files are untouched is not read again (an 8B model's 16 GB are hashed once).
Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

from dihal.atomic import atomic_write_json, file_sha256
from dihal.errors import BackboneNotFoundError

# the files from_pretrained reads for a causal LM and its tokenizer (what a Hub snapshot keeps)
IDENTITY_SUFFIXES = (".json", ".safetensors", ".bin", ".model", ".txt", ".jinja", ".tiktoken")
DIGEST_CHARS = 16  # of the folder's sha256 in a revision string: 64 bits name the content
CACHE_FILE = "folder-digests.json"  # under the model cache: path -> stat key -> sha256
CACHE_VERSION = 1


LOCAL = "local:"  # a local folder's revision: LOCAL + its path + DIGEST + its digest
DIGEST = "@sha256="


def identity_files(folder: Path) -> list[Path]:
    """The files of `folder` that make its identity, sorted by name (top level: a
    save_pretrained folder is flat). Hidden files and dihal's own markers are not part of it."""
    return sorted(p for p in Path(folder).iterdir()
                  if p.suffix in IDENTITY_SUFFIXES and not p.name.startswith(".")
                  and p.is_file())


def _stat_key(st: os.stat_result) -> str:
    # ctime cannot be set back by a user (touch -r, cp -p set mtime only): any rewrite shows
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"


def _read_cache(path: Path) -> dict[str, dict[str, str]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # missing or damaged: every file is hashed again (a cache, never data)
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def folder_digest(folder: Path | str, cache_dir: Path | str | None = None,
                  progress: Callable[[str], None] | None = None) -> str:
    """The sha256 of `folder`'s content (identity_files: each file's name and sha256). With
    `cache_dir`, each file's sha256 is kept there by its stat key and reused while the file is
    untouched; a changed file (size, mtime, ctime or inode) is hashed again."""
    folder = Path(folder).resolve()
    files = identity_files(folder)
    cache_path = Path(cache_dir) / CACHE_FILE if cache_dir is not None else None
    cache = _read_cache(cache_path) if cache_path is not None else {}
    changed = False
    outer = hashlib.sha256()
    for f in files:
        st = f.stat()
        key, name = _stat_key(st), str(f)
        sha = cache.get(name, {}).get(key) if isinstance(cache.get(name), dict) else None
        if sha is None:
            if progress is not None and st.st_size > (256 << 20):
                progress(f"hashing {f} ({st.st_size / 2**30:.1f} GiB) once, to know the model "
                         "by its content")
            sha = file_sha256(f)
            cache[name] = {key: sha}
            changed = True
        outer.update(f"{f.name}\0{sha}\n".encode())
    if changed and cache_path is not None:
        try:
            atomic_write_json(cache_path, {"version": CACHE_VERSION, "files": cache})
        except OSError:
            pass  # a cache that cannot be written costs a rehash next time, nothing else
    return outer.hexdigest()


def folder_revision(folder: Path | str, cache_dir: Path | str | None = None,
                    progress: Callable[[str], None] | None = None) -> str:
    """`local:<folder>@sha256=<digest>`: where the model lies and what it holds. Two folders
    with other content never share it, nor one folder before and after its files change."""
    folder = Path(folder).resolve()
    return f"{LOCAL}{folder}{DIGEST}{folder_digest(folder, cache_dir, progress)[:DIGEST_CHARS]}"


def revision_content(revision: str | None) -> str | None:
    """What a model revision says of the weights themselves: a local folder's
    `sha256=<digest>` (folder_revision's, its path dropped), else the revision as it is (the
    embedded package's file and sha256, `<hub id>@<commit>`). None for none."""
    if revision is None:
        return None
    if revision.startswith(LOCAL) and DIGEST in revision:
        return "sha256=" + revision.rsplit(DIGEST, 1)[1]
    return revision



def check_weight_files(folder: Path | str, what: str) -> None:
    """Refuse a model folder from_pretrained cannot load its weights from, naming the folder:
    one that holds no weight file (*.safetensors, *.bin), or whose index (a sharded model's
    <weights>.index.json, e.g. for model-00001-of-00002.safetensors) names a shard that is
    missing. Read before any model is loaded; a BackboneNotFoundError with the fix."""
    folder = Path(folder)
    fix = (f"download the weights into {folder} again (`hf download <id> --local-dir "
           f"{folder}`) or save the model there again with save_pretrained")
    for path in sorted(folder.glob("*.index.json")):
        index = path.name
        if Path(index.removesuffix(".index.json")).suffix not in (".safetensors", ".bin"):
            continue
        try:
            shards = sorted(set(json.loads(path.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BackboneNotFoundError(
                f"{what}: {path} cannot be read as a weight index ({type(exc).__name__}: "
                f"{exc}): {fix}") from None
        missing = [s for s in shards if not (folder / s).is_file()]
        if missing:
            raise BackboneNotFoundError(
                f"{what}: {folder}: {index} names the weight shard {missing[0]}, which is "
                f"missing ({len(missing)} of its {len(shards)} shards missing: "
                f"{', '.join(missing[:5])}): {fix}")
        return
    if not any(p.suffix in (".safetensors", ".bin") and p.is_file() for p in folder.iterdir()):
        held = ", ".join(sorted(p.name for p in folder.iterdir())[:8]) or "nothing"
        raise BackboneNotFoundError(
            f"{what}: {folder} holds no weight files (no *.safetensors or *.bin; it holds "
            f"{held}): {fix}, or point the backbone at a complete folder")
