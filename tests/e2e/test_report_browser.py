"""The HTML report opened in a real headless Chromium (Debian's; `make test` installs it)."""

import shutil
from pathlib import Path

import pytest

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
    png = tmp_path / "shot.png"
    assert browser.save_screenshot(str(png))
    from PIL import Image

    with Image.open(png) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1_000_000)
    assert colours is not None and len(colours) > 50  # a drawn page, not a blank one
