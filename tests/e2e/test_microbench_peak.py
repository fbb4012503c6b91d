"""``dlscale microbench --peak`` as a user runs it: the CPU's matmul peak measured, then read
from the cache; bad input one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_the_peak_is_measured_then_read_from_the_cache(tmp_path: Path, cli):
    env = {"DLSCALE_CACHE_DIR": str(tmp_path)}
    first = cli("microbench", "--peak", "--threads", "1", env=env, timeout=120)
    assert first.returncode == 0, first.stderr
    # beside other tests it may be measured on a busy machine: kept all the same, marked
    row = re.search(r"│\s+1 │ fp32\s+│\s+([\d,.]+) │\s+([\d,.]+) │ measured now", first.stdout)
    assert row is not None, first.stdout
    assert float(row[1].replace(",", "")) > 0
    assert f"kept in {tmp_path / 'peak'}" in first.stdout and "MFU" in first.stdout
    again = cli("microbench", "--peak", "--threads", "1", "--json", env=env, timeout=120)
    assert again.returncode == 0, again.stderr
    (record,) = [json.loads(line) for line in again.stdout.splitlines()]
    assert record["cached"] is True and record["threads"] == 1 and record["dtype"] == "fp32"
    assert record["gflops_s"] == pytest.approx(float(row[1].replace(",", "")), rel=1e-3)
    shown = cli("microbench", "--peak", "--threads", "1", env=env, timeout=120)
    assert "cached at " in shown.stdout


@pytest.mark.parametrize(
    ("flag", "value"), [("--threads", "0"), ("--threads", "two"), ("--dtype", "bf16")]
)
def test_bad_peak_input_is_one_line_and_a_non_zero_exit(tmp_path: Path, cli, flag, value):
    done = cli("microbench", "--peak", flag, value, env={"DLSCALE_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 2
    assert done.stderr.startswith(f"dlscale: error: {flag} '{value}'")
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "peak").exists()  # refused before anything was measured


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--threads", "2"], "--threads belongs"),
        (["--dtype", "fp32"], "--dtype belongs"),
        (["--fresh"], "--fresh belongs"),
        (["--threads", "1", "--dtype", "fp64", "--fresh"], "--threads, --dtype and --fresh belong"),
    ],
)
def test_peak_options_without_peak_are_refused_in_one_line(tmp_path: Path, cli, argv, named):
    results = tmp_path / "results"
    done = cli("microbench", *argv, "--results", str(results),
               env={"DLSCALE_CACHE_DIR": str(tmp_path)})  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith(f"dlscale: error: {named} to --peak (the CPU's matmul peak)")
    assert "add --peak, or leave them out for the collectives benchmark" in done.stderr
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert not results.exists() and not (tmp_path / "peak").exists()  # nothing started
