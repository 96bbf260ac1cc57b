"""The artifact kinds of Replace: trained bridges (sweep, regression control, l*, and the
base of the bridges made under another stage's asset) and bridgeability."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dihal.atomic import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
)
from dihal.errors import CorruptArtifactError, MissingArtifactError
from dihal.generation_rows import BudgetSample
from dihal.results import (
    BridgeabilityResult,
    BridgeHparams,
    BudgetGenerationResult,
    BudgetResult,
    TrainedBridge,
)
from dihal.rows import BridgeMetrics, BudgetGenerationRow, BudgetPoint
from dihal.run.stages import asset_key
from storage.artifacts.base import (
    Artifact,
    Markdown,
    Plot,
    Table,
    WorkArtifact,
    preview,
)
from storage.manifest import Manifest
from storage.tables import read_rows, write_table


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
        atomic_write_json(directory / "hparams.json", result.hparams.to_dict())
        write_table(directory / "curve.parquet",
                    [p.to_dict() for p in result.curve] or [{"step": 0, "loss": float("nan")}])

    def always_digested(self, rel: str) -> bool:
        """Every file, on every reuse however recent the last check: a bridge is a few MB read
        whole by each reader, and a same-size change to its weights is found by its digest
        only."""
        return True

    def metrics(self) -> BridgeMetrics:
        """The bridge's metrics, from its manifest (its files checked as every reuse checks
        them), without reading its weights: no torch, no tensors."""
        return BridgeMetrics(**self.require().info["metrics"])

    def read(self) -> TrainedBridge:
        """The saved bridge (tensors on the CPU), with its metrics from the manifest."""
        from safetensors.torch import load_file

        m = self.require()
        try:
            hparams = BridgeHparams.from_dict(json.loads(self.path("hparams.json").read_text()))
            tensors = load_file(str(self.path("bridge.safetensors")))
        except FileNotFoundError as exc:
            raise MissingArtifactError(
                f"the bridge at {self.directory} is incomplete ({exc.filename} missing): "
                f"materialise it again: {self.command()}") from exc
        except Exception as exc:  # safetensors raises its own error type for damaged files
            raise CorruptArtifactError(
                f"the bridge at {self.directory} cannot be read ({exc}). Delete the directory "
                f"and materialise it again: {self.command()}") from exc
        return TrainedBridge(tensors, hparams, BridgeMetrics(**m.info["metrics"]),
                             seed_metrics=[BridgeMetrics(**d) for d in m.info.get("seed_metrics", [])])


class SweepBridge(BridgeRun):
    """bridge_sweep_<b>, partition `key` = the candidate layer."""

    keyed = True

    @property
    def directory(self) -> Path:
        return self.layout.stage(self.stage, self.backbone) / f"layer_{int(self.key):03d}"


class RegressionControl(SweepBridge):
    """regression_sweep_<b>, partition `key` = the candidate layer: the sweep bridge's network
    and budget trained to predict h_l from the condition in one step."""


class Bridge(BridgeRun):
    """bridge_<b>: the bridge at l*, full budget."""


class LayerMadeUnder(BridgeRun):
    """A bridge of layer `key`, kept in `<folder>/layer_NNN` and made under another stage's
    asset (`under`) by the code of `stage`."""

    folder: str
    under: str
    keyed = True

    @property
    def directory(self) -> Path:
        return self.layout.stage(self.folder, self.backbone) / f"layer_{int(self.key):03d}"

    @property
    def asset(self) -> str:
        return asset_key(self.under, self.backbone)


class Bridgeability(Artifact):
    files = ("layers.parquet", "spearman.parquet", "regression.parquet", "scatter.png")

    def _write_files(self, directory: Path, result: BridgeabilityResult) -> None:
        write_table(directory / "layers.parquet", result.layer_columns())
        write_table(directory / "spearman.parquet", result.spearman_columns())
        write_table(directory / "regression.parquet", result.regression_columns())
        atomic_write_bytes(directory / "scatter.png", result.plot_png)

    def layers(self) -> list[BridgeMetrics]:
        """Each swept layer's bridge, by layer, as the stage wrote it."""
        return [BridgeMetrics.from_dict(r) for r in read_rows(self.path("layers.parquet"))]

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
                "layers": Table([m.to_dict() for m in self.layers()], ["layer", "val_loss",
                                                                        "recon_error",
                                                    "hybrid_nll", "top1_agreement"])}


class BudgetStudy(WorkArtifact):
    """budget_<b>, partition `key` = the layer: the training-budget study's points there (one
    row per model and budget). While it is made, each point is kept in its work directory as
    soon as it exists (`kept_points`), so an interrupted study resumes where it stopped."""

    files = ("points.parquet",)
    keyed = True

    @property
    def directory(self) -> Path:
        return self.layout.stage(self.stage, self.backbone) / f"layer_{int(self.key):03d}"

    @property
    def checkpoints(self) -> Path:
        """Where the study's trainings checkpoint while it is made."""
        return self.workdir / "checkpoints"

    @property
    def _kept(self) -> Path:
        return self.workdir / "points.jsonl"

    def keep_point(self, point: BudgetPoint) -> None:
        """Add a finished point to the work directory (written whole, atomically)."""
        kept = self.kept_points() + [point]
        atomic_write_text(self._kept, "".join(json.dumps(p.to_dict()) + "\n" for p in kept))

    def kept_points(self) -> list[BudgetPoint]:
        """The points kept in the work directory of the current claim (none: a fresh start).
        The work directory is claimed under the artifact's fingerprint, so these were made
        under the same config and upstream."""
        if not self._kept.exists():
            return []
        try:
            return [BudgetPoint.from_dict(json.loads(x)) for x in
                    self._kept.read_text().splitlines() if x.strip()]
        except (ValueError, TypeError) as exc:
            raise CorruptArtifactError(
                f"the budget study's kept points {self._kept} cannot be read ({exc}): delete "
                f"{self.workdir} and materialise it again: {self.command()}") from exc

    def _write_files(self, directory: Path, result: BudgetResult) -> None:
        write_table(directory / "points.parquet", [p.to_dict() for p in result.points])
        (directory / "points.jsonl").unlink(missing_ok=True)

    def points(self) -> list[BudgetPoint]:
        """The study's points at this layer, as written."""
        self.require()
        return [BudgetPoint.from_dict(r) for r in read_rows(self.path("points.parquet"))]

    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        return {**super().metadata(manifest),
                "points": Table(manifest.info["points"], [
                    "model", "train_steps", "tokens", "distinct_tokens", "val_loss", "t1_loss",
                    "recon_error", "hybrid_nll", "seconds"])}


class BudgetGeneration(WorkArtifact):
    """budget_generation_<b>: DiHAL at l* and CoDAR trained at the budget study's lowest and
    highest budget, sampled and scored (one row per model and budget), and their samples.
    While it is made, each finished row is kept in its work directory with its samples
    (`kept`), so an interrupted run resumes where it stopped; its trainings checkpoint there."""

    files = ("generation.parquet", "samples.jsonl")

    @property
    def checkpoints(self) -> Path:
        """Where its trainings checkpoint while it is made."""
        return self.workdir / "checkpoints"

    @property
    def _kept(self) -> Path:
        return self.workdir / "kept.jsonl"

    def keep(self, row: BudgetGenerationRow, samples: list[BudgetSample]) -> None:
        """Add a finished row and its samples to the work directory (written whole,
        atomically)."""
        kept = self.kept() + [(row, samples)]
        atomic_write_text(self._kept, "".join(
            json.dumps({"row": r.to_dict(), "samples": [x.to_dict() for x in s]}) + "\n"
            for r, s in kept))

    def kept(self) -> list[tuple[BudgetGenerationRow, list[BudgetSample]]]:
        """The rows (with their samples) kept in the work directory of the current claim (none:
        a fresh start); the claim is under the artifact's fingerprint, so these were made
        under the same config and upstream."""
        if not self._kept.exists():
            return []
        try:
            lines = [json.loads(x) for x in self._kept.read_text().splitlines() if x.strip()]
            return [(BudgetGenerationRow.from_dict(x["row"]),
                     [BudgetSample.from_dict(s) for s in x["samples"]]) for x in lines]
        except (ValueError, TypeError, KeyError) as exc:
            raise CorruptArtifactError(
                f"the kept rows {self._kept} cannot be read ({exc}): delete {self.workdir} and "
                f"materialise it again: {self.command()}") from exc

    def _write_files(self, directory: Path, result: BudgetGenerationResult) -> None:
        write_table(directory / "generation.parquet", [r.to_dict() for r in result.rows])
        atomic_write_text(directory / "samples.jsonl",
                          "".join(json.dumps(s.to_dict()) + "\n" for s in result.samples))
        (directory / "kept.jsonl").unlink(missing_ok=True)

    def rows(self) -> list[BudgetGenerationRow]:
        """Its rows, as written."""
        self.require()
        return [BudgetGenerationRow.from_dict(r) for r in read_rows(self.path("generation.parquet"))]

    def samples(self) -> list[BudgetSample]:
        return [BudgetSample.from_dict(json.loads(x))
                for x in self.path("samples.jsonl").read_text().splitlines()]

    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        texts: dict[str, list[str]] = {}
        for s in self.samples():
            texts.setdefault(f"{s.model} @ {s.train_steps} steps", []).append(s.text)
        return {**super().metadata(manifest),
                "rows": Table(manifest.info["rows"], [
                    "model", "train_steps", "tokens", "distinct_tokens", "gen_ppl", "gen_ppl_low",
                    "gen_ppl_high", "diversity", "n_samples", "empty_samples", "seconds"]),
                "samples": Markdown(preview(texts))}
