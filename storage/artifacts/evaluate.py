"""The artifact kinds of Evaluate: the sampler-steps curve, the evaluation and the
full-budget regression control the evaluation makes for its regression row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dihal.atomic import atomic_write_text
from dihal.generation_rows import Sample, texts_by_model
from dihal.results import EvalResult, SamplerCurveResult
from storage.artifacts.base import (
    Artifact,
    Markdown,
    RowsArtifact,
    Table,
    preview,
    samples_table,
)
from storage.artifacts.replace import LayerMadeUnder
from storage.manifest import Manifest
from storage.tables import write_table


class SamplerCurve(RowsArtifact):
    files = ("curve.parquet",)
    columns = ["sampler_steps", "recon_error", "hybrid_nll", "top1_agreement", "ms_per_token"]

    def _write_files(self, directory: Path, result: SamplerCurveResult) -> None:
        write_table(directory / self.files[0], result.info()["rows"])


class FullRegressionControl(LayerMadeUnder):
    """The regression control at l* trained with the full budget (the bridge stage's protocol,
    one step, one seed), made by the eval asset for its regression row; the sweep-budget
    controls (RegressionControl) stay bridgeability's."""

    stage = "regression_sweep"  # made by the regression control's code, under the eval asset
    folder, under = "full_regression", "eval"

    def command(self) -> str:  # made by the (unpartitioned) eval asset
        return f"dagster asset materialize --select '*{self.asset}'"


class Evaluation(Artifact):
    files = ("eval.parquet", "samples.jsonl")

    def _write_files(self, directory: Path, result: EvalResult) -> None:
        write_table(directory / "eval.parquet", [r.to_dict() for r in result.rows])
        atomic_write_text(directory / "samples.jsonl",
                          "".join(json.dumps(s.to_dict()) + "\n" for s in result.samples))

    def sample_lines(self) -> list[str]:
        """The samples file as written: one JSON object a line."""
        return self.path("samples.jsonl").read_text().splitlines()

    def samples(self) -> list[Sample]:
        return [Sample.from_dict(json.loads(x)) for x in self.sample_lines()]

    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        samples = self.samples()
        return {**super().metadata(manifest),
                "table": Table(manifest.info["rows"], ["model", "gen_ppl", "diversity",
                                                       "repetition", "mean_length", "ms_per_token"]),
                **({"frontier": Table(manifest.info["frontier"], FRONTIER_COLUMNS)}
                   if manifest.info.get("frontier") else {}),
                "samples": Markdown(preview(texts_by_model(samples))),
                # the first samples of every model side by side (sample i: the same seed and
                # uniforms)
                "samples_side_by_side": Markdown(samples_table(samples))}


# the temperature frontier's points as the UI shows them (eval's and comparison's)
FRONTIER_COLUMNS = ["model", "temperature", "gen_ppl", "diversity", "diversity_spacy",
                    "mean_judge_length", "sampled"]
