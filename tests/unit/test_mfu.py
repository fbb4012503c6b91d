"""MFU and peak memory (docs/metrics.md, "MFU" and "Peak memory"): the facts a run stores, the
figures derived from them by hand, the refusals, and the memory mark per window."""

import math

import numpy as np
import pytest

from dlscale.contract.models import MODELS
from dlscale.contract.records import Environment, Window
from dlscale.contract.run_config import RunConfig
from dlscale.metrics.figures import Figures, memory_words, mfu_percent
from dlscale.metrics.memory import memory_metrics
from dlscale.metrics.utilization import utilization_metrics
from dlscale.report import cells
from dlscale.report.columns import columns_for
from dlscale.report.finding import findings
from dlscale.report.tables import to_csv
from dlscale.runtime.load import load_fields, sample
from dlscale.runtime.procfs import HAS_PROC, rss_peak_bytes

BASIS = "of measured fp32 matmul peak, 1 thread"


def _row(workers=2, samples_s=400.0, flops=6e8, peak=2e11, **metrics):
    facts = {
        "throughput_samples_s": samples_s,
        "train_flops_per_sample": flops,
        "peak_flops_per_worker": peak,
        "peak_basis": BASIS,
        "peak_source": "measured",
        "mfu_missing": None,
        "rss_peak_bytes": 812 * 2**20,
        **metrics,
    }
    return {
        "run_id": f"resnet44-torch-ddp-synthetic-w{workers}-0123456789",
        "status": "completed",
        "study": "s",
        "config": {
            "backend": "torch-ddp",
            "model": "resnet44",
            "dataset": "synthetic",
            "workers": workers,
            "scaling": "weak",
            "device": "cpu",
        },
        "metrics": facts,
        "batch_size_per_worker": 64,
        "global_batch_size": 64 * workers,
        "environment": {},
    }


def test_mfu_is_the_training_flops_over_every_workers_peak_by_hand():
    # 400 images/s x 0.6 GFLOP = 240 GFLOP/s, over 2 workers x 200 GFLOP/s = 400 GFLOP/s: 60%
    figures = Figures.of(_row())
    assert figures.achieved_flops_s == pytest.approx(240e9)
    assert figures.peak_flops_s == pytest.approx(400e9)
    assert figures.mfu == pytest.approx(0.6)
    assert mfu_percent(figures.mfu) == "60.0%" and mfu_percent(0.00016) == "0.016%"
    assert figures.rss_peak_bytes == 812 * 2**20 and memory_words(812 * 2**20) == "812 MiB"
    assert memory_words(3.25 * 2**30) == "3.2 GiB"


def test_an_mfu_above_100_percent_is_never_stated_and_the_row_says_why():
    row = _row(peak=1e11)  # 240 GFLOP/s over 200: 120%
    figures = Figures.of(row)
    assert figures.mfu is None and figures.mfu_impossible
    assert figures.mfu_missing.startswith("no MFU: it came out above 100% of the peak")
    assert "120" not in figures.mfu_missing
    assert "peak_tflops" in figures.mfu_missing
    assert cells.doubt_mark(row) == "!"
    assert "MFU above 100%: not stated" in cells.notes(row)
    (mfu,) = [c for c in columns_for([row]) if c.name == "mfu"]
    assert mfu.text(row) == "-"
    assert not any("MFU 120" in line for line in findings([row]))
    assert any(line.startswith("no MFU: it came out above") for line in findings([row]))


def test_a_missing_fact_gives_no_mfu_and_its_reason_once():
    why = "no MFU: GPU 'Foo X1' is not in dlscale's datasheet table; set peak_tflops=..."
    rows = [_row(peak=None, mfu_missing=why), _row(workers=1, peak=None, mfu_missing=why)]
    assert [Figures.of(r).mfu for r in rows] == [None, None]
    assert findings(rows).count(why) == 1
    old = _row()  # a result stored before dlscale stored the facts says nothing at all
    for key in ("train_flops_per_sample", "peak_flops_per_worker", "peak_basis", "mfu_missing"):
        del old["metrics"][key]
    assert Figures.of(old).mfu is None and Figures.of(old).mfu_missing is None


def test_the_exports_hold_mfu_its_basis_and_the_facts():
    csv = to_csv([_row()]).splitlines()
    header, line = csv[0].split(","), csv[1]
    names = ("mfu", "peak_basis", "achieved_tflops", "train_flops_per_sample", "rss_peak_bytes")
    assert set(names) <= set(header)
    assert "0.6000" in line and "measured fp32 matmul peak, 1 thread" in line
    assert str(812 * 2**20) in line


def _environment(**fields):
    return Environment(rank=0, **fields)


def test_a_run_stores_the_models_flops_and_the_workers_peak():
    config = RunConfig.make(model="resnet44", workers=2)
    peak = {"flops_s": 2e11, "basis": BASIS, "source": "measured"}
    facts = utilization_metrics(config, _environment(peak=peak))
    assert facts["train_flops_per_sample"] == 3 * MODELS.get("resnet44").forward_flops_per_sample
    assert facts["flops_source"] == "analytic" and "2 FLOPs" in facts["flops_rule"]
    assert facts["peak_flops_per_worker"] == 2e11 and facts["peak_basis"] == BASIS
    assert facts["mfu_missing"] is None


def test_a_gpt_stores_the_unhalved_rule_and_the_causal_figure_beside_it():
    config = RunConfig.make(model="gpt-mini", dataset="tokens")
    facts = utilization_metrics(config, _environment(peak={}))
    assert facts["train_flops_per_sample_causal"] < facts["train_flops_per_sample"]
    assert "not halved" in facts["flops_rule"]


@pytest.mark.parametrize(
    ("config", "environment", "words"),
    [
        ({"loader_only": True}, {"peak": {}}, "loader_only"),
        ({}, None, "no training rank recorded"),
        ({}, {"peak_missing": "no MFU: GPU 'X' is not in the table; peak_tflops"}, "GPU 'X'"),
        ({}, {"peak": {"flops_s": -1, "basis": "b", "source": "measured"}}, "recorded no peak"),
        ({}, {"peak": {"flops_s": math.nan, "basis": "b", "source": "set"}}, "recorded no peak"),
    ],
)
def test_what_is_missing_is_said_in_one_line(config, environment, words):
    facts = utilization_metrics(
        RunConfig.make(model="resnet44", **config),
        None if environment is None else _environment(**environment),
    )
    assert words in facts["mfu_missing"] and "\n" not in facts["mfu_missing"]


def test_a_user_models_flops_are_what_its_worker_counted_or_why_not(tmp_path):
    own = tmp_path / "net.py"
    own.write_text(
        "import torch\n"
        "def build(num_classes):\n"
        "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 10))\n"
    )
    config = RunConfig.make(model=f"{own}:build", image_size=32)
    counted = {"per_sample": 184320, "rule": "3 x forward, counted", "source": "counted"}
    facts = utilization_metrics(config, _environment(flops=counted))
    assert facts["train_flops_per_sample"] == 184320 and facts["flops_source"] == "counted"
    refused = {"missing": "no MFU: cannot count the FLOPs of build: its forward raised"}
    facts = utilization_metrics(config, _environment(flops=refused))
    assert facts["mfu_missing"] == refused["missing"]
    facts = utilization_metrics(config, _environment())  # a script's own loop: nothing counted
    assert facts["mfu_missing"].startswith("no MFU: the FLOPs of model")


def _window(rank, index, rss, reset=True, **fields):
    return Window(rank=rank, index=index, steps=1, samples=1, duration_s=1.0,
                  rss_peak_bytes=rss, rss_peak_reset=reset, **fields)  # fmt: skip


def test_peak_memory_is_the_largest_window_of_the_largest_rank():
    per_rank = {
        0: [_window(0, 0, 100), _window(0, 1, 300)],
        1: [_window(1, 0, 250), _window(1, 1, 200, reset=False)],
    }
    out = memory_metrics(per_rank)
    assert out["rss_peak_bytes"] == 300
    assert out["rss_peak_bytes_by_rank"] == {"0": 300, "1": 250}
    assert out["rss_peak_reset"] is False  # one window counted from its process's start
    assert out["device_peak_allocated_bytes"] is None
    gpu = memory_metrics({0: [_window(0, 0, 1, device_peak_allocated_bytes=7)]})
    assert gpu["device_peak_allocated_bytes"] == 7
    assert memory_metrics({0: []})["rss_peak_bytes"] is None


@pytest.mark.skipif(not HAS_PROC, reason="VmHWM is Linux's")
def test_a_window_starts_its_own_memory_mark():
    """The warm-up's peak (a 400 MB array, freed) is not the window's: the mark is reset as
    the window begins."""
    block = np.ones(50_000_000)
    block.sum()
    del block
    held = rss_peak_bytes()
    before = sample(None, starts_window=True)
    after = sample(None)
    fields = load_fields(before, after)
    assert fields["rss_peak_reset"] is True
    assert fields["rss_peak_bytes"] < held - 300 * 2**20, (fields, held)


@pytest.mark.parametrize("key", ["peak_tflops", "timeout_s"])
def test_a_key_outside_the_run_id_takes_one_value_not_a_grid(tmp_path, key):
    """Operational keys are not in the run id: a list of them would be one point, kept once."""
    from dlscale.config.study import load_study_file, parse_set
    from dlscale.contract.errors import UserError

    with pytest.raises(UserError, match=f"{key} takes one value, not a list"):
        parse_set([f"{key}=10,20"])
    study = tmp_path / "s.toml"
    study.write_text(f'name = "s"\n{key} = [10.0, 20.0]\n')
    with pytest.raises(UserError, match=f"{key} takes one value"):
        load_study_file(study)
    assert parse_set([f"{key}=10"]) == {key: 10.0}


def test_the_finding_gives_each_points_mfu_memory_and_the_peak_it_is_of():
    """Every MFU of the line can be recomputed from it: the peak's figure is beside its words."""
    (line,) = [f for f in findings([_row(), _row(workers=1, samples_s=250.0)]) if "MFU" in f]
    assert line.startswith("MFU and peak memory per process: ")
    assert "60.0%, 812 MiB" in line and "75.0%, 812 MiB" in line  # 150 / 200 GFLOP/s at 1
    assert line.endswith(f"(MFU {BASIS}: 200.0 GFLOP/s)")
