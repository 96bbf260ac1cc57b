"""The web UI path, in a real browser: the Dagster webserver serves a tiny world, headless Chromium opens
the asset graph, clicks Materialize on layer_score_llama, the run succeeds, and the asset page
shows l* and the plot image (loaded: natural width > 0). Screenshots are kept under
.dihal/test-artifacts/ui/. Needs Debian's chromium and chromium-driver (.ci/run installs them);
in CI a missing browser fails the test, elsewhere it is skipped with the reason."""

import os
import sys
import time

import dagster as dg
import pytest

from tests.tiny import LOCATE, SHOTS, SWEEP_RUN, make_world, open_browser, serving


@pytest.fixture()
def served(tmp_path, tiny_llama_dir, monkeypatch):
    """A DAGSTER_HOME whose instance has the Locate chain materialised, and the Dagster webserver
    on a free local port serving tests.tiny_location over it (tests.tiny.serving)."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    # runs launched from the UI start at once (no daemon needed to dequeue them)
    (home / "dagster.yaml").write_text(
        "telemetry:\n  enabled: false\nnux:\n  enabled: false\nrun_coordinator:\n"
        "  module: dagster._core.run_coordinator.default_run_coordinator\n"
        "  class: DefaultRunCoordinator\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    world = make_world(tmp_path, tiny_llama_dir)
    run = {**SWEEP_RUN, "corpus": {"config": {"paths": [str(world.shard)]}}}
    res = dg.materialize(list(world.defs.assets) + list(world.defs.asset_checks), selection=LOCATE,
                         instance=dg.DagsterInstance.get(), resources=world.defs.resources,
                         run_config={"ops": {k: v for k, v in run.items() if k in LOCATE}})
    assert res.success
    env = {**os.environ, "DIHAL_TINY_MODEL": str(tiny_llama_dir), "DIHAL_ARTIFACTS": str(world.root)}
    with serving([sys.executable, "-m", "dagster_webserver", "-m", "tests.tiny_location"],
                 tmp_path / "webserver.log", env=env, deadline_s=300, grace_s=30) as web:
        yield web.url, res.run_id


def test_materialize_from_the_ui_and_read_the_result(served):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    url, first_run = served
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser = open_browser()
    wait = WebDriverWait(browser, 60)
    try:
        browser.get(f"{url}/asset-groups")  # the global asset lineage graph: corpus -> llama
        for group in ("corpus", "llama"):
            wait.until(ec.presence_of_element_located((By.XPATH, f"//*[normalize-space(text())='{group}']")))
        time.sleep(2)
        browser.save_screenshot(SHOTS / "1-asset-graph.png")

        browser.get(f"{url}/assets/layer_score_llama")
        for _ in range(5):  # the page re-renders while it loads
            try:
                wait.until(ec.element_to_be_clickable(
                    (By.XPATH, "//button[normalize-space()='Materialize']"))).click()
                break
            except StaleElementReferenceException:
                time.sleep(1)
        instance = dg.DagsterInstance.get()
        deadline, run = time.monotonic() + 180, None
        while time.monotonic() < deadline:
            runs = [r for r in instance.get_runs(limit=5) if r.run_id != first_run]
            if runs and runs[0].status in (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE):
                run = runs[0]
                break
            time.sleep(1)
        browser.save_screenshot(SHOTS / "2-after-click.png")
        assert run is not None, ("the run launched from the UI did not finish in 180 s: "
                                 f"{[(r.run_id[:8], r.status) for r in instance.get_runs(limit=5)]}")
        assert run.status == dg.DagsterRunStatus.SUCCESS, run.status
        browser.get(f"{url}/runs/{run.run_id}")
        wait.until(ec.presence_of_element_located((By.XPATH, "//*[contains(., 'Success')]")))
        browser.save_screenshot(SHOTS / "3-run.png")

        browser.get(f"{url}/assets/layer_score_llama")
        row = wait.until(ec.presence_of_element_located((By.XPATH, "//tr[td[normalize-space()='l_star']]")))
        assert row.find_elements(By.XPATH, "./td")[-1].text.strip() in {"1", "2", "3"}
        browser.save_screenshot(SHOTS / "4-asset-metadata.png")
        show = browser.find_element(
            By.XPATH, "//tr[td[normalize-space()='plot']]//*[contains(text(), 'Show Markdown')]")
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", show)
        show.click()
        img = wait.until(ec.presence_of_element_located((By.XPATH, "//img[@alt='S_l']")))
        wait.until(lambda b: b.execute_script("return arguments[0].complete", img))
        width = browser.execute_script("return arguments[0].naturalWidth", img)
        browser.save_screenshot(SHOTS / "5-plot.png")
        assert width > 0, "the plot image did not load"
    finally:
        browser.quit()
