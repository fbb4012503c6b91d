"""The engine contract proven from outside dlscale: a toy backend and a toy launcher, registered
by a plug-in package under tests/plugins (no core file names them), run end to end through the
runner, the store and the report, and under a second virtual environment with its own numpy."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlscale import load_results
from dlscale.contract.events import read_events
from tests.distributed.processes import alive, start_long_run, toy_env

pytestmark = [pytest.mark.e2e, pytest.mark.dist]  # starts workers: not in make check

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "tests" / "plugins"
ALT_NUMPY = "1.26.4"
"""The second environment's numpy: another version than the main environment's (2.x)."""


def dlscale(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "dlscale", *args],
        env=toy_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_no_core_file_names_the_toy():
    """The toy is registered by its own package: dlscale's sources never mention it."""
    for path in (ROOT / "src" / "dlscale").rglob("*.py"):
        assert "toy" not in path.read_text(), path


def test_toy_backend_runs_through_runner_store_and_report(tmp_path: Path):
    results = tmp_path / "results"
    dlscale(
        "run",
        "--repeats",
        "1",
        "--set",
        "machine_reference=false",
        "--backend",
        "toy-single,toy-ps",
        "--model",
        "softmax",
        "--dataset",
        "digits",
        "--workers",
        "1,2",
        "--epochs",
        "3",
        "--batch-size",
        "32",
        "--results",
        str(results),
    )
    frame = load_results(results).set_index(["backend", "workers"])
    assert set(frame["status"]) == {"completed"}
    assert set(frame["framework"]) == {"numpy"}
    two = frame.loc[("toy-ps", 2)]
    # The speedup baseline is the numpy reference backend, never a torch one.
    assert two["baseline_run_ids"] == [frame.loc[("toy-single", 1), "run_id"]]
    assert two["eval_accuracy"] > 0.85  # a real task: softmax regression on the digits
    assert two["staleness_max"] == 0  # sync mode
    counted, model = two["bytes_sent_per_step_counted"], two["bytes_sent_per_step_model"]
    assert counted == pytest.approx(model)  # every push and pull counted, as modelled
    run_dir = results / two["run_id"]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["layout"][0]["role"] == "server" and result["layout"][0]["trains"] is False
    assert result["failure"] is None
    # The server never exits by itself: the launcher stopped it, which is not a failure.
    assert [e["event"] for e in read_events(run_dir / "events.rank0.jsonl")][-1] == "server"
    # Images: 2 workers x 32 per step, over every measured step (3 epochs minus the warm-up).
    m = result["metrics"]
    assert m["measured_images"] == 2 * 32 * m["measured_steps"]
    listing = dlscale("ls", "runs", "--results", str(results)).stdout
    assert "toy-ps" in listing and "toy-single" in listing
    report = tmp_path / "report.html"
    dlscale("report", "--results", str(results), "--out", str(report))
    assert "toy-ps" in report.read_text()


def test_a_model_library_is_a_plug_in_too(tmp_path: Path):
    """``--model LIBRARY:NAME`` for a library a plug-in registers: the model runs on the
    library's framework; a name the library lacks, or a library whose modules the workers'
    interpreter cannot import, is refused in one line before anything starts."""
    results = tmp_path / "results"
    common = ("--backend", "toy-single", "--dataset", "digits", "--epochs", "2",
              "--batch-size", "32", "--repeats", "1", "--results", str(results))  # fmt: skip
    dlscale("run", "--model", "toyzoo:softmax", *common)
    frame = load_results(results)
    assert list(frame["model"]) == ["toyzoo:softmax"] and list(frame["status"]) == ["completed"]
    assert frame["eval_accuracy"].iloc[0] > 0.8  # the library's softmax, trained
    listing = dlscale("ls", "models").stdout
    assert "toyzoo" in listing and "no: needs dlscale_toy_absent" in listing
    for model, said in (
        ("toyzoo:nosuch", "model toyzoo:nosuch: toyzoo has no model 'nosuch'; it has: softmax"),
        ("toyzoo_absent:softmax", "model toyzoo_absent:softmax needs dlscale_toy_absent, which"),
    ):
        refused = dlscale("run", "--model", model, *common, check=False)
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
    assert len(load_results(results)) == 1  # nothing of either was started or stored


def test_toy_launcher_starts_every_rank_from_one_command(tmp_path: Path):
    results = tmp_path / "results"
    out = dlscale(
        "run",
        "--repeats",
        "1",
        "--set",
        "machine_reference=false",
        "--backend",
        "toy-ps",
        "--model",
        "softmax",
        "--dataset",
        "digits",
        "--workers",
        "2",
        "--epochs",
        "2",
        "--batch-size",
        "32",
        "--launcher",
        "toy-all",
        "--set",
        "toy_mode=async",
        "--set",
        "toy_timing=window",
        "--json",
        "--results",
        str(results),
    ).stdout
    record = json.loads(out.splitlines()[-1])
    assert record["status"] == "completed"
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]  # beside it: the points file
    result = json.loads((run_dir / "result.json").read_text())
    m = result["metrics"]
    # An engine that times whole windows: a median step, no per-step percentiles or input time.
    assert m["step_time_p50_ms"] > 0 and m["step_time_p95_ms"] is None
    assert m["input_time_p50_ms"] is None
    assert sum(m["staleness_histogram"].values()) > 0  # async: every gradient counted
    assert m["eval_accuracy"] > 0.8
    # One command for all ranks: one stdout/stderr pair, and every rank's events.
    assert (run_dir / "launcher.stderr").exists() and not (run_dir / "rank1.stderr").exists()
    for rank in range(3):
        assert (run_dir / f"events.rank{rank}.jsonl").exists()


def test_a_rank_killed_under_a_one_command_launcher_is_named(tmp_path: Path):
    results = tmp_path / "results"
    proc = start_long_run(
        results, 120, "toy-ps", model="softmax", extra=("--launcher", "toy-all"), env=toy_env()
    )
    pids: dict[int, int] = {}
    deadline = time.monotonic() + 90
    while len(pids) < 3 and time.monotonic() < deadline:
        for path in results.glob("*/events.rank*.jsonl"):
            events = read_events(path)
            if events and events[0]["event"] == "start":
                pids[events[0]["rank"]] = events[0]["pid"]
        time.sleep(0.2)
    assert len(pids) == 3, proc.stderr.read() if proc.poll() is not None else "no ranks"
    time.sleep(1.0)
    os.kill(pids[2], signal.SIGKILL)
    out, _ = proc.communicate(timeout=120)
    assert isinstance(out, str)
    assert proc.returncode == 1
    record = json.loads(out.splitlines()[-1])
    assert record["status"] == "failed"
    assert "rank 2" in record["error"], record["error"]
    for pid in pids.values():
        assert not alive(pid)


@pytest.fixture(scope="session")
def alt_python() -> Path:
    """A real second virtual environment with another numpy, made once and kept in a cache
    outside the checkout (a later run reuses it)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dlscale-tests"
    version = f"{sys.version_info.major}{sys.version_info.minor}"
    venv = cache / f"venv-py{version}-numpy{ALT_NUMPY}"
    python = venv / "bin" / "python"
    ready = venv / ".ready"
    if not ready.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"numpy=={ALT_NUMPY}"],
            check=True,
            timeout=600,
        )
        ready.touch()
    return python


def test_a_worker_under_a_second_venv_uses_that_venvs_numpy(tmp_path: Path, alt_python: Path):
    import numpy

    assert numpy.__version__ != ALT_NUMPY  # the test means something only if they differ
    results = tmp_path / "results"
    dlscale(
        "run",
        "--repeats",
        "1",
        "--set",
        "machine_reference=false",
        "--backend",
        "toy-ps",
        "--model",
        "softmax",
        "--dataset",
        "synthetic",
        "--workers",
        "2",
        "--steps",
        "4",
        "--results",
        str(results),
        "--set",
        f"python={alt_python}",
    )
    (row,) = load_results(results).to_dict("records")
    assert row["status"] == "completed"
    result = json.loads((results / row["run_id"] / "result.json").read_text())
    worker = result["environment"]["worker"]
    assert worker["python"] == str(alt_python)
    assert worker["packages"]["numpy"] == ALT_NUMPY
    assert worker["framework"]["numpy_version"] == ALT_NUMPY
    assert worker["framework"]["numpy_file"].startswith(str(alt_python.parent.parent))
    assert result["environment"]["packages"]["numpy"] == ALT_NUMPY
    assert result["environment"]["parent_packages"]["numpy"] == numpy.__version__
    # The worker's path holds links to dlscale and the plug-in, not a site-packages.
    path_dir = results / row["run_id"] / "pythonpath"
    assert sorted(p.name for p in path_dir.iterdir()) == ["dlscale", "dlscale_toy"]
