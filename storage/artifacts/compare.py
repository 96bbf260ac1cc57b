"""The artifact kinds of Compare: the baselines, the comparison, full training and its bridges."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dihal.atomic import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
)
from dihal.generation_rows import RoleSample
from dihal.results import (
    BaselineResult,
    ComparisonResult,
    FullTrainingResult,
)
from storage.artifacts.base import (
    Artifact,
    Markdown,
    RowsArtifact,
    Table,
    WorkArtifact,
    preview,
)
from storage.artifacts.evaluate import FRONTIER_COLUMNS
from storage.artifacts.replace import LayerMadeUnder
from storage.manifest import Manifest
from storage.tables import write_table


# -------------------------------------------------------------------------------------- Compare
class BaselineRun(WorkArtifact):
    """baseline_<b>, partition `key` = the baseline's name."""

    keyed = True

    files = ("model.safetensors", "hparams.json", "samples.jsonl")

    @property
    def directory(self) -> Path:
        return self.layout.stage(self.stage, self.backbone) / str(self.key)

    @property
    def checkpoints(self) -> Path:
        return self.workdir / "checkpoints"

    def always_digested(self, rel: str) -> bool:
        """Every file, on every reuse however recent the last check, as a bridge's: a trained
        baseline is a few MB, and a same-size change to its weights is found by its digest
        only."""
        return True

    def _write_files(self, directory: Path, result: BaselineResult) -> None:
        from safetensors.torch import save

        atomic_write_bytes(directory / "model.safetensors",
                           save({k: v.detach().contiguous().cpu() for k, v in result.tensors.items()}))
        atomic_write_json(directory / "hparams.json", result.hparams)
        atomic_write_text(directory / "samples.jsonl", "".join(
            json.dumps({"model": result.name, "index": i, "text": t}) + "\n"
            for i, t in enumerate(result.texts)))

    def texts(self) -> list[str]:
        """The baseline's samples' texts, in the order drawn (index 0 first)."""
        records = [json.loads(x) for x in self.path("samples.jsonl").read_text().splitlines()]
        return [r["text"] for r in sorted(records, key=lambda r: r["index"])]

    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        return {**super().metadata(manifest), "budget": manifest.info["row"]["budget"],
                "samples": Markdown(preview({self.key: self.texts()}))}


class Comparison(Artifact):
    files = ("comparison.parquet",)

    def _write_files(self, directory: Path, result: ComparisonResult) -> None:
        write_table(directory / "comparison.parquet",
                    [{k: (None if v is None else v if isinstance(v, str) else
                          [float(x) for x in v] if isinstance(v, list) else float(v))
                      for k, v in r.to_dict().items()} for r in result.rows])

    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        return {**super().metadata(manifest), "table": Table(
            manifest.info["rows"], ["model", "gen_ppl", "diversity", "repetition",
                                    "denoiser_parameters", "train_tokens", "sampler_steps"]),
                **({"frontier": Table(manifest.info["frontier"], FRONTIER_COLUMNS)}
                   if manifest.info.get("frontier") else {})}


class FullTraining(RowsArtifact):
    files = ("full_training.parquet", "samples.jsonl")
    columns = ["role", "layer", "sampler", "sampler_steps", "rule", "val_loss", "hybrid_nll", "top1_agreement",
               "gen_ppl", "diversity"]

    def _write_files(self, directory: Path, result: FullTrainingResult) -> None:
        write_table(directory / self.files[0], [r.to_dict() for r in result.rows])
        atomic_write_text(directory / "samples.jsonl",
                          "".join(json.dumps(s.to_dict()) + "\n" for s in result.samples))

    def samples(self) -> list[RoleSample]:
        """Every role's samples as written, with their judge NLL and tokens."""
        return [RoleSample.from_dict(json.loads(x))
                for x in self.path("samples.jsonl").read_text().splitlines()]


class FullTrainingBridge(LayerMadeUnder):
    """A full-budget bridge at another layer (the oracle or the worst), made by full_training."""

    stage = "bridge"  # made by the bridge's code, under the full_training asset
    folder, under = "full_training_bridges", "full_training"
