"""Real worker processes on gloo: runs, failures, hangs and what they leave behind."""

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from dlscale.cli.stale import say_stale
from dlscale.config import RunConfig
from dlscale.contract.engine_code import engine_code
from dlscale.contract.events import read_events
from dlscale.contract.layout import ProcessLayout, Role
from dlscale.launchers.watch import hung_rank
from dlscale.runner import run_point
from dlscale.store import RunStore
from tests.distributed.guard import windows_used
from tests.distributed.processes import alive, kill_all, start_long_run, wait_for_pids

pytestmark = pytest.mark.dist


def test_two_worker_ddp_run_records_everything(tmp_path: Path):
    cfg = RunConfig.make(
        backend="torch-ddp",
        model="tiny",
        workers=2,
        steps=4,
        windows=2,
        warmup_steps=1,
        comm_probe_steps=2,
    )
    outcome = run_point(cfg, RunStore(tmp_path), force=False, command=["test"], study="t")
    assert outcome.state == "completed", outcome.result and outcome.result.error
    result = outcome.result
    run_dir = tmp_path / outcome.run_id
    assert {p.name for p in run_dir.iterdir()} >= {
        "spec.json",
        "result.json",
        "events.rank0.jsonl",
        "events.rank1.jsonl",
    }
    assert not (run_dir / "lock").exists()
    m = result.metrics
    assert m["windows_recorded"] == 2 and m["windows"] == windows_used(m, 2)
    assert m["measured_steps"] == 4 * m["windows"]
    assert m["measured_images"] == m["windows"] * 2 * 4 * 64  # windows x ranks x steps x batch
    assert m["throughput_samples_s"] > 0
    assert (m["throughput_ci95_samples_s"] is not None) == (m["windows"] >= 2)
    # not clipped: noise can take it below 0 (docs/metrics.md); its interval says how much
    assert -1 < m["exposed_comm_fraction"] < 1 and m["exposed_comm_ci95"] is not None
    assert m["step_time_nosync_p50_ms"] > 0
    # the forward steps' median (no speed compared: recomputed from the events below)
    assert m["forward_time_p50_ms"] > 0
    assert result.environment["torch_version"].startswith("2.")
    assert result.environment["dlscale_version"]
    assert result.global_batch_size == 128 and result.batch_size_per_worker == 64
    forwards = []
    for rank in (0, 1):
        events = read_events(run_dir / f"events.rank{rank}.jsonl")
        kinds = [e["event"] for e in events]
        assert kinds[0] == "start" and kinds[-1] == "end"
        # the probe's ABBA order, rebuilt from its steps' starts: pair 1 reversed, pair 2 not;
        # a forward alone (F) beside each pair
        letters = {"probe": "S", "nosync": "N", "forward": "F"}
        probe = {e["kind"]: e for e in events if e.get("kind") in letters}
        ran = sorted((t, letters[kind]) for kind in probe for t in probe[kind]["step_starts_s"])
        assert "".join(kind for _, kind in ran) == "FNSSNF"
        forwards.append(probe["forward"]["step_ms"])
    # forward_time_p50_ms: the median over the forward steps of the slower rank's time
    slowest = [max(times) for times in zip(*forwards, strict=True)]
    assert len(slowest) == 2
    assert m["forward_time_p50_ms"] == pytest.approx(statistics.median(slowest), rel=1e-12)
    # resume: a completed point is not run again
    again = run_point(cfg, RunStore(tmp_path), force=False, command=["test"], study="t")
    assert again.state == "skipped"
    # unless other code made it: said once, run again, the old result kept beside it
    assert result.environment["engine_code"] == engine_code("torch-ddp")
    stored = json.loads((run_dir / "result.json").read_text())
    stored["environment"]["engine_code"] = "0123456789abcdef"
    (run_dir / "result.json").write_text(json.dumps(stored))
    said: list[str] = []
    study = SimpleNamespace(points=(cfg,), repeats=SimpleNamespace(repeats=1))  # its one point
    say_stale(RunStore(tmp_path), study, False, said.append)
    assert said == [
        "1 stored run(s) of this study were made by other code (made by dlscale "
        f"{result.environment['dlscale_version']} with torch-ddp's engine code "
        f"0123456789abcdef, which is {engine_code('torch-ddp')} now): running them again "
        "(--keep-stale keeps them; each old result stays in its run directory as "
        "result.stale-CODE.json)"
    ]
    kept = run_point(cfg, RunStore(tmp_path), force=False, command=["t"], study="t",
                     keep_stale=True)  # fmt: skip
    assert kept.state == "skipped" and kept.result.environment["engine_code"] == "0123456789abcdef"
    rerun = run_point(cfg, RunStore(tmp_path), force=False, command=["t"], study="t")
    assert (
        rerun.state == "completed" and rerun.result.environment["engine_code"] != "0123456789abcdef"
    )
    aside = json.loads((run_dir / "result.stale-0123456789abcdef.json").read_text())
    assert aside["metrics"] == stored["metrics"]  # the old figures, not lost
    assert [r.run_id for r in RunStore(tmp_path).results()] == [outcome.run_id]  # read once


@pytest.mark.parametrize("backend", ["torch-fsdp", "torch-single"])
def test_one_process_times_its_plain_step_and_a_forward_alone(tmp_path: Path, backend: str):
    """A 1-worker point, the compute of engines with no step without synchronization
    (torch-fsdp's own, tf-ps' baseline), times its plain step and a forward alone after its
    windows, in ABBA order with no probe step; predict --validate takes the backward's share
    from it (perfmodel/validate.py)."""
    cfg = RunConfig.make(backend=backend, model="tiny", workers=1, steps=4, windows=1,
                         warmup_steps=1, comm_probe_steps=2)  # fmt: skip
    outcome = run_point(cfg, RunStore(tmp_path), force=False, command=["test"], study="t")
    assert outcome.state == "completed", outcome.result and outcome.result.error
    m = outcome.result.metrics
    events = read_events(tmp_path / outcome.run_id / "events.rank0.jsonl")
    probe = {e["kind"]: e for e in events if e.get("kind") in ("probe", "nosync", "forward")}
    assert set(probe) == {"nosync", "forward"}
    ran = sorted((t, kind[0]) for kind in probe for t in probe[kind]["step_starts_s"])
    assert "".join(kind for _, kind in ran) == "fnnf"  # pair 1 reversed, pair 2 not
    for kind, metric in (("nosync", "step_time_nosync_p50_ms"), ("forward", "forward_time_p50_ms")):
        assert m[metric] == pytest.approx(statistics.median(probe[kind]["step_ms"]), rel=1e-12)
    # nothing synchronized beside it: torch-single's is 0, torch-fsdp's not measured
    assert m["exposed_comm_fraction"] == (0.0 if backend == "torch-single" else None)


def test_a_killed_worker_fails_the_run_and_stops_its_sibling(tmp_path: Path):
    results = tmp_path
    proc = start_long_run(results, timeout_s=120)
    pids = wait_for_pids(results)
    time.sleep(1.0)
    os.kill(pids[1], signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    record = json.loads(out.strip().splitlines()[-1])
    assert record["status"] == "failed"
    assert "rank 1 was killed by SIGKILL" in record["error"]
    assert "Traceback" not in err
    assert not alive(pids[0]) and not alive(pids[1])
    (result,) = RunStore(results).results()
    assert result.failure["failed_rank"] == 1


def test_a_hung_worker_is_stopped_by_the_run_timeout_and_named(tmp_path: Path):
    results = tmp_path
    proc = start_long_run(results, timeout_s=30)  # time enough to start on a loaded machine
    pids: dict[int, int] = {}
    try:
        pids = wait_for_pids(results, proc=proc)
        os.kill(pids[1], signal.SIGSTOP)  # hangs: alive, never answers its peer (rank 0 waits)
        out, _ = proc.communicate(timeout=90)
    finally:
        kill_all(pids.values(), proc)
    assert proc.returncode == 1
    record = json.loads(out.strip().splitlines()[-1])
    assert record["status"] == "failed" and "timed out after 30 s" in record["error"]
    # The stopped rank is named, not the first rank still running.
    assert "rank 1 looks hung: its process" in record["error"], record["error"]
    assert "is stopped" in record["error"]
    assert not alive(pids[0]) and not alive(pids[1])
    (result,) = RunStore(results).results()
    assert result.failure["failed_rank"] == 1


def _events(run_dir: Path, rank: int, *kinds_and_times: tuple[str, float], pid: int = 0) -> None:
    lines = [
        {"schema": 2, "event": kind, "rank": rank, "host": socket.gethostname(), "time": t}
        | ({"pid": pid} if kind == "start" else {})
        for kind, t in kinds_and_times
    ]
    (run_dir / f"events.rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_the_rank_blamed_for_a_timeout_is_the_one_that_looks_hung(tmp_path: Path):
    """Stopped first, then the fewest windows, then the oldest last record; a server (a role
    that records no windows) is not blamed while a training rank runs."""
    layout = ProcessLayout.from_roles(
        (Role(name="server", count=1, trains=False, exits=False), Role(name="worker", count=3))
    )
    now = time.time()
    _events(tmp_path, 0, ("start", now - 100))  # the server: no windows, oldest record
    _events(tmp_path, 1, ("start", now - 90), ("window", now - 50), ("window", now - 10))
    _events(tmp_path, 2, ("start", now - 90), ("window", now - 40), ("window", now - 30))
    _events(tmp_path, 3, ("start", now - 90), ("window", now - 45), ("window", now - 5))
    rank, why = hung_rank([0, 1, 2, 3], layout, tmp_path)
    assert rank == 2 and "last record is the oldest (30 s ago)" in why
    # An earlier attempt's records in the same file do not count.
    _events(tmp_path, 1, ("start", now - 99), *[("window", now - 98)] * 5, ("start", now - 90))
    assert hung_rank([0, 1, 2, 3], layout, tmp_path) == (
        1,
        "it recorded the fewest windows (0; the others up to 2)",
    )
    (tmp_path / "events.rank3.jsonl").unlink()  # never started
    assert hung_rank([0, 2, 3], layout, tmp_path) == (3, "it has written no record")
    assert hung_rank([0], layout, tmp_path) == (0, "it is the only one still running")
    # A stopped process beats every record: here the server (rank 0), the one with most windows.
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(sleeper.pid, signal.SIGSTOP)
        os.waitid(os.P_PID, sleeper.pid, os.WSTOPPED | os.WNOWAIT)
        _events(tmp_path, 0, ("start", now - 100), pid=sleeper.pid)
        rank, why = hung_rank([0, 1, 2, 3], layout, tmp_path)
        assert rank == 0 and why == f"its process {sleeper.pid} is stopped (state T)"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_failed_point_does_not_stop_the_study(tmp_path: Path, cli):
    # batch 2000 is more than a digits shard holds: the workers fail with a data error;
    # the next point (batch 16) must still run.
    result = cli(
        "run",
        "--repeats",
        "1",
        "--set",
        "machine_reference=false",
        "--backend",
        "torch-ddp",
        "--model",
        "tiny",
        "--dataset",
        "digits",
        "--workers",
        "2",
        "--batch-size",
        "2000,16",
        "--steps",
        "2",
        "--windows",
        "1",
        "--json",
        "--results",
        str(tmp_path),
    )
    assert result.returncode == 1, result.stderr
    records = [r for r in map(json.loads, result.stdout.splitlines()) if r["kind"] == "run"]
    assert [r["status"] for r in records] == ["failed", "completed"]
    assert "too small" in records[0]["error"]
    assert "Traceback" not in result.stderr


def test_stopping_dlscale_stops_its_workers(tmp_path: Path):
    results = tmp_path
    proc = start_long_run(results, timeout_s=120)
    pids = wait_for_pids(results)
    proc.send_signal(signal.SIGTERM)  # e.g. a batch scheduler ending the job
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM  # 143, as a shell reports it (not Ctrl-C's)
    assert "stopped by SIGTERM; completed points are kept; rerun" in err
    assert not alive(pids[0]) and not alive(pids[1])
    assert not list(results.glob("*/lock"))  # the point can be rerun
