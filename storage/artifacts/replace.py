"""The artifact kinds of Replace: trained bridges (sweep, regression control, l*, full
training), bridgeability, the sampler-steps curve and the evaluation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from dihal.atomic import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
)
from dihal.errors import CorruptArtifactError, MissingArtifactError
from dihal.results import (
    BridgeabilityResult,
    EvalResult,
    FullTrainingResult,
    SamplerCurveResult,
    TrainedBridge,
)
from dihal.stages import asset_key
from storage.artifacts.base import (
    Artifact,
    Markdown,
    Plot,
    Table,
    WorkArtifact,
    _by_model,
    _preview,
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
        return TrainedBridge(tensors, hparams, BridgeMetrics(**m.info["metrics"]),
                             seed_metrics=[BridgeMetrics(**d) for d in m.info.get("seed_metrics", [])])


class SweepBridge(BridgeRun):
    """bridge_sweep_<b>, partition `key` = the candidate layer."""

    @property
    def directory(self) -> Path:
        return self.layout.stage(self.stage, self.backbone) / f"layer_{int(self.key):03d}"


class RegressionControl(SweepBridge):
    """regression_sweep_<b>, partition `key` = the candidate layer: the sweep bridge's network
    and budget trained to predict h_l from the condition in one step."""


class Bridge(BridgeRun):
    """bridge_<b>: the bridge at l*, full budget."""


class _LayerMadeUnder(BridgeRun):
    """A bridge of layer `key`, kept in `<folder>/layer_NNN` and made under another stage's
    asset (`under`) by the code of `stage`."""

    folder: str
    under: str

    @property
    def directory(self) -> Path:
        return self.layout.stage(self.folder, self.backbone) / f"layer_{int(self.key):03d}"

    @property
    def asset(self) -> str:
        return asset_key(self.under, self.backbone)


class FullTrainingBridge(_LayerMadeUnder):
    """A full-budget bridge at another layer (the oracle or the worst), made by full_training."""

    stage = "bridge"  # made by the bridge's code, under the full_training asset
    folder, under = "full_training_bridges", "full_training"


class FullRegressionControl(_LayerMadeUnder):
    """The regression control at l* trained with the full budget (the bridge stage's protocol,
    one step, one seed), made by the eval asset for its regression row; the sweep-budget
    controls (RegressionControl) stay bridgeability's."""

    stage = "regression_sweep"  # made by the regression control's code, under the eval asset
    folder, under = "full_regression", "eval"

    def command(self) -> str:  # made by the (unpartitioned) eval asset
        return f"dagster asset materialize --select '*{self.asset}'"


class Bridgeability(Artifact):
    files = ("layers.parquet", "spearman.parquet", "regression.parquet", "scatter.png")

    def _write_files(self, directory: Path, result: BridgeabilityResult) -> None:
        write_table(directory / "layers.parquet", result.layer_rows)
        write_table(directory / "spearman.parquet", result.spearman_columns())
        write_table(directory / "regression.parquet", result.regression_columns())
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
    files = ("curve.parquet",)
    columns = ["steps", "recon_error", "hybrid_nll", "top1_agreement", "ms_per_token"]


class Evaluation(Artifact):
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
                **({"frontier": Table(manifest.info["frontier"], FRONTIER_COLUMNS)}
                   if manifest.info.get("frontier") else {}),
                "samples": Markdown(_preview(_by_model(self.samples())))}


# the temperature frontier's points as the UI shows them (eval's and comparison's)
FRONTIER_COLUMNS = ["model", "temperature", "gen_ppl", "diversity", "diversity_spacy",
                    "mean_judge_length", "sampled"]

