"""The Locate family's table rows (dihal.inputs: GeometryRow, PredictorRow, ScoreRow) as their
writers make them, written by storage (to_dict, the columns in order) and read back
(from_dict) unchanged."""

from __future__ import annotations

import math

import pyarrow.parquet as pq
import pytest
import torch

from dihal.config import GeometryConfig, LayerScoreConfig
from dihal.inputs import GeometryRow, PredictorRow, ScoreRow
from dihal.locate.predictors import PREDICTORS
from dihal.locate.stage import compute_geometry, score_layers
from dihal.proxies import PROXIES
from dihal.run.stages import CODE_VERSIONS
from storage import Manifest
from storage.artifacts.locate import Geometry, LayerScore
from tests.tiny import ArrayReader

GEOMETRY_COLUMNS = ["layer", "norm", "m_curv", "m_mono", "m_mono_median", "m_mono_q05",
                    "m_mono_min_eig", "k_eff", "tr_sigma", "lambda_max"]
SCORE_COLUMNS = [*GEOMETRY_COLUMNS, "z_curv", "z_mono", "z_keff", "S", "candidate", "rank"]
PREDICTOR_COLUMNS = ["layer", "cond_distance", "cond_cka", "block_influence", "ridge_r2",
                     "twonn_id", "massive_share"]


@pytest.fixture(scope="module")
def located():
    g = torch.Generator().manual_seed(0)
    layers = torch.randn(4, 6, 17, 8, generator=g) * torch.arange(1, 5).view(4, 1, 1, 1)
    reader = ArrayReader(layers.to(torch.float16).numpy())
    cfg = GeometryConfig(n_tokens=80, n_anchors=20, k_neighbors=5, n_pairs=100)
    geometry = compute_geometry(reader, cfg, backbone="t")
    return geometry, score_layers(geometry.rows, LayerScoreConfig(), backbone="t")


def _write(art, stage, result, config):
    art.write(Manifest(stage=stage, backbone="t", fingerprint="f" * 64,
                       code_version=CODE_VERSIONS[stage], config=config,
                       info={**result.info(), "metadata": result.metadata()}), result)


def test_the_rows_columns_are_the_fields_in_order():
    assert list(GeometryRow.__dataclass_fields__) == GEOMETRY_COLUMNS
    assert list(ScoreRow.__dataclass_fields__) == SCORE_COLUMNS
    assert list(PredictorRow.__dataclass_fields__) == PREDICTOR_COLUMNS
    # the proxies' and predictors' own tables name the same columns
    assert {p.name for p in PROXIES} <= set(GEOMETRY_COLUMNS)
    assert [p.z_column for p in PROXIES] == ["z_curv", "z_mono", "z_keff"]
    assert PREDICTOR_COLUMNS == ["layer", *PREDICTORS]


def test_each_row_as_its_writer_makes_it_reads_back_from_its_columns(located):
    geometry, score = located
    assert all(isinstance(r, GeometryRow) and not isinstance(r, ScoreRow) for r in geometry.rows)
    assert all(isinstance(p, PredictorRow) for p in geometry.predictors)
    assert all(isinstance(r, ScoreRow) for r in score.rows)
    assert len(geometry.predictors) == 3 and len(score.rows) == len(geometry.rows) == 4 * 4
    for cls, rows in ((GeometryRow, geometry.rows), (PredictorRow, geometry.predictors),
                      (ScoreRow, score.rows)):
        for row in rows:
            d = row.to_dict()
            assert cls.from_dict(d) == row and cls.from_dict(d).to_dict() == d
            assert list(d) == list(cls.__dataclass_fields__)
    layer0 = next(r for r in score.rows if r.layer == 0)
    assert not layer0.candidate and layer0.rank is None and math.isnan(layer0.S)
    # a score row carries its geometry row's columns unchanged
    by_key = {(g.layer, g.norm): g for g in geometry.rows}
    for r in score.rows:
        assert GeometryRow.from_dict(r.to_dict()) == by_key[(r.layer, r.norm)]


def test_storage_writes_the_columns_in_order_and_reads_the_rows_back(located, tmp_path):
    geometry, score = located
    geo = Geometry(tmp_path, "t")
    _write(geo, "geometry", geometry, {"normalizations": list(GeometryConfig().normalizations)})
    ls = LayerScore(tmp_path, "t")
    _write(ls, "layer_score", score, {"primary_norm": "none"})
    for path, columns in ((geo.path("geometry.parquet"), GEOMETRY_COLUMNS),
                          (geo.path("predictors.parquet"), PREDICTOR_COLUMNS),
                          (ls.path("layer_score.parquet"), SCORE_COLUMNS)):
        assert pq.read_schema(path).names == columns
    assert geo.rows() == geometry.rows and geo.predictor_rows() == geometry.predictors
    # NaN is not equal to itself: compare the candidates whole and layer 0 column by column
    back = ls.rows()
    assert [r for r in back if r.candidate] == [r for r in score.rows if r.candidate]
    for got, want in zip(back, score.rows, strict=True):
        assert [(k, v) for k, v in got.to_dict().items() if v == v] == \
            [(k, v) for k, v in want.to_dict().items() if v == v]
