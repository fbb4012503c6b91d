"""The model's forecast in the report: each line carried from its point of the most workers to
256 workers on its own pattern and network, recomputed by hand, with the span its pattern's
points measured as a band; drawn safely from hostile names."""

from __future__ import annotations

import pytest

from dlscale.perfmodel.costs import Network
from dlscale.perfmodel.links import Link
from dlscale.perfmodel.networks import Fitted
from dlscale.perfmodel.validate import compare
from dlscale.report.forecast import FORECAST_TO, forecast
from dlscale.report.html import build_html
from dlscale.report.series import Figure
from dlscale.report.static import save_static
from tests.unit.test_report_model import point

NET = Network.from_link(1e9, 0.0)  # 1 Gbit/s, no latency


def forecast_on(rows: list[dict], link: Link | None) -> Figure | None:
    """:func:`forecast` of ``rows`` with every point on ``link`` (``None``: none measured)."""
    return forecast(rows, compare(rows, lambda row: link), lambda row: link)


def ring(p: int) -> float:
    """By hand: 32 images a worker, 100 ms of compute, a 1 MB gradient's ring all-reduce on 1
    Gbit/s, 2(p-1)/p x 1e6 B x 8 ns."""
    return p * 32 / (0.100 + 2 * (p - 1) / p * 1e6 * 8e-9)


def test_each_line_is_carried_to_256_workers_with_the_span_its_pattern_measured():
    rows = [point("a", "m1", 500.0), point("b", "m2", 640.0), point("c", "m1", 300.0, workers=1)]
    figure = forecast_on(rows, Link(NET))
    assert figure is not None and figure.key == "forecast" and figure.x_log and figure.y_log
    lines = {s.name: s for s in figure.series}
    measured = lines["torch-ddp (model=m1): measured"]
    assert measured.x == [1, 2] and measured.y == [300.0, 500.0] and not measured.dashed
    ahead = lines["torch-ddp (model=m1): predicted (ring)"]
    counts = [2, 4, 8, 16, 32, 64, 128, 256]
    assert ahead.x == counts and FORECAST_TO == 256 and ahead.dashed
    assert ahead.y == pytest.approx([ring(p) for p in counts])
    # the span: the two ring points' errors, +18.5% and -7.4% (predicted / measured - 1)
    errors = (ring(2) / 500 - 1, ring(2) / 640 - 1)
    low, high = 1 / (1 + max(errors)), 1 / (1 + min(errors))
    assert ahead.low == pytest.approx([ring(p) * low for p in counts])
    assert ahead.high == pytest.approx([ring(p) * high for p in counts])
    efficiency = ring(256) / (256 * 320)  # against its compute alone: 320 img/s
    assert figure.flags[0] == (
        "torch-ddp (model=m1): ring from its 2-worker point on the local launcher's network: "
        f"256 workers {ring(256):,.1f} img/s, {efficiency:.0%} of its compute alone; measured "
        f"within {low - 1:+.0%}..{high - 1:+.0%} (2 points) on this network"
    )
    assert len(figure.flags) == 2 and figure.flags[1].startswith("torch-ddp (model=m2)")


def test_no_network_or_nothing_predictable_draws_no_forecast():
    rows = [point("a", "m1", 500.0)]
    assert forecast_on(rows, None) is None
    assert forecast_on([point("c", "m1", 300.0, workers=1)], Link(NET)) is None
    huge = point("a", "m1", 500.0)
    huge["metrics"]["step_time_nosync_p50_ms"] = 1e-300  # no machine's: not predicted
    assert forecast_on([huge], Link(NET)) is None


def test_a_hostile_name_is_text_in_the_page_and_the_figure_files(tmp_path):
    hostile = "<img src=x onerror=alert(1)>"
    rows = [point("a", hostile, 500.0), point("b", "m2", 640.0)]
    figure = forecast_on(rows, Link(NET))
    assert figure is not None and any(hostile in s.name for s in figure.series)
    fitted = {("torch-ddp", "local", "", 1): Fitted("given", 1.0, "mb", Link(NET, fit="ring"))}
    page, plots = build_html(rows, title="t", source="r", fitted=fitted)
    _, unmodelled = build_html(rows, title="t", source="r", fitted={})
    assert plots == unmodelled + 2  # the error on each point and the forecast
    assert 'data-figure="forecast"' in page and hostile not in page
    written = save_static(figure, tmp_path / "forecast")
    assert [p.suffix for p in written] == [".png", ".pdf"]
