"""The artifact kinds of Locate: corpus, sequences, hidden states, geometry, layer score."""

from __future__ import annotations

import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from dihal.atomic import (
    atomic_write_bytes,
    atomic_write_text,
)
from dihal.errors import CorruptArtifactError
from dihal.inputs import GeometryRow, PredictorRow, ScoreRow, TokenResamples
from dihal.proxies import NAMES
from dihal.results import (
    GeometryResult,
    LayerScoreResult,
    SequencesResult,
)
from storage.artifacts.base import (
    DAMAGED,
    VERIFIED,
    Artifact,
    Plot,
    Table,
    WorkArtifact,
)
from storage.manifest import Manifest, check_files, digest_files, write_manifest
from storage.tables import read_rows, read_table, write_table


# --------------------------------------------------------------------------------------- Locate
class Corpus(Artifact):
    """The resolved and validated shard list (the documents stay where they are)."""

    @property
    def directory(self) -> Path:
        return self.layout.root / "corpus"


class Sequences(Artifact):
    files = ("sequences.parquet",)

    def _write_files(self, directory: Path, result: SequencesResult) -> None:
        rows: dict[str, list] = {"split": [], "index": [], "input_ids": [], "doc_ids": [],
                                 "sources": []}
        for split, ids in result.input_ids.items():
            for i, seq in enumerate(ids):
                rows["split"].append(split)
                rows["index"].append(i)
                rows["input_ids"].append(seq)
                rows["doc_ids"].append(result.doc_ids[split][i])
                rows["sources"].append(result.sources[split][i])
        write_table(directory / "sequences.parquet", rows)

    def token_ids(self) -> dict:
        """The token ids per split: {"train": (n, T) int64 array, "val": ...}."""
        import numpy as np

        table = read_table(self.path("sequences.parquet")).to_pydict()
        splits = dict.fromkeys(table["split"])
        return {s: np.array([ids for sp, ids in zip(table["split"], table["input_ids"], strict=True)
                             if sp == s], dtype=np.int64) for s in splits}


class HiddenStates(WorkArtifact):
    """hs[0..N-1] of every sequence (storage.states: Zarr, written batch by batch). The dump's
    own progress file decides what is resumed, so claiming only records the fingerprint. Chunk
    digests are checked by the reader, layer by layer, before a stage reads them; a damaged
    dump is repaired by writing its damaged batches again."""

    files = ("states.zarr",)
    _digests_on_require = False  # 30 layers x all tokens: the reader checks what it reads

    def claim(self, fp: str, log=None) -> Path:
        self._fp = fp
        return self.workdir

    def writer(self, spec, *, tokens: dict, attrs: dict):
        """The writer of the claimed dump (resuming the batches it already holds)."""
        from storage.states import StateWriter

        self._writer = StateWriter(self.workdir, spec, self._fp, tokens=tokens,
                                   attrs={**attrs, "fingerprint": self._fp})
        return self._writer

    def reader(self):
        """The dump, checked on opening (every chunk there, full size) and, layer by layer,
        against the manifest's digests before each read."""
        from storage.states import StateReader

        m = self.require()
        return StateReader(self.directory, m.files, on_damage=self.mark_damaged)

    def always_digested(self, rel: str) -> bool:
        """Zarr's metadata and the token ids: small, and read whole by every reader."""
        from storage.states import is_metadata

        return is_metadata(rel)

    def verify(self, manifest: Manifest, *, digests: bool) -> list[str]:
        """As for every kind, and no Zarr metadata beyond the record (an array or group added
        since the dump was made would show, as another split for instance)."""
        from storage.states import unrecorded

        return super().verify(manifest, digests=digests) + [
            f"{rel}: not in the record (added since the dump was made)"
            for rel in unrecorded(self.directory, manifest.files)]

    def non_finite(self) -> list[str]:
        """The chunks of the dump holding NaN or inf (storage.states: the chunk and its first
        place). Where there are any the dump is marked damaged with them, so that the next
        materialisation writes those batches again (a dump whose digests were recomputed over
        bad values would otherwise be reused as it is, and fail its check every time)."""
        found = self.reader().non_finite_chunks()
        if found:
            self.mark_damaged(found)
        return found

    def repair(self, fp: str, log=None) -> bool:
        """Reopen a damaged dump of fingerprint `fp` so that only its damaged batches (chunks
        that fail their digests, or that a reader or a check named) are written again; False
        where that is not possible (then it is re-made whole)."""
        from storage.states import reopen_for_repair, repairable, unrecorded

        try:
            m = self.manifest()
        except CorruptArtifactError:
            return False
        if m is None or m.fingerprint != fp or not m.files:
            return False
        bad = sorted({k for k, v in m.files.items()
                      if check_files(self.directory, {k: v}, digests=True)}
                     | set(self.damaged_files(m)))
        added = unrecorded(self.directory, m.files)
        if not (bad or added) or not all(repairable(k) for k in bad):
            return False
        for rel in added:  # an array or group added since: removed (its files, not the record's)
            folder = (self.directory / rel).parent
            inside = folder.relative_to(self.directory).as_posix() + "/"
            if any(k.startswith(inside) for k in m.files):
                (self.directory / rel).unlink()
            else:
                shutil.rmtree(folder)
        batches = reopen_for_repair(self.directory, self.workdir, fp, bad)
        for marker in (DAMAGED, VERIFIED):
            (self.workdir / marker).unlink(missing_ok=True)
        if log:
            log(f"repairing {self.name}: re-writing batches {batches} ({len(bad)} damaged "
                f"files{f'; removed {added}, not in the record' if added else ''})")
        return True

    def write(self, manifest: Manifest, result: Any) -> Manifest:
        from storage.states import PROGRESS

        work = self._writer.workdir
        manifest = replace(manifest, files=digest_files(work, skip=(PROGRESS,)))
        write_manifest(work, manifest)
        atomic_write_text(work / VERIFIED, f"{time.time():.0f}\n")
        self._writer.finalize(self.directory)
        return manifest


class Geometry(Artifact):
    files = ("geometry.parquet", "predictors.parquet", "resamples.parquet", "positions.parquet",
             "plan.parquet", "proxies.png")

    def _write_files(self, directory: Path, result: GeometryResult) -> None:
        pos = result.positions
        write_table(directory / "geometry.parquet", [r.to_dict() for r in result.rows])
        write_table(directory / "predictors.parquet", [p.to_dict() for p in result.predictors])
        write_table(directory / "resamples.parquet", result.resamples.columns())
        write_table(directory / "positions.parquet", {
            "sample": list(range(len(pos))), "split": ["val"] * len(pos),
            "sequence": pos[:, 0].tolist(), "position": pos[:, 1].tolist()})
        anchors, pairs = result.anchors, result.pairs
        write_table(directory / "plan.parquet", {
            "kind": ["anchor"] * len(anchors) + ["pair"] * len(pairs),
            "i": anchors.tolist() + pairs[:, 0].tolist(),
            "j": [-1] * len(anchors) + pairs[:, 1].tolist()})
        atomic_write_bytes(directory / "proxies.png", result.plot_png)

    def rows(self) -> list[GeometryRow]:
        return [GeometryRow.from_dict(r) for r in read_rows(self.path("geometry.parquet"))]

    def predictor_rows(self) -> list[PredictorRow]:
        """The rival predictors of each candidate layer (dihal.locate.predictors)."""
        return [PredictorRow.from_dict(r) for r in read_rows(self.path("predictors.parquet"))]

    def resamples(self) -> TokenResamples:
        """The proxies' token-bootstrap replicates."""
        return TokenResamples.from_columns(read_table(self.path("resamples.parquet")).to_pydict())

    def plot(self) -> bytes:
        return self.path("proxies.png").read_bytes()

    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        first = manifest.config["normalizations"][0]
        rivals = self.predictor_rows()
        return {**super().metadata(manifest), "plot": Plot(self.path("proxies.png"), "proxies"),
                "table": Table([r.to_dict() for r in self.rows() if r.norm == first],
                               ["layer", *NAMES]),
                "rival_predictors": Table([r.to_dict() for r in rivals],
                                          list(PredictorRow.__dataclass_fields__) if rivals
                                          else ["layer"])}


class LayerScore(Artifact):
    files = ("layer_score.parquet", "score.png")

    def _write_files(self, directory: Path, result: LayerScoreResult) -> None:
        write_table(directory / "layer_score.parquet", [r.to_dict() for r in result.rows])
        atomic_write_bytes(directory / "score.png", result.plot_png)

    def rows(self) -> list[ScoreRow]:
        return [ScoreRow.from_dict(r) for r in read_rows(self.path("layer_score.parquet"))]

    def plot(self) -> bytes:
        return self.path("score.png").read_bytes()

    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        rows = [r for r in self.rows() if r.candidate]
        norms = sorted({r.norm for r in rows})
        s = {(r.norm, r.layer): r.S for r in rows}
        table = [{"layer": ll, **{f"S ({n})": s[(n, ll)] for n in norms}}
                 for ll in sorted({r.layer for r in rows})]
        return {**super().metadata(manifest), "plot": Plot(self.path("score.png"), "S_l"),
                "scores": Table(table, ["layer"] + [f"S ({n})" for n in norms])}

