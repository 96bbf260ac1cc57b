"""Per-layer hidden states in Zarr, written batch by batch and resumable.

Layout of ``states.zarr`` (Zarr v3): ``states/<split>`` of shape (n_layers, n_seq, seq_len, d),
chunked (1, batch, seq_len, d) so that one batch of one layer is one chunk file;
``input_ids/<split>`` (n_seq, seq_len) int32, the tokens the states belong to; for the
held-out split, the backbone's own next-token reference from the same forward pass,
``argmax/<split>`` (n_seq, seq_len) int32 (its top-1 token) and ``nll/<split>`` (n_seq,
seq_len - 1) float32 (the NLL of the actual next token), chunked by batch like the states;
group attributes record the backbone (id, revision, shapes). Progress lives
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
REFERENCE_SPLITS = ("val",)  # the splits whose next-token reference the dump keeps
# the reference arrays: name -> (dtype, fill value: never a real value, so a chunk that is not
# there cannot read back as data, and positions per sequence, relative to seq_len)
REFERENCE = {"argmax": ("int32", -1, 0), "nll": ("float32", float("nan"), -1)}


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
        # the held-out split keeps the backbone's next-token reference (sequences of >= 2 tokens)
        self.reference_splits = tuple(s for s in REFERENCE_SPLITS
                                      if s in spec.n_seq and spec.seq_len >= 2)
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
                if split in self.reference_splits:
                    for name, (dtype, fill, extra) in REFERENCE.items():
                        zarr.create_array(
                            store=str(self.workdir / STATES), name=f"{name}/{split}",
                            shape=(n, spec.seq_len + extra),
                            chunks=(spec.batch_size, spec.seq_len + extra), dtype=dtype,
                            compressors=None, fill_value=fill,
                            config={"write_empty_chunks": True})
            zarr.open_group(str(self.workdir / STATES), mode="r+").attrs.update(attrs)
            progress = {"fingerprint": fingerprint, "done": {s: [] for s in spec.n_seq}}
            atomic_write_json(self.workdir / PROGRESS, progress)
        else:
            # Resuming (or repairing): the token ids are written again from `tokens`, so that
            # a damaged token chunk dropped by reopen_for_repair is restored (they are small)
            for split in spec.n_seq:
                zarr.create_array(
                    store=str(self.workdir / STATES), name=f"input_ids/{split}",
                    data=np.asarray(tokens[split], dtype=np.int32), overwrite=True,
                )
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

    def write_batch(self, split: str, batch: int, states, reference=None) -> None:
        """Write states (n_layers, b, seq_len, hidden) of one batch, and for a reference split
        its next-token `reference` (argmax (b, seq_len), nll (b, seq_len - 1): extract's
        next_token_reference), then record the batch as done."""
        start = batch * self.spec.batch_size
        if split in self.reference_splits:
            if reference is None:
                raise ValueError(f"the {split} split keeps the backbone's next-token reference: "
                                 "write_batch needs it (dihal.locate.extract.next_token_reference)")
            for name, values in zip(REFERENCE, reference, strict=True):
                self._group[name][split][start : start + len(values)] = values
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


def chunk_key(split: str, layer: int, batch: int) -> str:
    """The file of one (layer, batch) chunk inside the dump, relative to its folder."""
    return f"{STATES}/states/{split}/c/{layer}/{batch}/0/0"


def reference_chunk_key(name: str, split: str, batch: int) -> str:
    """The file of one batch of a next-token reference array (REFERENCE) inside the dump."""
    return f"{STATES}/{name}/{split}/c/{batch}/0"


def parse_chunk_key(rel: str) -> tuple[str, int | None, int] | None:
    """(split, layer, batch) of a chunk file (layer None for a reference chunk), or None for
    any other file of the dump."""
    parts = rel.split("/")
    if len(parts) == 8 and parts[:2] == [STATES, "states"] and parts[3] == "c":
        return parts[2], int(parts[4]), int(parts[5])
    if len(parts) == 6 and parts[0] == STATES and parts[1] in REFERENCE and parts[3] == "c":
        return parts[2], None, int(parts[4])
    return None


def token_chunk(rel: str) -> str | None:
    """The split of a file of the token ids (``input_ids/<split>``: its chunks and metadata),
    or None for any other file of the dump."""
    parts = rel.split("/")
    if len(parts) >= 4 and parts[:2] == [STATES, "input_ids"]:
        return parts[2]
    return None


def unrecorded(directory: Path, files: dict[str, list]) -> list[str]:
    """The Zarr metadata files in the dump that its record does not list (an array or group
    added since it was made: Zarr would show it, as another split for instance)."""
    found = (f.relative_to(directory).as_posix() for f in (Path(directory) / STATES).rglob("zarr.json"))
    return sorted(rel for rel in found if rel not in files)


def is_metadata(rel: str) -> bool:
    """Whether a file of the dump is checked whole on opening: anything but a chunk of the
    states or of the next-token reference (Zarr's metadata, the token ids)."""
    return parse_chunk_key(rel) is None


def repairable(rel: str) -> bool:
    """Whether a damaged file of the dump can be repaired without re-making it whole: a chunk
    of the states or of the next-token reference (its batch is written again), or a file of
    the token ids (written again from the sequences)."""
    return parse_chunk_key(rel) is not None or token_chunk(rel) is not None


def reopen_for_repair(directory: Path, workdir: Path, fingerprint: str,
                      damaged: list[str]) -> dict[str, list[int]]:
    """Turn a finished dump with damaged chunks back into a work folder that a StateWriter of
    the same fingerprint resumes: every batch with a damaged chunk is dropped from the
    progress record (and its chunks deleted), so only those batches are written again.
    Returns {split: [batches to rewrite]}."""
    import shutil

    bad: dict[str, set[int]] = {}
    tokens = [rel for rel in damaged if token_chunk(rel) is not None]
    for rel in tokens:  # the resumed StateWriter writes the token ids again
        (directory / rel).unlink(missing_ok=True)
    for rel in damaged:
        if rel in tokens:
            continue
        key = parse_chunk_key(rel)
        if key is None:
            raise CorruptArtifactError(f"{rel} of {directory} is not a state chunk: no partial repair")
        bad.setdefault(key[0], set()).add(key[2])
    reader = StateReader(directory, check=False)
    done = {}
    for split in reader.splits:
        n_seq, batch = reader.shape(split)[1], reader.array(split).chunks[1]
        done[split] = [b for b in range(-(-n_seq // batch)) if b not in bad.get(split, ())]
        for b in bad.get(split, ()):
            for layer in range(reader.n_layers()):
                (directory / chunk_key(split, layer, b)).unlink(missing_ok=True)
            if reader.has_reference(split):
                for name in REFERENCE:
                    (directory / reference_chunk_key(name, split, b)).unlink(missing_ok=True)
    if workdir.exists():
        shutil.rmtree(workdir)
    replace_dir(directory, workdir)
    atomic_write_json(workdir / PROGRESS, {"fingerprint": fingerprint, "done": done})
    return {s: sorted(v) for s, v in bad.items()}


class StateReader:
    """Read access to a finished dump. On opening, every chunk file must be there with its full
    size (a missing chunk would otherwise read back as zeros); with `files` (the manifest's
    record) the chunks of a layer are checked against their digests before they are read."""

    def __init__(self, directory: Path | str, files: dict[str, list] | None = None, *,
                 on_damage=None, check: bool = True):
        import zarr

        self.directory = Path(directory)
        self._files, self._on_damage, self._verified = files, on_damage, set()
        path = self.directory / STATES
        if not path.exists():
            raise FileNotFoundError(
                f"no hidden-state dump at {path}. Materialise the hidden_states asset first."
            )
        if files is not None:  # the metadata (dtype, shape, chunking) before Zarr reads it
            self._verify_metadata(files)
        try:
            self._group = zarr.open_group(str(path), mode="r")
            shapes = {s: self.array(s).shape for s in self.splits}
        except Exception as exc:  # zarr raises several types for a damaged store
            raise CorruptArtifactError(
                f"{path} cannot be opened as Zarr ({exc}). Delete {self.directory} and "
                "materialise the hidden_states asset again."
            ) from exc
        if check and shapes:
            self._check_chunks()

    def _damaged(self, problems: list[str]) -> None:
        if self._on_damage is not None:
            self._on_damage(problems)
        shown = "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")
        raise CorruptArtifactError(
            f"the hidden-state dump {self.directory} is damaged: {shown}. Materialise the "
            "hidden_states asset again: it re-writes only the damaged batches.")

    def _verify_metadata(self, files: dict[str, list]) -> None:
        """Every file of the dump but the chunks of states and reference (Zarr's metadata, the
        token ids) against its recorded digest: a changed dtype or shape would otherwise
        reinterpret every chunk, and pass the chunks' own digests."""
        from storage.manifest import check_files

        meta = {k: v for k, v in files.items() if is_metadata(k)}
        if not any(k.endswith("zarr.json") for k in meta):
            self._damaged([f"{STATES}: no digests recorded for its Zarr metadata"])
        if problems := check_files(self.directory, meta, digests=True):
            self._damaged(problems)
        if extra := unrecorded(self.directory, files):
            self._damaged([f"{rel}: not in the record (added since the dump was made)"
                           for rel in extra])

    def non_finite_chunks(self) -> list[str]:
        """The chunk files (chunk_key) of the states holding NaN or inf, each with its first
        place: "<chunk>: non-finite values (layer l, <split> sequence i, position t)"."""
        import numpy as np

        found = []
        for split in self.splits:
            batch = self.array(split).chunks[1]
            for layer in range(self.n_layers()):
                bad = np.argwhere(~np.isfinite(self.layer(split, layer)))
                for b in sorted({int(i) // batch for i in bad[:, 0]}):
                    i, t = (int(v) for v in bad[bad[:, 0] // batch == b][0][:2])
                    found.append(f"{chunk_key(split, layer, b)}: non-finite values (layer "
                                 f"{layer}, {split} sequence {i}, position {t})")
        return found

    def _check_chunks(self) -> None:
        import numpy as np

        def check(arr, keys) -> None:
            size = int(np.prod(arr.chunks)) * arr.dtype.itemsize
            for key in keys:
                f = self.directory / key
                if not f.is_file():
                    problems.append(f"{key}: missing")
                elif f.stat().st_size != size:
                    problems.append(f"{key}: {f.stat().st_size} bytes, expected {size}")

        problems: list[str] = []
        for split in self.splits:
            arr = self.array(split)
            n_layers, n_seq = arr.shape[:2]
            batches = range(-(-n_seq // arr.chunks[1]))
            check(arr, [chunk_key(split, layer, b) for layer in range(n_layers) for b in batches])
            if self.has_reference(split):
                for name in REFERENCE:
                    check(self._group[name][split],
                          [reference_chunk_key(name, split, b) for b in batches])
        if problems:
            self._damaged(problems)

    def _verify(self, prefix: str, what: str) -> None:
        """The chunks under `prefix` against their recorded digests, once per reader."""
        if self._files is None or prefix in self._verified:
            return
        from storage.manifest import check_files

        mine = {k: v for k, v in self._files.items() if k.startswith(prefix)}
        if not mine:
            self._damaged([f"{prefix}: no digests recorded for {what}"])
        if problems := check_files(self.directory, mine, digests=True):
            self._damaged(problems)
        self._verified.add(prefix)

    def _verify_layer(self, split: str, layer: int) -> None:
        self._verify(f"{STATES}/states/{split}/c/{layer}/", "this layer")

    def has_reference(self, split: str) -> bool:
        """Whether the dump keeps the backbone's next-token reference for `split` (dumps of
        hidden_states code version 1 do not)."""
        return all(name in self._group and split in self._group[name].array_keys()
                   for name in REFERENCE)

    def reference(self, split: str, n: int | None = None):
        """The backbone's own next-token reference for the first `n` sequences of `split`:
        (argmax (n, seq_len) int32, nll (n, seq_len - 1) float32), checked against the
        manifest's digests first; None where the dump does not keep one."""
        if not self.has_reference(split):
            return None
        for name in REFERENCE:
            self._verify(f"{STATES}/{name}/{split}/c/", f"the {name} reference")
        return tuple(self._group[name][split][:n] for name in REFERENCE)

    @property
    def splits(self) -> list[str]:
        return sorted(self._group["states"].array_keys())

    @property
    def attrs(self) -> dict[str, Any]:
        return dict(self._group.attrs)

    def shape(self, split: str) -> tuple[int, ...]:
        return tuple(self.array(split).shape)

    def input_ids(self, split: str):
        """The token ids of `split`, checked against the manifest's digests first (a changed
        token chunk of the same size would otherwise pass for data)."""
        self._verify(f"{STATES}/input_ids/{split}/", "the token ids")
        return self._group["input_ids"][split][:]

    def n_layers(self) -> int:
        return self.shape(self.splits[0])[0]

    def layer(self, split: str, layer: int):
        """States of one layer: numpy array (n_seq, seq_len, hidden) in the stored dtype."""
        n = self.n_layers()
        if not 0 <= layer < n:
            raise IndexError(f"layer {layer} out of range: this dump has layers 0..{n - 1}")
        self._verify_layer(split, layer)
        return self.array(split)[layer]

    def array(self, split: str):
        if split not in self.splits:
            raise KeyError(f"no split {split!r} in {self.directory}: it has {self.splits}")
        return self._group["states"][split]


def shape_problems(reader, sequences_config: dict) -> tuple[dict, dict, bool]:
    """(expected, found, ok): the dump's shapes against the backbone it records (layers, hidden
    size) and the sequences config (count, length), token ids included."""
    bb, n = reader.attrs, sequences_config
    got = {s: reader.shape(s) for s in reader.splits}
    want = {s: (bb["n_layers"], n[f"n_{s}"], n["seq_len"], bb["hidden_size"])
            for s in ("train", "val") if s == "val" or s in got}
    ids_ok = all(reader.input_ids(s).shape == want[s][1:3] for s in want if s in got)
    return want, got, got == want and ids_ok
