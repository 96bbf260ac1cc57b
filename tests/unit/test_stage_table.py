"""One stage table (dihal.run.stages) gives the asset keys, the named jobs and the driver's stages;
the changelog of its code versions is CHANGELOG.md, one section per stage at its version."""

import re
from pathlib import Path

import pytest

from dihal.run.stages import DRIVER_STAGES, JOBS, STAGES, STUDY_JOBS, asset_key, job_keys, job_name

ROOT = Path(__file__).resolve().parents[2]


def test_the_jobs_and_the_drivers_stages_come_from_the_table():
    import pipeline.main as driver
    from pipeline.definitions import stage_jobs

    built = stage_jobs("smollm2")
    assert [j.name for j in built] == [job_name(j.name, "smollm2") for j in (*JOBS, *STUDY_JOBS)]
    assert not {j.name for j in STUDY_JOBS} & {j.name for j in JOBS}  # the driver's are JOBS
    assert driver.STAGES == list(DRIVER_STAGES) == ["locate", "sweep", "bridge", "eval", "report"]
    assert {s for j in (*JOBS, *STUDY_JOBS) for s in j.stages} <= set(STAGES)
    assert job_keys(JOBS[1], "qwen") == ["bridge_sweep_qwen", "regression_sweep_qwen"]
    with pytest.raises(KeyError, match="unknown job 'sweeps'"):
        job_name("sweeps", "qwen")


@pytest.mark.parametrize("module", ["pipeline/definitions.py", "pipeline/main.py"])
def test_no_asset_key_or_job_name_is_spelt_outside_the_table(module):
    names = "|".join([*STAGES, *(j.name for j in JOBS)])
    spelt = re.findall(rf'f"(?:{names})_\{{', (ROOT / module).read_text())
    assert spelt == [], spelt
    assert asset_key("bridge", "llama") == "bridge_llama"


def test_the_changelog_has_each_stage_at_its_code_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    found = dict(re.findall(r"^## (\w+) \(code version (\d+)\)$", text, re.M))
    assert found == {name: s.code_version for name, s in STAGES.items()}
    for name, s in STAGES.items():  # the newest entry is the current version
        section = text.split(f"## {name} (code version {s.code_version})")[1].split("\n## ")[0]
        assert re.search(rf"^- {s.code_version}\b", section, re.M) or s.code_version == "1", name


def test_the_code_location_resolves_every_job_with_no_name_shared_by_a_job_and_an_asset():
    """Dagster refuses a code location where a job and an asset share a name (the implicit
    asset job holds the asset's op): every door would fail to load it."""
    from pipeline.definitions import build_definitions

    repo = build_definitions(("smollm2", "gemma3")).get_repository_def()
    jobs = {j.name for j in repo.get_all_jobs()}
    assets = {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()}
    assert {"budget_study_smollm2", "sweep_gemma3"} <= jobs
    assert "budget_smollm2" in assets and not jobs & assets
