"""Parquet tables, written atomically."""

from __future__ import annotations

import io
from pathlib import Path

from dihal.atomic import atomic_write_bytes
from dihal.errors import CorruptArtifactError


def write_table(path: Path | str, columns_or_rows) -> Path:
    """Write a pyarrow Table, a dict of columns, or a list of row dicts to Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if isinstance(columns_or_rows, pa.Table):
        table = columns_or_rows
    elif isinstance(columns_or_rows, dict):
        table = pa.table(columns_or_rows)
    else:
        table = pa.Table.from_pylist(list(columns_or_rows))
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return atomic_write_bytes(path, buf.getvalue())


def read_table(path: Path | str):
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no table at {path}: materialise the asset that writes it first")
    try:
        return pq.read_table(path)
    except Exception as exc:  # ArrowInvalid and friends for a damaged file
        raise CorruptArtifactError(
            f"{path} is not a readable Parquet file ({exc}). Delete {path.parent} and "
            "materialise its asset again."
        ) from exc


def read_rows(path: Path | str) -> list[dict]:
    return read_table(path).to_pylist()
