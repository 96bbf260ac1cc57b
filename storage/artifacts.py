"""One class per artifact kind. Each owns its directory, its file names, its manifest and its
atomic write, and reads back typed values (dihal.results). Nobody else spells a file name.

An artifact is a directory under the artifact root holding its files and ``manifest.json``
(written last, inside the same atomic swap: a directory with a manifest is complete). Kinds
that are built over a long, resumable computation (the hidden-state dump, trained bridges and
baselines) fill ``<dir>.partial`` first, stamped with the fingerprint it is being made for, and
swap it into place when done.

Metadata for display is returned as plain values plus the small `Plot`, `Table` and `FileLink`
wrappers below, so that this package needs no Dagster.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from dihal.atomic import (
    atomic_dir,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    replace_dir,
)
from dihal.errors import CorruptArtifactError, MissingArtifactError
from dihal.results import (
    BaselineResult,
    BridgeabilityResult,
    ComparisonResult,
    EvalResult,
    FullTrainingResult,
    GeometryResult,
    LayerScoreResult,
    ReportInputs,
    ReportResult,
    SamplerCurveResult,
    SequencesResult,
    TrainedBridge,
)
from storage.layout import ArtifactLayout
from storage.manifest import Manifest, check_files, digest_files, read_manifest, write_manifest
from storage.tables import read_rows, read_table, write_table

DAMAGED = ".damaged"  # a reader found damage: re-make, never reuse
VERIFIED = ".verified"  # when the digests were last checked


@dataclass(frozen=True)
class Plot:
    path: Path
    title: str


@dataclass(frozen=True)
class Table:
    rows: list[dict]
    columns: list[str]
    fmt: str = ".4g"


@dataclass(frozen=True)
class FileLink:
    path: Path


@dataclass(frozen=True)
class Markdown:
    text: str


class Artifact:
    """Base of every kind. `stage` is the manifest's stage and the asset's name prefix."""

    stage: ClassVar[str]
    files: ClassVar[tuple[str, ...]] = ()

    def __init__(self, layout: ArtifactLayout | Path | str, backbone: str | None = None,
                 key: str | int | None = None):
        self.layout = layout if isinstance(layout, ArtifactLayout) else ArtifactLayout(layout)
        self.backbone, self.key = backbone, key

    # identity ------------------------------------------------------------------------------
    @property
    def directory(self) -> Path:
        return self.layout.stage(self.stage, self.backbone)

    @property
    def asset(self) -> str:
        """The Dagster asset that makes it (without partition)."""
        return f"{self.stage}_{self.backbone}" if self.backbone else self.stage

    @property
    def name(self) -> str:
        """How a downstream manifest names it among its upstream artifacts."""
        return self.asset if self.key is None else f"{self.asset}[{self.key}]"

    def command(self) -> str:
        part = f" --partition {self.key}" if self.key is not None else ""
        return f"dagster asset materialize --select '*{self.asset}'{part}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name} at {self.directory})"

    # manifest and verification -------------------------------------------------------------
    def manifest(self) -> Manifest | None:
        return read_manifest(self.directory)

    def verify(self, manifest: Manifest, *, digests: bool) -> list[str]:
        """What is wrong with the files on disk against the manifest's record (sizes always,
        content with `digests`): empty when the artifact is intact."""
        if (self.directory / DAMAGED).exists():
            return [f"marked damaged by a reader: {(self.directory / DAMAGED).read_text().strip()}"]
        if self.files and not manifest.files:
            return ["no file digests recorded (made by an older version of dihal)"]
        problems = [f"{name}: missing from the record" for name in self.files
                    if not any(k == name or k.startswith(name + "/") for k in manifest.files)]
        return problems + check_files(self.directory, manifest.files, digests=digests)

    def mark_damaged(self, problems: list[str]) -> None:
        """Record that a reader found damage, so that the artifact is re-made, never reused."""
        if self.directory.is_dir():
            atomic_write_text(self.directory / DAMAGED, "; ".join(problems[:20]) + "\n")

    def stamp_verified(self) -> None:
        atomic_write_text(self.directory / VERIFIED, f"{time.time():.0f}\n")

    def verified_within(self, seconds: float) -> bool:
        """Were the digests checked (or written) less than `seconds` ago?"""
        try:
            return time.time() - float((self.directory / VERIFIED).read_text()) < seconds
        except (FileNotFoundError, ValueError):
            return False

    def require(self) -> Manifest:
        """The manifest of a finished, intact artifact (digests checked: a downstream stage is
        about to read it), or an error naming the command that makes or repairs it."""
        m = self.manifest()
        if m is None:
            raise MissingArtifactError(
                f"upstream asset {self.name} has not been materialised (nothing at "
                f"{self.directory}). Run: {self.command()}")
        if problems := self.verify(m, digests=self._digests_on_require):
            self.mark_damaged(problems)
            raise CorruptArtifactError(
                f"upstream asset {self.name} at {self.directory} is damaged: "
                f"{'; '.join(problems[:5])}. Materialise it again ({self.command()}): "
                "a damaged artifact is re-made, never reused.")
        return m

    _digests_on_require: ClassVar[bool] = True

    def reuse(self, fp: str, *, digests: bool = True) -> Manifest | None:
        """The existing artifact if it was made from exactly this fingerprint and is intact
        (sizes always, content with `digests`); `self.damage` says why it is not."""
        self.damage: list[str] = []
        try:
            m = self.manifest()
        except CorruptArtifactError as exc:
            self.damage = [str(exc)]
            return None
        if m is None or m.fingerprint != fp:
            return None
        if problems := self.verify(m, digests=digests):
            self.damage = problems
            return None
        if digests:
            self.stamp_verified()
        return m

    def path(self, name: str) -> Path:
        """The path of one of this artifact's own files."""
        if name not in self.files:
            raise KeyError(f"{type(self).__name__} has no file {name!r}; it has {self.files}")
        return self.directory / name

    def repair(self, fp: str, log=None) -> bool:
        """Prepare a partial re-make of a damaged artifact; False: it is made again whole."""
        return False

    def lock(self):
        """The one-writer lock of this artifact (storage.locks)."""
        from storage.locks import artifact_lock

        return artifact_lock(self.directory, self.name)

    # writing -------------------------------------------------------------------------------
    def write(self, manifest: Manifest, result: Any) -> Manifest:
        """Write the result's files and the manifest (with every file's size and digest),
        swapped into place in one step."""
        with atomic_dir(self.directory) as tmp:
            self._write_files(tmp, result)
            manifest = replace(manifest, files=digest_files(tmp))
            write_manifest(tmp, manifest)
            atomic_write_text(tmp / VERIFIED, f"{time.time():.0f}\n")
        return manifest

    def _write_files(self, directory: Path, result: Any) -> None:
        pass

    # display -------------------------------------------------------------------------------
    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        """What the UI shows for this artifact: the manifest's key numbers, plus plots/tables."""
        return dict(manifest.info.get("metadata", {}))


class WorkArtifact(Artifact):
    """An artifact made in a resumable work directory, stamped with its fingerprint."""

    STAMP: ClassVar[str] = "FINGERPRINT"

    @property
    def workdir(self) -> Path:
        return self.directory.with_name(self.directory.name + ".partial")

    def claim(self, fp: str, log=None) -> Path:
        """The work directory for fingerprint `fp`: kept (to resume) if it was started for the
        same fingerprint, cleared if another config left it there."""
        work, stamp = self.workdir, self.workdir / self.STAMP
        if work.exists() and (not stamp.exists() or stamp.read_text().strip() != fp):
            if log:
                log(f"discarding {work}: it was started under another config")
            shutil.rmtree(work)
        if stamp.exists() and log:
            log(f"resuming from {work}")
        work.mkdir(parents=True, exist_ok=True)
        atomic_write_text(stamp, fp)
        return work

    def write(self, manifest: Manifest, result: Any) -> Manifest:
        """Write the result into the (claimed) work directory, then swap it into place; the
        training checkpoints it was resumed from are dropped (the result supersedes them)."""
        work = self.workdir
        if not (work / self.STAMP).exists():
            self.claim(manifest.fingerprint)
        self._write_files(work, result)
        shutil.rmtree(work / "checkpoints", ignore_errors=True)
        (work / self.STAMP).unlink()
        manifest = replace(manifest, files=digest_files(work))
        write_manifest(work, manifest)
        atomic_write_text(work / VERIFIED, f"{time.time():.0f}\n")
        replace_dir(work, self.directory)
        return manifest


# --------------------------------------------------------------------------------------- Locate
class Corpus(Artifact):
    """The resolved and validated shard list (the documents stay where they are)."""

    stage = "corpus"

    @property
    def directory(self) -> Path:
        return self.layout.root / "corpus"


class Sequences(Artifact):
    stage = "sequences"
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

    stage = "hidden_states"
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

    def repair(self, fp: str, log=None) -> bool:
        """Reopen a damaged dump of fingerprint `fp` so that only its damaged batches are
        written again; False where that is not possible (then it is re-made whole)."""
        from storage.states import reopen_for_repair, repairable

        try:
            m = self.manifest()
        except CorruptArtifactError:
            return False
        if m is None or m.fingerprint != fp or not m.files:
            return False
        bad = [k for k, v in m.files.items() if check_files(self.directory, {k: v}, digests=True)]
        if not bad or not all(repairable(k) for k in bad):
            return False
        batches = reopen_for_repair(self.directory, self.workdir, fp, bad)
        for marker in (DAMAGED, VERIFIED):
            (self.workdir / marker).unlink(missing_ok=True)
        if log:
            log(f"repairing {self.name}: re-writing batches {batches} ({len(bad)} damaged chunks)")
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
    stage = "geometry"
    files = ("geometry.parquet", "predictors.parquet", "resamples.parquet", "positions.parquet",
             "plan.parquet", "proxies.png")

    def _write_files(self, directory: Path, result: GeometryResult) -> None:
        pos = result.positions
        write_table(directory / "geometry.parquet", result.rows)
        write_table(directory / "predictors.parquet", result.predictors)
        write_table(directory / "resamples.parquet", result.resamples or {
            "resample": [], "layer": [], "norm": [], "m_curv": [], "m_mono": [], "k_eff": []})
        write_table(directory / "positions.parquet", {
            "sample": list(range(len(pos))), "split": ["val"] * len(pos),
            "sequence": pos[:, 0].tolist(), "position": pos[:, 1].tolist()})
        anchors, pairs = result.anchors, result.pairs
        write_table(directory / "plan.parquet", {
            "kind": ["anchor"] * len(anchors) + ["pair"] * len(pairs),
            "i": anchors.tolist() + pairs[:, 0].tolist(),
            "j": [-1] * len(anchors) + pairs[:, 1].tolist()})
        atomic_write_bytes(directory / "proxies.png", result.plot_png)

    def rows(self) -> list[dict]:
        return read_rows(self.path("geometry.parquet"))

    def predictor_rows(self) -> list[dict]:
        """The rival predictors of each candidate layer (dihal.predictors)."""
        return read_rows(self.path("predictors.parquet"))

    def resamples(self) -> dict[str, list]:
        """The proxies' token-bootstrap replicates, as columns."""
        return read_table(self.path("resamples.parquet")).to_pydict()

    def plot(self) -> bytes:
        return self.path("proxies.png").read_bytes()

    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        first = manifest.config["normalizations"][0]
        rivals = self.predictor_rows()
        return {**super().metadata(manifest), "plot": Plot(self.path("proxies.png"), "proxies"),
                "table": Table([r for r in self.rows() if r["norm"] == first],
                               ["layer", "m_curv", "m_mono", "k_eff"]),
                "rival_predictors": Table(rivals, list(rivals[0]) if rivals else ["layer"])}


class LayerScore(Artifact):
    stage = "layer_score"
    files = ("layer_score.parquet", "score.png")

    def _write_files(self, directory: Path, result: LayerScoreResult) -> None:
        write_table(directory / "layer_score.parquet", result.rows)
        atomic_write_bytes(directory / "score.png", result.plot_png)

    def rows(self) -> list[dict]:
        return read_rows(self.path("layer_score.parquet"))

    def plot(self) -> bytes:
        return self.path("score.png").read_bytes()

    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        rows = [r for r in self.rows() if r["candidate"]]
        norms = sorted({r["norm"] for r in rows})
        s = {(r["norm"], r["layer"]): r["S"] for r in rows}
        table = [{"layer": ll, **{f"S ({n})": s[(n, ll)] for n in norms}}
                 for ll in sorted({r["layer"] for r in rows})]
        return {**super().metadata(manifest), "plot": Plot(self.path("score.png"), "S_l"),
                "scores": Table(table, ["layer"] + [f"S ({n})" for n in norms])}


# -------------------------------------------------------------------------------------- Replace
class BridgeRun(WorkArtifact):
    """A trained bridge: weights (safetensors), hyper-parameters (JSON), training curve."""

    files = ("bridge.safetensors", "hparams.json", "curve.parquet")

    @property
    def checkpoints(self) -> Path:
        """Where training checkpoints go while the bridge is being made (resumable)."""
        return self.workdir / "checkpoints"

    def _write_files(self, directory: Path, result: TrainedBridge) -> None:
        from safetensors.torch import save

        atomic_write_bytes(directory / "bridge.safetensors",
                           save({k: v.contiguous() for k, v in result.tensors.items()}))
        atomic_write_json(directory / "hparams.json", result.hparams)
        write_table(directory / "curve.parquet", result.curve or [{"step": 0, "loss": float("nan")}])

    def read(self) -> TrainedBridge:
        """The saved bridge (tensors on the CPU), with its metrics from the manifest."""
        from safetensors.torch import load_file

        from dihal.results import BridgeMetrics

        m = self.require()
        try:
            hparams = json.loads(self.path("hparams.json").read_text())
            tensors = load_file(str(self.path("bridge.safetensors")))
        except FileNotFoundError as exc:
            raise MissingArtifactError(
                f"the bridge at {self.directory} is incomplete ({exc.filename} missing): "
                f"materialise it again: {self.command()}") from exc
        except Exception as exc:  # safetensors raises its own error type for damaged files
            raise CorruptArtifactError(
                f"the bridge at {self.directory} cannot be read ({exc}). Delete the directory "
                f"and materialise it again: {self.command()}") from exc
        return TrainedBridge(tensors, hparams, BridgeMetrics(**m.info["metrics"]))


class SweepBridge(BridgeRun):
    """bridge_sweep_<b>, partition `key` = the candidate layer."""

    stage = "bridge_sweep"

    @property
    def directory(self) -> Path:
        return self.layout.stage(self.stage, self.backbone) / f"layer_{int(self.key):03d}"


class RegressionControl(SweepBridge):
    """regression_sweep_<b>, partition `key` = the candidate layer: the sweep bridge's network
    and budget trained to predict h_l from the condition in one step."""

    stage = "regression_sweep"


class Bridge(BridgeRun):
    """bridge_<b>: the bridge at l*, full budget."""

    stage = "bridge"


class FullTrainingBridge(BridgeRun):
    """A full-budget bridge at another layer (the oracle or the worst), made by full_training."""

    stage = "bridge"

    @property
    def directory(self) -> Path:
        return self.layout.stage("full_training_bridges", self.backbone) / f"layer_{int(self.key):03d}"

    @property
    def asset(self) -> str:
        return f"full_training_{self.backbone}"


def swept_bridges(layout: ArtifactLayout, backbone: str, n_layers: int,
                  hidden_states: Manifest) -> list[tuple[SweepBridge, Manifest]]:
    """The sweep partitions trained on the current hidden states, by layer."""
    found = []
    for layer in range(1, n_layers):
        art = SweepBridge(layout, backbone, layer)
        m = art.manifest()
        if m is not None and m.upstream.get(HiddenStates(layout, backbone).name) == hidden_states.fingerprint:
            found.append((art, m))
    return found


def regression_controls(layout: ArtifactLayout, backbone: str,
                        swept: list[tuple[SweepBridge, Manifest]]) -> list[tuple[RegressionControl, Manifest]]:
    """The regression controls made against the given (current) sweep bridges, by layer."""
    found = []
    for bridge, bm in swept:
        art = RegressionControl(layout, backbone, bridge.key)
        m = art.manifest()
        if m is not None and m.upstream.get(bridge.name) == bm.fingerprint:
            found.append((art, m))
    return found


def bridgeability_inputs(layout: ArtifactLayout, backbone: str, n_layers: int,
                         hidden_states: Manifest) -> dict[str, list[tuple[Artifact, Manifest]]]:
    """What bridgeability_<b> is made from: {"score": [layer score], "geometry": [...],
    "sweep": current sweep bridges, "regression": their regression controls}; an entry is
    empty where the artifact does not exist yet."""
    out = {}
    for key, cls in (("score", LayerScore), ("geometry", Geometry)):
        art = cls(layout, backbone)
        m = art.manifest()
        out[key] = [(art, m)] if m is not None else []
    out["sweep"] = swept_bridges(layout, backbone, n_layers, hidden_states)
    out["regression"] = regression_controls(layout, backbone, out["sweep"])
    return out


class Bridgeability(Artifact):
    stage = "bridgeability"
    files = ("layers.parquet", "spearman.parquet", "regression.parquet", "scatter.png")

    def _write_files(self, directory: Path, result: BridgeabilityResult) -> None:
        write_table(directory / "layers.parquet", result.layer_rows)
        write_table(directory / "spearman.parquet", result.spearman)
        write_table(directory / "regression.parquet", result.regression)
        atomic_write_bytes(directory / "scatter.png", result.plot_png)

    def layer_rows(self) -> list[dict]:
        return read_rows(self.path("layers.parquet"))

    def plot(self) -> bytes:
        return self.path("scatter.png").read_bytes()

    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        spearman = manifest.info["spearman"]
        return {**super().metadata(manifest),
                "plot": Plot(self.path("scatter.png"), "S_l vs bridgeability"),
                "spearman": Table(spearman, list(spearman[0]), ".3f"),
                "bridge_vs_regression": Table(manifest.info.get("regression", []), [
                    "layer", "bridge_hybrid_nll", "regression_hybrid_nll", "bridge_recon_error",
                    "regression_recon_error"]),
                "layers": Table(self.layer_rows(), ["layer", "val_loss", "recon_error",
                                                    "hybrid_nll", "top1_agreement"])}


class RowsArtifact(Artifact):
    """An artifact that is one table of rows (`result.rows`), shown in the UI with `columns`."""

    columns: ClassVar[list[str]] = []

    def _write_files(self, directory: Path, result: SamplerCurveResult | FullTrainingResult) -> None:
        write_table(directory / self.files[0], result.rows)

    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        return {**super().metadata(manifest), "table": Table(manifest.info["rows"], self.columns)}


class SamplerCurve(RowsArtifact):
    stage = "sampler_steps"
    files = ("curve.parquet",)
    columns = ["steps", "recon_error", "hybrid_nll", "top1_agreement", "ms_per_token"]


class Evaluation(Artifact):
    stage = "eval"
    files = ("eval.parquet", "samples.jsonl")

    def _write_files(self, directory: Path, result: EvalResult) -> None:
        write_table(directory / "eval.parquet", result.rows)
        atomic_write_text(directory / "samples.jsonl",
                          "".join(json.dumps(s) + "\n" for s in result.samples))

    def sample_lines(self) -> list[str]:
        """The samples file as written: one JSON object a line."""
        return self.path("samples.jsonl").read_text().splitlines()

    def samples(self) -> list[dict]:
        return [json.loads(x) for x in self.sample_lines()]

    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        return {**super().metadata(manifest),
                "table": Table(manifest.info["rows"], ["model", "gen_ppl", "diversity",
                                                       "repetition", "mean_length", "ms_per_token"]),
                "samples": Markdown(_preview(_by_model(self.samples())))}


# -------------------------------------------------------------------------------------- Compare
class BaselineRun(WorkArtifact):
    """baseline_<b>, partition `key` = the baseline's name."""

    stage = "baseline"
    files = ("model.safetensors", "hparams.json", "samples.jsonl")

    @property
    def directory(self) -> Path:
        return self.layout.stage(self.stage, self.backbone) / str(self.key)

    @property
    def checkpoints(self) -> Path:
        return self.workdir / "checkpoints"

    def _write_files(self, directory: Path, result: BaselineResult) -> None:
        from safetensors.torch import save

        atomic_write_bytes(directory / "model.safetensors",
                           save({k: v.detach().contiguous().cpu() for k, v in result.tensors.items()}))
        atomic_write_json(directory / "hparams.json", result.hparams)
        atomic_write_text(directory / "samples.jsonl", "".join(
            json.dumps({"model": result.name, "index": i, "text": t}) + "\n"
            for i, t in enumerate(result.texts)))

    def samples(self) -> list[dict]:
        return [json.loads(x) for x in self.path("samples.jsonl").read_text().splitlines()]

    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        return {**super().metadata(manifest), "budget": manifest.info["row"]["budget"],
                "samples": Markdown(_preview({self.key: [s["text"] for s in self.samples()]}))}


class Comparison(Artifact):
    stage = "comparison"
    files = ("comparison.parquet",)

    def _write_files(self, directory: Path, result: ComparisonResult) -> None:
        write_table(directory / "comparison.parquet",
                    [{k: (None if v is None else v if k in ("model", "role") else float(v))
                      for k, v in r.items()} for r in result.rows])

    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        return {**super().metadata(manifest), "table": Table(
            manifest.info["rows"], ["model", "gen_ppl", "diversity", "repetition",
                                    "denoiser_parameters", "train_tokens", "sampler_steps"])}


class FullTraining(RowsArtifact):
    stage = "full_training"
    files = ("full_training.parquet",)
    columns = ["role", "layer", "val_loss", "hybrid_nll", "top1_agreement", "gen_ppl", "diversity"]


class Report(Artifact):
    stage = "report"
    files = ("report.html", "report.md")

    @property
    def html(self) -> Path:
        return self.path("report.html")

    def markdown(self) -> str:
        return self.path("report.md").read_text()

    def _write_files(self, directory: Path, result: ReportResult) -> None:
        atomic_write_text(directory / "report.html", result.html)
        atomic_write_text(directory / "report.md", result.markdown)

    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        return {"report": FileLink(self.path("report.html")),
                "report_md": FileLink(self.path("report.md"))}


def _by_model(samples: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for s in samples:
        out.setdefault(s["model"], []).append(s["text"])
    return out


def _preview(by_model: dict[str, list[str]], n: int = 5) -> str:
    """Markdown: the first samples of each model."""
    return "\n\n".join(f"**{model}**\n\n" + "\n".join(
        f"{i + 1}. {json.dumps(t[:300])}" for i, t in enumerate(texts[:n]))
        for model, texts in by_model.items())


def current_baselines(layout: ArtifactLayout, backbone: str, names: tuple[str, ...],
                      bridge: Manifest) -> list[tuple[BaselineRun, Manifest]]:
    """The baseline runs made against the current bridge, in `names` order."""
    found = [(a, a.manifest()) for a in (BaselineRun(layout, backbone, n) for n in names)]
    return [(a, m) for a, m in found
            if m is not None and m.upstream.get(Bridge(layout, backbone).name) == bridge.fingerprint]


def other_backbones(layout: ArtifactLayout, backbone: str) -> list[str]:
    """The other backbones of the artifact root whose layer score and bridgeability exist
    (found on disk: a folder of the root with both artifacts' manifests), sorted."""
    return [d.name for d in sorted(Path(layout.root).iterdir())
            if d.is_dir() and d.name != backbone and not d.name.startswith(".")
            and LayerScore(layout, d.name).manifest() is not None
            and Bridgeability(layout, d.name).manifest() is not None]


def cross_backbone_artifacts(layout: ArtifactLayout, backbone: str) -> list[Artifact]:
    """What the cross-backbone table reads of the other materialised backbones (the report's
    fingerprint includes them, so the report is made again when one changes or appears)."""
    out: list[Artifact] = []
    for b in other_backbones(layout, backbone):
        out += [LayerScore(layout, b), Bridgeability(layout, b)]
        if Evaluation(layout, b).manifest() is not None:
            out.append(Evaluation(layout, b))
    return out


def backbone_summary(layout: ArtifactLayout, backbone: str) -> dict:
    """One backbone's line of the cross-backbone table, from its checked artifacts: l* per
    normalisation, bridgeability (oracle, worst, Spearman rows), and its evaluation's rows and
    judge where it has been evaluated."""
    score, bness = LayerScore(layout, backbone).require(), Bridgeability(layout, backbone).require()
    ev = Evaluation(layout, backbone)
    em = ev.require() if ev.manifest() is not None else None
    return {"backbone": backbone, "selected": score.info["selected"], "bridgeability": bness.info,
            "eval_rows": em.info["rows"] if em else None,
            "judge": em.info["judge"]["judge"] if em else None}


def report_inputs(layout: ArtifactLayout, backbone: str) -> ReportInputs:
    """Everything the report of one backbone shows, read from its finished artifacts."""
    arts = {a.stage: a for a in (cls(layout, backbone) for cls in (
        Sequences, HiddenStates, Geometry, LayerScore, Bridgeability, Bridge, Evaluation,
        SamplerCurve, Comparison, FullTraining))}
    m = {stage: a.require() for stage, a in arts.items()}
    bness, cmp_ = m["bridgeability"].info, m["comparison"].info
    samples = _by_model(arts["eval"].samples())
    for row in cmp_["rows"]:
        if row.get("role") == "baseline" and (b := BaselineRun(layout, backbone, row["model"])).manifest():
            samples[row["model"]] = b.manifest().info["samples"]
    return ReportInputs(
        backbone=backbone, backbone_info=m["hidden_states"].info["backbone"],
        configs={"sequences": m["sequences"].config, "hidden_states": m["hidden_states"].config,
                 "geometry": m["geometry"].config, "layer_score": m["layer_score"].config,
                 "bridge (full)": m["bridge"].config, "eval": m["eval"].config},
        geometry_rows=arts["geometry"].rows(), predictor_rows=arts["geometry"].predictor_rows(),
        score_rows=arts["layer_score"].rows(),
        score=m["layer_score"].info, bridgeability=bness,
        sweep_layers=arts["bridgeability"].layer_rows(),
        sweep_protocol=SweepBridge(layout, backbone, bness["oracle"]).require().config,
        comparison=cmp_, evaluation=m["eval"].info, full_training=m["full_training"].info["rows"],
        sampler_curve=m["sampler_steps"].info,
        samples=samples, plots={"proxies": arts["geometry"].plot(), "score": arts["layer_score"].plot(),
                                "scatter": arts["bridgeability"].plot()},
        backbones=[backbone_summary(layout, b) for b in (backbone, *other_backbones(layout, backbone))],
        artifacts=str(layout.root / backbone),
        fingerprints={a.name: m[stage].fingerprint for stage, a in arts.items()})
