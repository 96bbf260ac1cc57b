"""Every door into the pipeline is one product: the driver beside `dg dev` (one code location
name, one instance, one daemon), the web UI in a browser, `dagster asset materialize`, `dg
launch` and a schedule's tick through the daemon's scheduler, under the preset chosen once for
the project, give one fingerprint. One `dg dev` serves the module (tests/pipeline/doors.py);
each story has its own declared backbone (the same tiny model), so each test starts from
nothing of its own."""

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.pipeline.doors import (
    ROOT,
    beside_dg_dev,
    cli,
    cli_reuses,
    driver,
    finished_run,
    materializations,
    preset_label,
)
from tests.tiny import SHOTS, open_browser, tiny_profile


def test_the_driver_names_the_code_location_as_dg_dev_does():
    """The launcher's location and the daemon's workspace file carry pyproject's
    [tool.dagster] name, which Dagster's own pyproject loading (`dagster dev`, `dg dev`,
    `make ui`) gives the project's module."""
    from dagster._core.workspace.load_target import PyProjectFileTarget

    from pipeline.daemon import location_name
    from pipeline.location import location_target

    served = PyProjectFileTarget(str(ROOT / "pyproject.toml")).create_origins()[0]
    assert location_target("pipeline.definitions").create_origins()[0].location_name == \
        served.location_name == "dihal"
    assert location_name("tests.tiny_location") == "tests.tiny_location"


def test_a_missing_upstream_of_a_backbone_without_weights_names_the_weights_first(tmp_path):
    """`dagster asset materialize --select bridge_llama` on a host without Llama's weights:
    the first message already says how to get them (then what to materialise)."""
    import dagster as dg

    from pipeline.definitions import build_definitions
    from resources import StorageResource

    defs = build_definitions(("llama",), resources={
        "storage": StorageResource(root=str(tmp_path / "artifacts"))})
    res = dg.materialize(list(defs.assets), selection=["bridge_llama"], resources=defs.resources,
                         instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    (fail,) = [e for e in res.all_events if e.event_type_value == "STEP_FAILURE"]
    text = fail.step_failure_data.user_failure_data.description
    assert text.startswith("weights of backbone 'llama' (meta-llama/Llama-3.1-8B-Instruct) were "
                           "not found"), text
    assert "hf download meta-llama/Llama-3.1-8B-Instruct" in text
    assert "Then: upstream asset layer_score_llama has not been materialised" in text


@pytest.fixture(scope="module")
def beside(tmp_path_factory, tiny_llama_dir):
    """The project with the driver's, the browser's and the schedule's declared backbones, `dg
    dev` serving it."""
    with beside_dg_dev(tmp_path_factory.mktemp("doors"), tiny_llama_dir,
                       ("tinyfolder", "tinyui", "tinytick")) as served:
        yield served


LOCATE_ONLY = ("--layers", "1", "--stop-after", "locate", "--skip-bridgeability")


def test_the_driver_runs_beside_dg_dev_through_its_daemon(beside):
    """With `dg dev` up (its daemon serving the location it names `dihal`), the driver uses
    that daemon and its runs find their code: Locate of the declared backbone succeeds, under
    the project's preset."""
    tmp, env, dev = beside  # its daemon beats
    out = driver(env, "tinyfolder", *LOCATE_ONLY)
    assert "using the Dagster daemon that is already running" in out.stdout
    assert "started a Dagster daemon" not in out.stdout
    score = json.loads((tmp / "artifacts" / "tinyfolder" / "layer_score" / "manifest.json")
                       .read_text())
    assert score["backbone"] == "tinyfolder"
    assert score["info"]["preset"] == preset_label(tmp / "tiny.json")
    assert "profile " + str(tmp / "tiny.json") in out.stdout
    assert dev.proc.poll() is None  # dg dev still serves


def test_dg_dev_serves_the_code_location_with_the_declared_backbones(beside):
    """`dg dev` (DAGSTER_MODULE_NAME unset, as docs/own-model.md says) serves the project's
    code location: the UI's GraphQL lists the declared backbones' assets beside the built-in
    ones."""
    _, _, dev = beside
    query = json.dumps({"query": "{ assetNodes { assetKey { path } } }"}).encode()
    req = urllib.request.Request(f"{dev.url}/graphql", data=query,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as answer:
        nodes = json.loads(answer.read())["data"]["assetNodes"]
    keys = {n["assetKey"]["path"][0] for n in nodes}
    assert {"layer_score_tinyfolder", "report_tinyui", "corpus",
            "bridge_llama"} <= keys


def test_the_cli_and_dg_reuse_the_drivers_artifact_with_one_fingerprint(beside):
    """`dagster asset materialize` and `dg launch`, under the project's preset as the driver
    was, find layer_score up to date: the same fingerprint, nothing recomputed."""
    tmp, env, _ = beside
    manifest = tmp / "artifacts" / "tinyfolder" / "layer_score" / "manifest.json"
    made = json.loads(manifest.read_text())["fingerprint"]
    for command in (["dagster", "asset", "materialize", "-m", "pipeline.definitions",
                     "--select", "layer_score_tinyfolder"],
                    ["dg", "launch", "--assets", "layer_score_tinyfolder"]):
        out = cli(env, *command)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert json.loads(manifest.read_text())["fingerprint"] == made
    doors = materializations(env, "layer_score_tinyfolder")
    print("layer_score_tinyfolder by door (driver, CLI, dg):",
          [(m["fingerprint"], m["cached"], m["preset"]) for m in doors])
    label = preset_label(tmp / "tiny.json")
    assert [(m["cached"], m["preset"]) for m in doors] == [
        (False, label), (True, label), (True, label)]
    assert {m["fingerprint"] for m in doors} == {made[:16]}


def test_a_door_under_another_preset_is_refused_with_the_command(beside):
    """The CLI under another preset (a process's DIHAL_PROFILE) does not mix its geometry
    with the project preset's hidden states: refused, naming the upstream and the command."""
    tmp, env, _ = beside
    other = tiny_profile(tmp / "other.json", tmp / "s0.json.gz",
                         geometry={"n_tokens": 60, "n_anchors": 24, "k_neighbors": 6,
                                   "n_pairs": 100})
    out = cli({**env, "DIHAL_PROFILE": str(other)}, "dagster", "asset", "materialize", "-m",
               "pipeline.definitions", "--select", "geometry_tinyfolder")
    assert out.returncode != 0
    text = out.stdout + out.stderr
    print(text[text.find("geometry_tinyfolder: its upstream"):][:700])
    assert ("geometry_tinyfolder: its upstream hidden_states_tinyfolder was made under preset "
            f"'{preset_label(tmp / 'tiny.json')}', this run's preset is "
            f"'{preset_label(other)}'") in text
    assert f"DIHAL_PROFILE={other} dagster asset materialize --select " \
           "'*hidden_states_tinyfolder'" in text


def _click(browser, wait, label: str) -> None:
    """Click the button labelled `label` once the page has stopped re-rendering it."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    for _ in range(5):
        try:
            wait.until(ec.element_to_be_clickable(
                (By.XPATH, f"//button[normalize-space()='{label}']"))).click()
            return
        except StaleElementReferenceException:
            time.sleep(1)
    raise AssertionError(f"the button {label!r} kept re-rendering")


def _asset_page(browser, wait, url: str) -> tuple[str, int]:
    """The l* an asset page of layer_score shows in its metadata, and the natural width of its
    plot once "Show Markdown" has loaded it (0: it did not load)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    browser.get(url)
    row = wait.until(ec.presence_of_element_located(
        (By.XPATH, "//tr[td[normalize-space()='l_star']]")))
    l_star = row.find_elements(By.XPATH, "./td")[-1].text.strip()
    browser.save_screenshot(SHOTS / "doors-4-asset-metadata.png")
    show = browser.find_element(
        By.XPATH, "//tr[td[normalize-space()='plot']]//*[contains(text(), 'Show Markdown')]")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", show)
    show.click()
    img = wait.until(ec.presence_of_element_located((By.XPATH, "//img[@alt='S_l']")))
    wait.until(lambda b: b.execute_script("return arguments[0].complete", img))
    width = browser.execute_script("return arguments[0].naturalWidth", img)
    browser.save_screenshot(SHOTS / "doors-5-plot.png")
    return l_star, width


def test_the_ui_makes_layer_score_and_the_driver_and_the_cli_reuse_it(beside):
    """In a real browser, the Locate job's page of the UI that `dg dev` serves (location
    `dihal`, the project's tiny preset) materialises layer_score_tinyui with its upstream; the
    lineage graph shows the backbone's group, and the asset page its l* and the plot. The
    driver under the same preset then reuses it (manifest fingerprint unchanged, cached), and
    `dagster asset materialize` too: one fingerprint across the three doors. Screenshots land
    in .dihal/test-artifacts/ui/."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    tmp, env, dev = beside
    browser = open_browser()  # skipped (failed in CI) without chromium and its driver
    SHOTS.mkdir(parents=True, exist_ok=True)
    wait = WebDriverWait(browser, 120)
    try:
        browser.get(f"{dev.url}/locations/dihal/jobs/locate_tinyui")
        wait.until(ec.presence_of_element_located(
            (By.XPATH, "//*[contains(text(), 'layer score for tinyui')]")))
        browser.save_screenshot(SHOTS / "doors-1-locate-job.png")
        _click(browser, wait, "Materialize all")
        run = finished_run(env, job_name="locate_tinyui")
        browser.get(f"{dev.url}/runs/{run.run_id}")
        wait.until(ec.presence_of_element_located((By.XPATH, "//*[contains(., 'Success')]")))
        browser.save_screenshot(SHOTS / "doors-2-run.png")
        browser.get(f"{dev.url}/asset-groups")  # the lineage graph: corpus -> the backbone's
        for group in ("corpus", "tinyui"):
            wait.until(ec.presence_of_element_located(
                (By.XPATH, f"//*[normalize-space(text())='{group}']")))
        browser.save_screenshot(SHOTS / "doors-3-asset-graph.png")
        shown_l_star, plot_width = _asset_page(browser, wait, f"{dev.url}/assets/layer_score_tinyui")
    finally:
        browser.quit()
    assert run.status.value == "SUCCESS", (run.status, dev.log_tail())
    assert run.remote_job_origin.location_name == "dihal"
    manifest = tmp / "artifacts" / "tinyui" / "layer_score" / "manifest.json"
    made = json.loads(manifest.read_text())
    assert made["info"]["preset"] == preset_label(tmp / "tiny.json")
    # the asset page shows the l* the run recorded, and its plot loads
    assert shown_l_star == str(materializations(env, "layer_score_tinyui")[0]["l_star"])
    assert plot_width > 0, "the plot image on the asset page did not load"
    out = driver(env, "tinyui", *LOCATE_ONLY)
    assert "using the Dagster daemon that is already running" in out.stdout
    doors = cli_reuses(env, "layer_score_tinyui", manifest, made)
    print("layer_score_tinyui by door (UI, driver, CLI):",
          [(m["fingerprint"], m["cached"], m["preset"]) for m in doors])
    assert doors[0]["run_id"] == run.run_id  # the UI's run made it
    label = preset_label(tmp / "tiny.json")
    assert [(m["cached"], m["preset"]) for m in doors] == [
        (False, label), (True, label), (True, label)]
    assert {m["fingerprint"] for m in doors} == {made["fingerprint"][:16]}


# Two ticks of a schedule as the daemon's scheduler makes them (dagster._scheduler), in one
# process (the code location loaded once): the schedule started on the instance, the
# scheduler's loop run up to its next cron time (03:00 would be a long wait), its run request
# submitted to the instance's run queue, which `dg dev`'s daemon launches; once every run of
# that tick has finished, the next tick. Prints the schedule's ticks as JSON on a line of its
# own ("TICKS [...]").
TICKS = """
import datetime, json, logging, sys, time
import dagster as dg
import dagster._daemon  # first: it imports the scheduler
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import PyProjectFileTarget
from dagster._scheduler.scheduler import launch_scheduled_runs

with dg.DagsterInstance.get() as instance, WorkspaceProcessContext(
        instance, PyProjectFileTarget("pyproject.toml")) as ctx:
    (entry,) = ctx.create_request_context().get_code_location_entries().values()
    (repo,) = entry.code_location.get_repositories().values()
    schedule = repo.get_schedule(sys.argv[1])
    origin, selector = schedule.get_remote_origin_id(), schedule.selector_id

    def tick():
        now = datetime.datetime.now(datetime.timezone.utc).timestamp()
        after = max([now] + [t.timestamp for t in instance.get_ticks(origin, selector)])
        due = next(schedule.execution_time_iterator(after + 1))
        list(launch_scheduled_runs(ctx, logging.getLogger("tick"),
                                   due + datetime.timedelta(minutes=1), {}))
        return instance.get_ticks(origin, selector)[0]

    instance.start_schedule(schedule)
    deadline = time.monotonic() + float(sys.argv[2])
    for run_id in tick().run_ids:
        while not instance.get_run_by_id(run_id).is_finished and time.monotonic() < deadline:
            time.sleep(1)
    tick()
    instance.stop_schedule(origin, selector, schedule)
    print("TICKS", json.dumps([{"status": t.status.value, "runs": list(t.run_ids),
                       "skip": t.skip_reason, "error": t.error and t.error.to_string(),
                       "location": entry.origin.location_name}
                      for t in instance.get_ticks(origin, selector)]))
"""


def _two_ticks(env: dict, schedule: str, runs_within_s: float = 400) -> list[dict]:
    """The ticks of `schedule`, newest first, after two more through the daemon's scheduler,
    the second once the first one's runs have finished (or `runs_within_s` has passed)."""
    out = subprocess.run([sys.executable, "-c", TICKS, schedule, str(runs_within_s)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("TICKS ")]
    ticks = json.loads(line.removeprefix("TICKS "))
    print(f"{schedule} ticks, newest first: {ticks}")
    return ticks


def test_a_schedule_tick_runs_under_the_project_preset_and_the_cli_reuses_it(beside):
    """The nightly re-evaluation of a backbone whose sweep the driver made: a tick (the
    daemon's scheduler, the run launched by `dg dev`'s daemon) finds bridgeability stale and
    makes it under the project's preset, and the next tick finds it up to date; `dagster asset
    materialize` then reuses it (one fingerprint)."""
    tmp, env, dev = beside
    # the sweep in one run (one process loading the model, not three: the tick is the story)
    driver(env, "tinytick", "--layers", "1,2,3", "--stop-after", "sweep",
           "--skip-bridgeability", "--workers", "1")
    again, tick = _two_ticks(env, "reevaluate_tinytick_nightly")
    assert (tick["status"], tick["location"]) == ("SUCCESS", "dihal"), tick
    (run_id,) = tick["runs"]
    run = finished_run(env, run_ids=[run_id], deadline_s=5)  # the ticks waited for it
    assert run.status.value == "SUCCESS", (run.status, dev.log_tail())
    assert run.tags["dagster/schedule_name"] == "reevaluate_tinytick_nightly"
    assert run.remote_job_origin.location_name == "dihal"
    assert run.tags["reason"] == "stale: bridgeability_tinytick"
    assert (again["status"], again["runs"]) == ("SKIPPED", []), again
    assert "bridgeability_tinytick and eval_tinytick are up to date" in again["skip"]
    manifest = tmp / "artifacts" / "tinytick" / "bridgeability" / "manifest.json"
    made = json.loads(manifest.read_text())
    assert made["info"]["preset"] == preset_label(tmp / "tiny.json")
    doors = cli_reuses(env, "bridgeability_tinytick", manifest, made)
    print("bridgeability_tinytick by door (schedule, CLI):",
          [(m["fingerprint"], m["cached"], m["preset"]) for m in doors])
    assert doors[0]["run_id"] == run_id
    label = preset_label(tmp / "tiny.json")
    assert [(m["cached"], m["preset"]) for m in doors] == [(False, label), (True, label)]
    assert {m["fingerprint"] for m in doors} == {made["fingerprint"][:16]}
