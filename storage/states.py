"""Per-layer hidden states in Zarr, written batch by batch and resumable.

Layout of ``states.zarr`` (Zarr v3): ``states/<split>`` of shape (n_layers, n_seq, seq_len, d),
chunked (1, batch, seq_len, d) so that one batch of one layer is one chunk file;
``input_ids/<split>`` (n_seq, seq_len) int32, the tokens the states belong to; group attributes
record the backbone (id, revision, shapes). Progress lives
in ``progress.json`` beside it (written atomically after each batch's chunks are on disk); a
resumed dump skips the batches it lists and rewrites any batch that was cut off half way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dihal.atomic import atomic_write_json, replace_dir
from dihal.errors import CorruptArtifactError
from dihal.results import StateSpec  # noqa: F401 (re-exported)

STATES = "states.zarr"
PROGRESS = "progress.json"


class StateWriter:
    """Writes a dump into a work directory; ``finalize`` moves it into place."""

    def __init__(
        self, workdir: Path, spec: StateSpec, fingerprint: str, *,
        tokens: dict[str, Any], attrs: dict[str, Any],
    ):
        import numpy as np
        import zarr

        self.workdir = Path(workdir)
        self.spec = spec
        self.fingerprint = fingerprint
        progress = self._read_progress()
        if progress is None or progress.get("fingerprint") != fingerprint:
            # Nothing to resume (or a dump of another config): start clean.
            if self.workdir.exists():
                import shutil

                shutil.rmtree(self.workdir)
            self.workdir.mkdir(parents=True)
            for split, n in spec.n_seq.items():
                zarr.create_array(
                    store=str(self.workdir / STATES),
                    name=f"input_ids/{split}",
                    data=np.asarray(tokens[split], dtype=np.int32),
                )
                zarr.create_array(
                    store=str(self.workdir / STATES),
                    name=f"states/{split}",
                    shape=(spec.n_layers, n, spec.seq_len, spec.hidden),
                    chunks=(1, spec.batch_size, spec.seq_len, spec.hidden),
                    dtype=spec.dtype,
                    compressors=None,
                    fill_value=0,
                )
            zarr.open_group(str(self.workdir / STATES), mode="r+").attrs.update(attrs)
            progress = {"fingerprint": fingerprint, "done": {s: [] for s in spec.n_seq}}
            atomic_write_json(self.workdir / PROGRESS, progress)
        self._done = {s: set(v) for s, v in progress["done"].items()}
        self._group = zarr.open_group(str(self.workdir / STATES), mode="r+")

    def _read_progress(self) -> dict[str, Any] | None:
        path = self.workdir / PROGRESS
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            return None  # a torn progress file: start over rather than trust it

    def is_done(self, split: str, batch: int) -> bool:
        return batch in self._done[split]

    def n_done(self) -> int:
        return sum(len(v) for v in self._done.values())

    def write_batch(self, split: str, batch: int, states) -> None:
        """Write states (n_layers, b, seq_len, hidden) of one batch, then record it as done."""
        start = batch * self.spec.batch_size
        self._group["states"][split][:, start : start + states.shape[1]] = states
        self._done[split].add(batch)
        atomic_write_json(
            self.workdir / PROGRESS,
            {"fingerprint": self.fingerprint, "done": {s: sorted(v) for s, v in self._done.items()}},
        )

    def complete(self) -> bool:
        return all(len(self._done[s]) == self.spec.n_batches(s) for s in self.spec.n_seq)

    def finalize(self, final: Path) -> Path:
        if not self.complete():
            raise RuntimeError("finalize() called before every batch was written")
        (self.workdir / PROGRESS).unlink()
        replace_dir(self.workdir, Path(final))
        return Path(final)


class StateReader:
    """Read access to a finished dump."""

    def __init__(self, directory: Path | str):
        import zarr

        self.directory = Path(directory)
        path = self.directory / STATES
        if not path.exists():
            raise FileNotFoundError(
                f"no hidden-state dump at {path}. Materialise the hidden_states asset first."
            )
        try:
            self._group = zarr.open_group(str(path), mode="r")
        except Exception as exc:  # zarr raises several types for a damaged store
            raise CorruptArtifactError(
                f"{path} cannot be opened as Zarr ({exc}). Delete {self.directory} and "
                "materialise the hidden_states asset again."
            ) from exc

    @property
    def splits(self) -> list[str]:
        return sorted(self._group["states"].array_keys())

    @property
    def attrs(self) -> dict[str, Any]:
        return dict(self._group.attrs)

    def shape(self, split: str) -> tuple[int, ...]:
        return tuple(self.array(split).shape)

    def input_ids(self, split: str):
        return self._group["input_ids"][split][:]

    def n_layers(self) -> int:
        return self.shape(self.splits[0])[0]

    def layer(self, split: str, layer: int):
        """States of one layer: numpy array (n_seq, seq_len, hidden) in the stored dtype."""
        n = self.n_layers()
        if not 0 <= layer < n:
            raise IndexError(f"layer {layer} out of range: this dump has layers 0..{n - 1}")
        return self.array(split)[layer]

    def array(self, split: str):
        if split not in self.splits:
            raise KeyError(f"no split {split!r} in {self.directory}: it has {self.splits}")
        return self._group["states"][split]
