"""The console in a real browser (headless Chromium driven by Selenium): a live
tree of 20 runs stopped with the Stop button, an approval and a resume taken
from the page, and the run that hit its limit, with screenshots of each page at
1280×800 and at a phone's width (``$ORCHESTRA_ARTIFACTS/console/``, else
``.artifacts/console/``).

They need Debian's ``chromium`` and ``chromium-driver`` (``/usr/bin/chromium``,
``/usr/bin/chromedriver``); without Chromium they skip, and ``.ci/run``, which
installs both, fails if they did.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_processes import ENDLESS, reap
from console_support import Served, cli, wait_for
from selenium import webdriver
from selenium.common.exceptions import (
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By

from orchestra import SQLiteStore, Status
from orchestra.console._actions import STOP_REASON

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # without these it stalls on a closed network
    "--disable-component-update",
    "--disable-sync",
)
SIZES = {"desktop": (1280, 800, False), "phone": (390, 844, True)}
"""Screenshot sizes: a laptop, and a phone's width (CSS pixels, mobile viewport)."""
STOP_WITHIN_S = 1.0
STOPWATCH = """
window.stopwatch = {};
const interrupted = () => {
  const all = Array.from(document.querySelectorAll("#tree .node"), (n) => n.dataset.status);
  return all.length === 20 && all.every((s) => s === "interrupted");
};
document.addEventListener("click", (e) => {
  if (e.target.closest("#stop")) window.stopwatch.pressed = performance.now();
}, { capture: true });
new MutationObserver(() => {
  if (window.stopwatch.shown === undefined && interrupted()) {
    window.stopwatch.shown = performance.now();
  }
}).observe(document.getElementById("tree"), { childList: true, subtree: true });
"""
"""Times, by the page's clock, the press on Stop and the first moment all 20 runs
of the tree on the page show ``interrupted``."""

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="needs Chromium at /usr/bin/chromium: apt-get install -y chromium chromium-driver",
    ),
]


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """Headless Chromium with a fresh profile, driven through the system chromedriver."""
    if not CHROMEDRIVER.exists():
        pytest.fail("Chromium is installed but not its driver: apt-get install -y chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(chromium: WebDriver) -> WebDriver:
    """The browser at the laptop size."""
    resize(chromium, "desktop")
    return chromium


def resize(driver: WebDriver, size: str) -> None:
    width, height, mobile = SIZES[size]
    metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    settled = "return new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
    driver.execute_script(settled)


def shoot(driver: WebDriver, folder: Path, name: str) -> None:
    """``NAME-desktop.png`` and ``NAME-phone.png`` (the viewport), and ``NAME-*-full.png``
    (the whole page); the browser is back at the laptop size after."""
    for size in SIZES:
        resize(driver, size)
        driver.save_screenshot(str(folder / f"{name}-{size}.png"))
        layout = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": layout["width"], "height": layout["height"], "scale": 1}
        shot = driver.execute_cdp_cmd(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
        )
        (folder / f"{name}-{size}-full.png").write_bytes(base64.b64decode(shot["data"]))
    resize(driver, "desktop")


def in_page(driver: WebDriver, script: str) -> Any:
    """``script``'s value in the page, or None while the page is being replaced."""
    try:
        return driver.execute_script(script)
    except WebDriverException:
        return None


def statuses(driver: WebDriver) -> list[str] | None:
    """The status of every run of the tree on the page, root first."""
    found = in_page(
        driver, "return Array.from(document.querySelectorAll('#tree .node'), n => n.dataset.status)"
    )
    return list(found) if found is not None else None


def notes(driver: WebDriver) -> list[str]:
    script = "return Array.from(document.querySelectorAll('#tree .node .note'), n => n.textContent)"
    return list(in_page(driver, script) or [])


def click(driver: WebDriver, css: str) -> bool:
    """Click the element ``css`` selects; False if there is none yet, or a live update
    replaced it as it was found (the caller tries again)."""
    try:
        driver.find_element(By.CSS_SELECTOR, css).click()
    except (NoSuchElementException, StaleElementReferenceException):
        return False
    return True


def no_wider_than_the_screen(driver: WebDriver) -> bool:
    resize(driver, "phone")
    wide = driver.execute_script("return document.documentElement.scrollWidth")
    resize(driver, "desktop")
    return bool(wide <= SIZES["phone"][0])


def test_stop_interrupts_every_run_of_a_live_tree_of_20_within_a_second(
    console: Served, page: WebDriver, artifacts: Path, record_property: Any
) -> None:
    page.get(f"{console.url}/")
    page.execute_script("window.loadedOnce = true")
    command = [*ENDLESS, "demo", "slow_tree", "--children", "19", "--store", str(console.store)]
    demo = subprocess.Popen(
        [*command, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(
            lambda: page.find_elements(By.CSS_SELECTOR, 'tr[data-status="running"] a'),
            what="the new tree listed as running",
        )
        assert page.execute_script("return window.loadedOnce === true")  # shown live, no reload
        shoot(page, artifacts, "runs")
        wait_for(lambda: click(page, 'tr[data-status="running"] a'), what="a click on it")
        wait_for(
            lambda: (
                statuses(page) == ["running"] * 20
                and notes(page)[1:] == ["running scan_archive"] * 19
            ),
            timeout=60,
            what="20 runs running, each child in its scan",
        )
        root = page.find_element(By.CSS_SELECTOR, "#tree .node").get_attribute("data-run")
        shoot(page, artifacts, "slow_tree-running")
        page.execute_script(STOPWATCH)
        pressed = time.monotonic()
        assert click(page, "#stop")
        wait_for(
            lambda: statuses(page) == ["interrupted"] * 20,
            timeout=10,
            what="all interrupted",
            seen=lambda: (statuses(page), page.current_url, page.page_source[:3000]),
        )
        seen_after = time.monotonic() - pressed
        watch = page.execute_script("return window.stopwatch")
        shoot(page, artifacts, "slow_tree-stopped")
        out, _ = demo.communicate(timeout=30)
    finally:
        reap(demo)
    assert demo.returncode == 6 and json.loads(out)["reason"] == STOP_REASON
    with SQLiteStore(console.store) as store:
        tree = store.tree(str(root))
    assert len(tree) == 20
    assert all(s.status is Status.INTERRUPTED and s.reason == STOP_REASON for s in tree)
    in_page = round(watch["shown"] - watch["pressed"])  # the page's own clock, in ms
    seen = round(seen_after * 1000)  # the test's clock, WebDriver's round trips included
    record_property("stop_to_all_interrupted_in_page_ms", in_page)
    record_property("stop_to_all_interrupted_seen_by_webdriver_ms", seen)
    said = {"runs": 20, "in_page_ms": in_page, "seen_by_webdriver_ms": seen}
    (artifacts / "stop-latency.json").write_text(json.dumps(said) + "\n")
    assert in_page < STOP_WITHIN_S * 1000, f"{in_page} ms from Stop to 20 runs shown interrupted"
    assert seen_after < 2 * STOP_WITHIN_S, f"{seen} ms, as WebDriver saw it"


def open_run(driver: WebDriver, console: Served, run_id: str) -> None:
    """From the runs page, click the run."""
    driver.get(f"{console.url}/")
    wait_for(lambda: click(driver, f'tr[data-run="{run_id}"] a'), what="a click on the run")
    wait_for(lambda: statuses(driver), what="the run's tree")


def root_status(driver: WebDriver) -> str | None:
    found = statuses(driver)
    return found[0] if found else None


def test_approve_then_resume_from_the_page_deletes_the_file(
    console: Served, page: WebDriver, artifacts: Path, tmp_path: Path
) -> None:
    sandbox = tmp_path / "sandbox"
    store = ("--store", str(console.store))
    root = cli("demo", "destructive", *store, "--dir", str(sandbox), code=6)["run_id"]
    open_run(page, console, root)
    asked = page.find_element(By.CSS_SELECTOR, ".decide").text
    assert "Waiting for a human" in asked and 'delete_file {"path": "access.log"}' in asked
    shoot(page, artifacts, "destructive-waiting")
    assert click(page, "#approve")
    wait_for(lambda: page.find_elements(By.ID, "resume"), what="the Resume button")
    assert "Approved" in page.find_element(By.ID, "notice").text
    assert (sandbox / "access.log").exists()  # approved, not run yet
    wait_for(lambda: click(page, "#resume"), what="a click on Resume")
    wait_for(lambda: root_status(page) == "completed", timeout=60, what="the tree completed")
    shoot(page, artifacts, "destructive-completed")
    assert not (sandbox / "access.log").exists()
    transcript = page.find_element(By.ID, "transcript").text
    assert "approved by a human; it ran" in transcript
    assert "Deleted access.log to free space." in transcript
    with SQLiteStore(console.store) as saved:
        assert saved.load(root).status is Status.COMPLETED


def test_reject_with_a_reason_from_the_page_keeps_the_file(
    console: Served, page: WebDriver, tmp_path: Path
) -> None:
    sandbox = tmp_path / "sandbox"
    store = ("--store", str(console.store))
    root = cli("demo", "destructive", *store, "--dir", str(sandbox), code=6)["run_id"]
    open_run(page, console, root)
    page.find_element(By.CSS_SELECTOR, 'input[name="reason"]').send_keys("keep it for the audit")
    assert click(page, "#reject")
    wait_for(lambda: page.find_elements(By.ID, "resume"), what="the Resume button")
    wait_for(lambda: click(page, "#resume"), what="a click on Resume")
    wait_for(lambda: root_status(page) == "completed", timeout=60, what="the tree completed")
    assert (sandbox / "access.log").exists()
    transcript = page.find_element(By.ID, "transcript").text
    assert "rejected by a human; the model was told (reason: keep it for the audit)" in transcript
    assert "nothing was deleted" in transcript


def test_the_child_that_hit_its_budget_shows_without_opening_anything(
    console: Served, page: WebDriver, artifacts: Path
) -> None:
    store = ("--store", str(console.store))
    budget = ("--child-budget", "0.005", "--wind-down", "0")  # stopped, not wound down
    root = cli("demo", "research_runaway", *store, *budget)["run_id"]
    open_run(page, console, root)
    assert statuses(page) == ["completed", "budget_exceeded", "completed"]
    hit = page.find_element(By.CSS_SELECTOR, '#tree .node[data-status="budget_exceeded"]')
    assert "stopped-hard" in str(hit.get_attribute("class"))
    badge = hit.find_element(By.CSS_SELECTOR, ".badge")
    assert badge.is_displayed() and badge.text == "hit its budget"
    assert hit.find_element(By.CSS_SELECTOR, ".meter.m-usd.hit").is_displayed()
    shoot(page, artifacts, "research_runaway")
    resize(page, "phone")
    assert page.find_element(By.CSS_SELECTOR, ".node .badge").is_displayed()
    assert no_wider_than_the_screen(page)
