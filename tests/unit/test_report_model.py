"""The performance model in the report: the predicted-against-measured figure recomputed by
hand, the hint when no network was measured, and stored microbench runs drawn safely (hostile
names, damaged rows and fits)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dlscale.contract.result import Result
from dlscale.perfmodel.costs import Network
from dlscale.perfmodel.networks import fitted_networks, link_lookup, microbench_runs
from dlscale.perfmodel.validate import Link, compare
from dlscale.report.html import build_html
from dlscale.report.model import collectives, prediction
from dlscale.report.static import save_static
from dlscale.store import write_json_atomic

SAFE_ID = re.compile(r'id="([^"]*)"')


def point(run_id: str, model: str, throughput: float, *, workers: int = 2) -> dict:
    return Result(
        run_id=run_id,
        status="completed",
        study="s",
        batch_size_per_worker=32,
        config={
            "backend": "torch-ddp",
            "model": model,
            "workers": workers,
            "launcher": "local",
            "scaling": "weak",
        },
        metrics={
            "throughput_samples_s": throughput,
            "step_time_nosync_p50_ms": 100.0,
            "gradient_bytes": 1e6,
            "step_time_p50_ms": 110.0,
            "sync_pattern": "ring",
        },
    ).row()


def test_each_points_error_is_what_the_ring_gives_by_hand():
    # 1 Gbit/s, no latency: a 2-worker ring moves 2 x 1/2 x 1e6 B = 8 ms; step 108 ms
    net = Network.from_link(1e9, 0.0)
    rows = [point("a", "m1", 500.0), point("b", "m2", 640.0), point("c", "m3", 1.0, workers=1)]
    figure = prediction(rows, compare(rows, lambda row: Link(net)), {"local": "given"})
    assert figure is not None and figure.key == "predicted" and figure.y_percent
    ring = 64 / 0.108
    overlap = 64 / (0.100 / 3 + max(0.200 / 3, 0.008))
    bars = {s.name: dict(zip(s.x, s.y, strict=True)) for s in figure.series}
    plain, ideal = "its own algorithm, no overlap", "overlap bound (ideal, or the cycle replayed)"
    assert len(bars[plain]) == 2  # the 1-worker point is not predicted
    (label_a,) = [x for x in bars[plain] if "m1" in x]
    assert bars[plain][label_a] == pytest.approx(ring / 500 - 1)
    assert bars[ideal][label_a] == pytest.approx(overlap / 500 - 1)
    errors = sorted([abs(ring / 500 - 1), abs(ring / 640 - 1)])
    overlaps = sorted([abs(overlap / 500 - 1), abs(overlap / 640 - 1)])
    median = f"{sum(errors) / 2:.1%} (overlap bound {sum(overlaps) / 2:.1%}) over 2 points"
    assert figure.flags[-2] == f"torch-ddp: median absolute error {median}"
    assert figure.flags[-1] == f"every engine: median absolute error {median}"
    assert f"ring predicts {ring:,.1f} ({ring / 500 - 1:+.1%})" in figure.flags[0]
    assert "compute from its no-sync probe, synchronization ring fit" in figure.flags[0]
    no_network = compare(rows, lambda row: None)  # nothing to predict
    assert prediction(rows, no_network, {}) is None
    rows[1]["metrics"]["noisy"] = True  # the noise guard flagged it: left out of the median
    figure = prediction(rows, compare(rows, lambda row: Link(net)), {"local": "given"})
    assert figure.flags[-1].startswith(
        f"every engine: median absolute error {abs(ring / 500 - 1):.1%} (overlap bound "
        f"{abs(overlap / 500 - 1):.1%}) over 1 quiet point (1 flagged noisy left out)"
    )
    assert any(x.endswith("x2 (noisy)") for x in figure.series[0].x)


def test_a_study_without_a_measured_network_says_how_to_get_predictions():
    page, _ = build_html([point("a", "m1", 500.0)], title="t", source="r", fitted={})
    assert "dlscale microbench --workers 2 --launcher local" in page
    assert 'data-figure="predicted"' not in page


def store(root: Path, name: str, **fields: object) -> None:
    (root / name).mkdir()
    stored = {"started_at": 1.0, "processes": 2, "error": None,
              "config": {"backend": "torch-ddp", "launcher": "local", "options": {}},
              "rows": [], "fit": None, **fields}  # fmt: skip
    write_json_atomic(root / name / "microbench.json", "microbench", stored)


def test_stored_microbench_runs_are_drawn_and_hostile_or_damaged_ones_are_harmless(tmp_path):
    row = {"collective": "all_reduce", "bytes": 1024, "time_s": 1e-3, "busbw_bytes_s": 1.0e6}
    fit = {"alpha_s": 1e-4, "beta_s_per_byte": 8e-10, "median_error": 0.1}
    hostile = "microbench-<img src=x onerror=alert(1)>"
    store(tmp_path, hostile, rows=[row, {**row, "bytes": 4096, "time_s": 2e-3}], fit=fit,
          error="<b>wrong</b> results")  # fmt: skip
    damaged_rows = [row, {"collective": "all_reduce", "bytes": "NaN"}, {**row, "time_s": None}]
    store(tmp_path, "microbench-b", started_at=2.0, fit={**fit, "alpha_s": "x"}, rows=damaged_rows)
    (tmp_path / "microbench-c").mkdir()
    (tmp_path / "microbench-c" / "microbench.json").write_text("{damaged")
    (tmp_path / "microbench-h").mkdir()  # hand-edited: wrong types everywhere, NaN
    (tmp_path / "microbench-h" / "microbench.json").write_text(
        '{"schema": "dlscale.microbench/1", "started_at": 3, "processes": "x", "error": null,'
        ' "rows": [{"collective": "all_reduce", "bytes": 4, "time_s": NaN, "busbw_bytes_s": 1},'
        ' "junk"], "fit": {"alpha_s": 1e-4, "beta_s_per_byte": 1e-9, "median_error": "x"},'
        ' "fits": {"tree": {"alpha_s": -1}, "p2p": [1]}, "config": {"backend": ["x"],'
        ' "launcher": "local", "options": {"launcher": "bad"}}}'
    )
    problems: list[str] = []
    runs = microbench_runs(tmp_path, on_problem=problems.append)
    assert [r["run_id"] for r in runs] == [hostile, "microbench-b", "microbench-h"]
    (odd,) = fitted_networks(tmp_path).values()  # its ring fit is usable; nothing else is
    assert odd.run_id == "microbench-h" and set(odd.link.fits) == {"ring"}
    assert "median error unknown" in odd.said and collectives(runs[2]) == []
    runs = runs[:2]
    assert len(problems) == 1 and "microbench-c" in problems[0]
    fitted = fitted_networks(tmp_path, on_problem=problems.append)
    # the hostile one failed, b's fit is no number: only the hand-edited one's ring is usable
    assert [found.run_id for found in fitted.values()] == ["microbench-h"]
    assert "microbench-b/microbench.json: its fit (alpha x" in problems[-1]
    figures = collectives(runs[1])
    assert [f.key for f in figures] == ["busbw", "allreduce_time"]
    assert [len(s.x) for s in figures[1].series] == [1]  # one usable row, no fit line
    page, plots = build_html([], title="t", source="r", microbench=runs, fitted=fitted)
    assert plots == 4
    assert "<img src=x" not in page and "<b>wrong" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", i) for i in SAFE_ID.findall(page))
    written = save_static(collectives(runs[0])[1], tmp_path / "time")
    assert all(path.stat().st_size > 0 for path in written)
    ring = type("L", (), {"fit": "ring"})()
    fake = type("F", (), {"said": "s", "link": ring, "started_at": 1.0})()
    link_of, used = link_lookup({("torch-ddp", "local", "", 1): fake})
    point = {"config": {"backend": "horovod-torch", "launcher": "local", "options": {}}}
    assert link_of(point) is ring and used == {"horovod-torch on local": "s"}
    assert json.dumps(used)
