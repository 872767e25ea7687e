"""The web console in a real browser (headless Chromium from Debian's packages, driven by Selenium) against
a real control plane and agentd: sign in, see the Task graph of a Change of three Tasks, watch a run's
transcript grow live, cancel the run. A screenshot of each page is kept in test-artifacts/console/
(DROVER_DOCS_SCREENSHOTS=1 also writes the pictures of README.md and docs/operations.md into docs/)."""

from __future__ import annotations

import itertools
import os
import pathlib
import shutil
from collections.abc import Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, Fleet, make_repo, wait_for
from tests.fleet.test_console import console_url, printing, printing_run

ROOT = pathlib.Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "console"


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


def shot(browser: webdriver.Chrome, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    if os.environ.get("DROVER_DOCS_SCREENSHOTS") == "1" and name in ("fleet", "run-live"):
        shutil.copy(ARTIFACTS / f"{name}.png", ROOT / "docs" / f"console-{name}.png")


def test_sign_in_watch_a_run_live_cancel_it_and_see_the_task_graph(
    fleet: Fleet, browser: webdriver.Chrome, tmp_path: pathlib.Path
) -> None:
    fleet.start_plane("--http-listen", "127.0.0.1:0")
    fleet.plane.add_project("web", str(make_repo(tmp_path / "repo", {"README.md": "# web\n"})))
    fleet.agent("browser-agent", capacity=4, labels=("region=eu",))
    url = console_url(fleet)
    with fleet.plane.client() as client:
        graph = client.submit_change(
            "web",
            "build, then lint and unit tests",
            [
                {"key": "build", "kind": "test", "objective": "build", "command": printing(2)},
                {"key": "lint", "kind": "test", "objective": "lint", "command": printing(1), "depends_on": ["build"]},
                {"key": "unit", "kind": "test", "objective": "unit", "command": printing(1), "depends_on": ["build"]},
            ],
        )
        list(client.watch(graph.id))
    _, run_id = printing_run(fleet, "soak", 200, running=True)

    # Sign in: the console sends us to /login first, then back where we were going.
    browser.get(f"{url}/fleet")
    assert "/login" in browser.current_url
    browser.find_element(By.ID, "token").send_keys(fleet.plane.admin_token)
    browser.find_element(By.CSS_SELECTOR, "main.login button[type=submit]").click()
    wait_for(lambda: browser.current_url.endswith("/fleet"), 15, what="the fleet page")
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-agent="browser-agent"]')
    assert "connected" in row.text and "soak" in row.text  # its current run
    shot(browser, "fleet")

    # The Task graph of the Change of three Tasks: three nodes, two edges, each status written.
    browser.get(f"{url}/changes/{graph.id}")
    nodes = browser.find_elements(By.CSS_SELECTOR, "svg.task-graph g.node")
    assert sorted((n.get_attribute("data-key"), n.text.split("\n")[-1]) for n in nodes) == [
        ("build", "succeeded"),
        ("lint", "succeeded"),
        ("unit", "succeeded"),
    ]
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.task-graph line.edge")) == 2
    shot(browser, "change")

    # The run's transcript grows while we watch, without reloading the page.
    browser.get(f"{url}/runs/{run_id}")
    marker = browser.execute_script("window.__same_page = true; return true;")
    assert marker

    def lines() -> int:
        return len(browser.find_elements(By.CSS_SELECTOR, "#transcript li"))

    first = lines()
    wait_for(lambda: lines() >= first + 3, 30, what="the transcript to grow")
    assert browser.execute_script("return window.__same_page === true;")  # the same page, not a reload
    shot(browser, "run-live")

    # Cancel it from the page: the run ends cancelled and the page says so.
    browser.find_element(By.ID, "cancel-run").click()
    with fleet.plane.client() as client:
        wait_for(lambda: client.get_run(run_id).state == "cancelled", 30, what="the run to be cancelled")
    browser.get(f"{url}/runs/{run_id}")
    assert browser.find_element(By.ID, "run-state").text == "cancelled"
    assert "run.cancel_requested" in browser.find_element(By.TAG_NAME, "main").text
    shot(browser, "run-cancelled")

    browser.get(f"{url}/spend")
    assert "Meters" in browser.find_element(By.TAG_NAME, "h2").text
    shot(browser, "spend")

    # The fleet page refreshes itself (the run is gone from the agent's row without our asking).
    browser.get(f"{url}/fleet")
    browser.execute_script("window.__same_page = true;")
    wait_for(lambda: browser.execute_script("return window.__same_page === undefined;"), 20, what="a refresh")
    assert "soak" not in browser.find_element(By.CSS_SELECTOR, 'tr[data-agent="browser-agent"]').text


def test_a_patch_has_no_blank_lines_and_a_finished_run_says_so_without_a_reload(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, browser: webdriver.Chrome
) -> None:
    fix = {"path": "calc.py", "edits": [{"old_text": "return a - b", "new_text": "return a + b"}]}
    model.extend([fake.tool_use("edit_file", fix), fake.tool_use("complete_task", {"summary": "fixed"})])
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    fleet.start_plane("--http-listen", "127.0.0.1:0")
    fleet.plane.add_project("calc", str(calc_repo))
    fleet.agent("browser-agent", capacity=2)
    url = console_url(fleet)
    with fleet.plane.client() as client:
        task = {"key": "fix", "kind": "implement", "objective": "fix add", "complexity": "medium"}
        fixed = client.submit_change("calc", "fix add", [task])
        list(client.watch(fixed.id))
        counting = {"key": "count", "kind": "test", "objective": "count", "command": printing(25)}
        counted = client.submit_change("calc", "count", [counting])
        run_id = wait_for(lambda: client.get_change(counted.id).tasks[0].latest_run_id, 30, what="a run")
        wait_for(lambda: client.get_run(run_id).state == "running", 30, what="the run to start")
    browser.get(f"{url}/login")
    browser.find_element(By.ID, "token").send_keys(fleet.plane.admin_token)
    browser.find_element(By.CSS_SELECTOR, "main.login button[type=submit]").click()
    wait_for(lambda: "/login" not in browser.current_url, 15, what="signing in")

    # The run ends while we watch: its badge turns from running to succeeded on the same page.
    browser.get(f"{url}/runs/{run_id}")
    assert browser.find_element(By.ID, "run-state").text == "running"
    browser.execute_script("window.__same_page = true;")
    with fleet.plane.client() as client:
        wait_for(lambda: client.get_run(run_id).state == "succeeded", 60, what="the run to succeed")
    wait_for(lambda: browser.find_element(By.ID, "run-state").text == "succeeded", 15, what="the badge to change")
    assert browser.execute_script("return window.__same_page === true;")  # not reloaded
    assert "s-succeeded" in browser.find_element(By.ID, "run-state").get_attribute("class")
    assert "finished: succeeded" in browser.find_element(By.ID, "live-note").text
    assert browser.find_elements(By.ID, "cancel-run") == []  # a finished run offers no cancel
    shot(browser, "run-finished")

    # The patch: each line right under the one before, no blank line between them.
    browser.get(f"{url}/changes/{fixed.id}")
    rects = browser.execute_script(
        "return [...document.querySelectorAll('pre.diff > span')].map(s => s.getBoundingClientRect().toJSON());"
    )
    assert len(rects) >= 5  # diff, index, ---, +++, @@, -, +
    line = rects[0]["height"]
    assert 10 < line < 30
    gaps = [later["top"] - earlier["bottom"] for earlier, later in itertools.pairwise(rects)]
    assert all(abs(gap) < 1 for gap in gaps), gaps  # on main every line was followed by an empty one
    block = browser.execute_script("return document.querySelector('pre.diff').clientHeight;")
    assert block < (len(rects) + 1) * line + 20  # the lines and the padding, not twice the lines
    shot(browser, "change-patch")
