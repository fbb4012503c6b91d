"""The HTML report opened in a real headless Chromium (Debian's; `make test` installs it)."""

import shutil
from pathlib import Path

import pytest

from dlscale.metrics.scaling import add_scaling
from dlscale.store.results import RunStore
from tests.unit.test_report_hostile import HOSTILE

pytestmark = pytest.mark.e2e
DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "chromium/chromedriver missing: run scripts/install-browser.sh"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,2000",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    session = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    yield session
    session.quit()


def test_report_draws_every_plot_without_errors(tmp_path: Path, cli, browser):
    out = tmp_path / "report.html"
    result = cli("report", "--results", str(DATA / "results"), "--out", str(out))
    assert result.returncode == 0, result.stderr
    runs = len(RunStore(DATA / "results").results())
    points = len(add_scaling(RunStore(DATA / "results").results()))
    assert f"({points} points of {runs} runs, 13 plots," in result.stdout, result.stdout
    browser.get(out.as_uri())
    from selenium.webdriver.support.ui import WebDriverWait

    expected = int(browser.find_element("tag name", "body").get_attribute("data-plots"))
    assert expected == 13
    WebDriverWait(browser, 30).until(
        lambda d: len(d.find_elements("css selector", ".js-plotly-plot .main-svg")) >= expected
    )
    plots = browser.find_elements("css selector", ".js-plotly-plot")
    assert len(plots) == expected
    # every plot has drawn data: a trace group in its SVG
    drawn = browser.execute_script(
        "return [...document.querySelectorAll('.js-plotly-plot')]"
        ".filter(p => p.querySelector('.scatterlayer .trace, .barlayer .trace')).length"
    )
    assert drawn == expected
    severe = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert severe == []
    # the runs tables fit a 1200 px window: their text cells wrap, no column behind a scrollbar
    browser.set_window_size(1200, 2000)
    hidden = browser.execute_script(
        "return [...document.querySelectorAll('table.runs')]"
        ".filter(t => t.scrollWidth > t.clientWidth + 1).length"
    )
    assert hidden == 0
    browser.set_window_size(1280, 2000)
    png = tmp_path / "shot.png"
    assert browser.save_screenshot(str(png))
    from PIL import Image

    with Image.open(png) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1_000_000)
    assert colours is not None and len(colours) > 50  # a drawn page, not a blank one


DIALOG_HOOK = """
window.__dialogs = [];
for (const name of ["alert", "confirm", "prompt", "print"]) {
  window[name] = (...args) => { window.__dialogs.push(name + ":" + args.join(",")); };
}
"""


def _hostile_results(root: Path) -> Path:
    """tests/data/results once per hostile study name; the failure message, the command and
    the run ids hostile too."""
    from dlscale.store import read_json, write_json_atomic

    for i, name in enumerate(HOSTILE):
        for run in sorted((DATA / "results").iterdir()):
            target = root / f"{run.name}-{i}<img src=x onerror=alert(2)>"  # its folder's name
            shutil.copytree(run, target)
            document = read_json(target / "result.json", "result")
            document["study"] = name
            document["run_id"] = target.name
            document["command"] = ["dlscale", "run", "</script><script>alert(3)</script>"]
            if document["status"] != "completed":
                document["error"] = "<svg onload=alert(4)>"
            write_json_atomic(target / "result.json", "result", document)
    return root


def test_hostile_study_names_run_nothing_and_every_plot_draws(tmp_path: Path, cli, browser):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.support.ui import WebDriverWait

    results = _hostile_results(tmp_path / "results")
    out = tmp_path / "report.html"
    result = cli("report", "--results", str(results), "--out", str(out), "--title", HOSTILE[1])
    assert result.returncode == 0, result.stderr
    browser.get_log("browser")  # drop what earlier tests logged
    # dialogs are recorded, not shown, from before any script of the page runs
    browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": DIALOG_HOOK})
    browser.get(out.as_uri())

    expected = int(browser.find_element("tag name", "body").get_attribute("data-plots"))
    assert expected == 13 * len(HOSTILE)
    WebDriverWait(browser, 60).until(
        lambda d: len(d.find_elements("css selector", ".js-plotly-plot .main-svg")) >= expected
    )
    drawn = browser.execute_script(
        "return [...document.querySelectorAll('.js-plotly-plot')]"
        ".filter(p => p.querySelector('.scatterlayer .trace, .barlayer .trace')).length"
    )
    assert drawn == expected  # a double quote in a name no longer stops its plots
    assert browser.execute_script("return window.__dialogs") == []
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert  # noqa: B018 (the property raises when no dialog is open)
    injected = browser.execute_script(
        "return document.querySelectorAll('img, svg[onload], [onerror], [onload]').length"
    )
    assert injected == 0
    scripts = browser.execute_script("return document.scripts.length")
    assert scripts == 1 + expected  # plotly.js and one per plot, nothing injected
    studies = browser.execute_script(
        "return [...document.querySelectorAll('section.study > h2')].map(h => h.textContent)"
    )
    assert sorted(studies) == sorted(f"Study {name}" for name in HOSTILE)
    assert browser.title == HOSTILE[1]
    severe = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert severe == []


def test_the_models_and_the_microbenchs_plots_draw_too(tmp_path: Path, cli, browser):
    """A microbench run (log axes) and the model's errors beside the points it predicts."""
    import json

    from dlscale.store import write_json_atomic

    results = tmp_path / "results"
    shutil.copytree(DATA / "results", results)
    for path in results.glob("*-w2-*/result.json"):  # give the DDP points what the model needs
        stored = json.loads(path.read_text())
        stored["metrics"].update(
            step_time_nosync_p50_ms=9.0, gradient_bytes=15848, sync_pattern="ring"
        )
        write_json_atomic(path, "result", stored)
    rows = [
        {"collective": name, "bytes": size, "time_s": 1e-4 + size * 1e-9,
         "busbw_bytes_s": size / (1e-4 + size * 1e-9), "correct": True}
        for name in ("all_reduce", "broadcast") for size in (4, 1024, 1 << 20)
    ]  # fmt: skip
    (results / "microbench-torch-ddp-w2-local-1").mkdir()
    write_json_atomic(
        results / "microbench-torch-ddp-w2-local-1" / "microbench.json", "microbench",
        {"started_at": 1.0, "processes": 2, "rows": rows, "error": None,
         "config": {"backend": "torch-ddp", "launcher": "local", "options": {}},
         "fit": {"alpha_s": 5e-5, "beta_s_per_byte": 5e-10, "median_error": 0.05}},
    )  # fmt: skip
    out = tmp_path / "report.html"
    result = cli("report", "--results", str(results), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "1 microbench runs, 17 plots," in result.stdout, result.stdout
    browser.get(out.as_uri())
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 30).until(
        lambda d: len(d.find_elements("css selector", ".js-plotly-plot .main-svg")) >= 17
    )
    for key in ("predicted", "forecast", "busbw", "allreduce_time"):
        drawn = browser.execute_script(
            f"return [...document.querySelectorAll('[data-figure={key}] .js-plotly-plot')]"
            ".filter(p => p.querySelector('.scatterlayer .trace, .barlayer .trace')).length"
        )
        assert drawn >= 1, key
    severe = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert severe == []
