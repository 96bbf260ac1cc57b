"""Artifact layout and IO: atomic files, manifests, Parquet tables, Zarr hidden states.

Imports only the standard library at module level; numpy, pyarrow and zarr are imported
inside the functions that need them, so the Dagster layer can import this package cheaply.
"""

from dihal.atomic import atomic_dir, atomic_write_bytes, atomic_write_json, atomic_write_text
from storage.layout import ArtifactLayout
from storage.manifest import Manifest, fingerprint, read_manifest, write_manifest

__all__ = [
    "ArtifactLayout",
    "Manifest",
    "atomic_dir",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "fingerprint",
    "read_manifest",
    "write_manifest",
]
