"""The pages in a real headless browser (Debian's chromium + chromedriver, driven by selenium).

Checked opened from disk (file://) and served over HTTP: no console errors, a table sorts on click,
a filter hides rows, links lead to pages that load, and a phone-sized window does not scroll
sideways. Screenshots are kept in ``$KBENCH_ARTIFACTS`` (default: the test's tmp folder) and their
paths printed. Skipped when selenium, chromium or chromedriver is missing.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.webdriver.common.by import By

_CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
_DRIVER = shutil.which("chromedriver") or (
    "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None
)
if not (_CHROMIUM and _DRIVER):
    pytest.skip(
        "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = _CHROMIUM  # type: ignore[assignment]
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        "--allow-file-access-from-files",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(executable_path=_DRIVER), options=opts)
    drv.set_page_load_timeout(30)
    yield drv
    drv.quit()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = Path(os.environ.get("KBENCH_ARTIFACTS") or tmp_path_factory.mktemp("screenshots"))
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def _errors(drv) -> list[dict]:  # type: ignore[no-untyped-def]
    return [e for e in drv.get_log("browser") if e.get("level") in ("SEVERE", "ERROR")]


def _load(drv, url: str) -> None:  # type: ignore[no-untyped-def]
    drv.get_log("browser")  # drain
    drv.get(url)
    assert drv.execute_script("return document.readyState") == "complete"
    assert _errors(drv) == [], f"console errors on {url}"


def _column(drv, table_id: str, col: int) -> list[str]:  # type: ignore[no-untyped-def]
    return drv.execute_script(
        "return Array.from(document.getElementById(arguments[0]).tBodies[0].rows)"
        ".filter(r => !r.classList.contains('hidden'))"
        ".map(r => r.cells[arguments[1]].getAttribute('data-v') ?? r.cells[arguments[1]].textContent.trim());",
        table_id,
        col,
    )


def _nums(values: list[str]) -> list[float]:
    return [float(v) for v in values if v not in ("", "\u2014")]


@pytest.mark.parametrize("mode", ["file", "http"])
def test_leaderboard_in_browser(browser, site: Path, served: str, artifacts: Path, mode: str) -> None:  # type: ignore[no-untyped-def]
    drv = browser
    base = site.resolve().as_uri() if mode == "file" else served
    _load(drv, f"{base}/index.html")
    assert "leaderboard" in drv.title
    # on load only the first comparison group is shown: rows of different protocols, precisions,
    # hardware or problem sets are never side by side unless the reader asks for all
    groups = drv.execute_script(
        "return Array.from(document.getElementById('board').tBodies[0].rows)"
        ".filter(r => !r.classList.contains('hidden')).map(r => r.getAttribute('data-cgroup'));")
    assert groups and len(set(groups)) == 1
    drv.execute_script(
        "const s = document.querySelector('select[data-filter=cgroup]');"
        "s.value = ''; s.dispatchEvent(new Event('change', {bubbles: true}));"
    )
    # sort by "correct" (7th column): first click descending, second ascending
    header = drv.find_elements(By.CSS_SELECTOR, "#board thead th")[6]
    assert header.text.startswith("correct")
    header.click()
    desc = _nums(_column(drv, "board", 6))
    assert (
        len(desc) >= 5
        and desc == sorted(desc, reverse=True)
        and header.get_attribute("aria-sort") == "descending"
    )
    header.click()
    asc = _nums(_column(drv, "board", 6))
    assert asc == sorted(asc) and header.get_attribute("aria-sort") == "ascending"
    # text sort on the model column
    drv.find_elements(By.CSS_SELECTOR, "#board thead th")[0].click()
    models = _column(drv, "board", 0)
    assert models == sorted(models, key=str.lower)
    # filter by hardware: only H100 rows stay, the count follows
    total = len(_column(drv, "board", 0))
    drv.execute_script(
        "const s = document.querySelector('select[data-filter=hardware]');"
        "s.value = 'NVIDIA H100 80GB HBM3'; s.dispatchEvent(new Event('change', {bubbles: true}));"
    )
    shown = _column(drv, "board", 2)
    assert 0 < len(shown) < total and set(shown) == {"NVIDIA H100 80GB HBM3"}
    assert drv.find_element(By.CSS_SELECTOR, "[data-count-for=board]").text == str(len(shown))
    assert len(_column(drv, "reported-1", 0)) == 0  # the paper rows are on H20
    drv.execute_script(
        "const s = document.querySelector('select[data-filter=hardware]');"
        "s.value = ''; s.dispatchEvent(new Event('change', {bubbles: true}));"
    )
    assert len(_column(drv, "reported-1", 0)) == 18
    shot = artifacts / f"leaderboard-{mode}.png"
    drv.save_screenshot(str(shot))
    print(f"screenshot: {shot}")
    assert _errors(drv) == []
    # follow the run link, then a problem link, then back
    drv.find_element(By.LINK_TEXT, "synth-a").click()
    assert "synth-a" in drv.title and _errors(drv) == []
    drv.find_element(By.PARTIAL_LINK_TEXT, "L1/2 Matmul").click()
    assert "L1/2" in drv.title and _errors(drv) == []
    assert drv.execute_script("return location.hash").startswith("#s-")
    drv.find_element(By.PARTIAL_LINK_TEXT, "run synth-a").click()
    assert "synth-a" in drv.title and _errors(drv) == []
    drv.find_element(By.PARTIAL_LINK_TEXT, "leaderboard").click()
    assert "leaderboard" in drv.title


def test_run_report_in_browser(browser, run_report: Path, artifacts: Path) -> None:  # type: ignore[no-untyped-def]
    drv = browser
    _load(drv, run_report.resolve().as_uri())
    # the problem table sorts by speedup vs eager (10th column), empty cells last
    th = drv.find_elements(By.CSS_SELECTOR, "#problem-table thead th")[9]
    th.click()
    vals = _column(drv, "problem-table", 9)
    nums = _nums(vals)
    assert nums == sorted(nums, reverse=True) and nums[0] == pytest.approx(12.0)
    assert all(v == "" for v in vals[len(nums) :])
    # every problem page loads without console errors
    links = drv.execute_script(
        "return Array.from(document.querySelectorAll('#problem-table a')).map(a => a.href)"
    )
    assert len(set(u.split("#")[0] for u in links)) == 7
    for url in sorted(set(u.split("#")[0] for u in links)):
        _load(drv, url)
    # a phone: nothing scrolls sideways but the tables' own containers
    drv.set_window_size(390, 844)
    for url in (run_report.resolve().as_uri(), sorted(links)[0]):
        _load(drv, url)
        assert drv.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1"), url
    shot = artifacts / "run-report-phone.png"
    drv.save_screenshot(str(shot))
    print(f"screenshot: {shot}")
    drv.set_window_size(1280, 1000)
