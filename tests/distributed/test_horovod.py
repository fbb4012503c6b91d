"""The real Horovod (built by `make horovod`, which `make test` runs) on 2 processes: under
horovodrun (Gloo), mpirun (MPI) and the local launcher (Gloo, rank 0 serving the rendezvous).
Equivalence with torch-ddp and torch-single is in test_equivalence.py."""

import importlib.util
import json
import os
import signal
import time
from pathlib import Path

import pytest

from dlscale.contract.events import read_events
from dlscale.store import RunStore
from tests.distributed.processes import (
    alive,
    kill_all,
    parent_pid,
    processes_naming,
    start_long_run,
    wait_for_pids,
    wait_gone,
)

WIDE = {"COLUMNS": "400"}
"""A width at which ls backends NAME keeps each value on one line."""
pytestmark = pytest.mark.dist

TINY = ("--model", "tiny", "--steps", "3", "--windows", "2", "--warmup-steps", "1")
TINY += ("--repeats", "1")


@pytest.fixture(autouse=True, scope="module")
def horovod_installed():
    assert importlib.util.find_spec("horovod"), "Horovod is not installed here: run make horovod"


def test_horovodrun_run_records_metrics_bytes_and_the_timeline(tmp_path: Path, cli):
    results = tmp_path / "res"
    run = cli(
        "run",
        "--backend",
        "horovod-torch",
        "--launcher",
        "horovodrun",
        "--workers",
        "2",
        *TINY,
        "--set",
        "compression=fp16",
        "--set",
        "horovod_timeline=true",
        "--set",
        "machine_reference=false",
        "--json",
        "--results",
        str(results),
    )
    assert run.returncode == 0, run.stderr
    (result,) = RunStore(results).results()
    assert result.status == "completed"
    m = result.metrics
    assert m["exposed_comm_ci95"] is not None and m["step_time_nosync_p50_ms"] > 0
    # fp16 halves the payload: 2(N-1)/N x gradient bytes / 2 by the model, and counted from
    # the fp16 tensors Horovod's compressor hands to the all-reduce (full bytes if it did not)
    assert m["bytes_sent_per_step_model"] == round(m["gradient_bytes"] / 2)
    assert m["bytes_sent_per_step_counted"] == m["bytes_sent_per_step_model"]
    assert m["traces"] == ["horovod-timeline.json"]
    run_dir = results / result.run_id
    timeline = (run_dir / "horovod-timeline.json").read_text()
    assert '"ph"' in timeline and "ALLREDUCE" in timeline  # Chrome trace events of all-reduces
    strategy = next(
        e for e in read_events(run_dir / "events.rank0.jsonl") if e["event"] == "strategy"
    )
    assert strategy["facts"]["horovod_controller"] == "gloo"
    assert strategy["facts"]["horovod_version"] == "0.28.1"
    # the messages a step sent: Horovod's fused responses, read from the timeline (float16
    # copies: half the gradient's bytes in all), a typical step's; every step reduced them all
    seen = next(e for e in read_events(run_dir / "events.rank0.jsonl") if e["event"] == "messages")
    assert seen["source"] == "Horovod's timeline (horovod-timeline.json): its fused responses"
    assert m["sync_message_bytes"] == seen["message_bytes"]
    assert sum(seen["message_bytes"]) * 2 == m["gradient_bytes"]
    assert seen["steps"] >= 4 and seen["counts"][seen["steps"] // 2] == len(seen["message_bytes"])
    # the report links the timeline, relative to the page
    page = tmp_path / "out" / "report.html"
    report = cli("report", "--results", str(results), "--out", str(page))
    assert report.returncode == 0, report.stderr
    assert f'href="../res/{result.run_id}/horovod-timeline.json"' in page.read_text()


@pytest.mark.parametrize("launcher", ["horovodrun", "mpirun", "local"])
def test_a_killed_rank_fails_the_run_names_it_and_leaves_nothing_running(tmp_path: Path, launcher):
    proc = start_long_run(tmp_path, 120, "horovod-torch", extra=("--launcher", launcher))
    pids: dict[int, int] = {}
    try:
        pids = wait_for_pids(tmp_path, proc=proc)
        time.sleep(1.0)
        os.kill(pids[1], signal.SIGKILL)
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 1, err
        record = json.loads(out.strip().splitlines()[-1])
        assert record["status"] == "failed"
        assert "rank 1" in record["error"], record["error"]
        assert "Traceback" not in err
        (result,) = RunStore(tmp_path).results()
        assert result.failure["failed_rank"] == 1
        deadline = time.monotonic() + 10
        while any(alive(p) for p in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in pids.values() if alive(p)]
        assert not processes_naming(tmp_path), "the launcher's tool outlived the run"
    finally:
        kill_all(pids.values(), proc)


def test_ls_backends_says_what_horovod_was_built_with(cli):
    """The build record of scripts/build-horovod.sh, read without importing Horovod."""
    listing = cli("ls", "backends", "horovod-torch", env=WIDE)
    assert listing.returncode == 0, listing.stderr
    text = " ".join(listing.stdout.split())
    assert "horovod 0.28.1 built for torch" in text and "gloo,mpi" in text


@pytest.mark.parametrize("launcher", ["horovodrun", "mpirun"])
def test_kill_9_of_dlscale_leaves_no_rank_and_no_tool_behind(tmp_path: Path, launcher):
    """The ranks are the tool's descendants, not dlscale's: their watchdogs end them, and the
    tool (dlscale's child) ends with them."""
    proc = start_long_run(tmp_path, 600, "horovod-torch", extra=("--launcher", launcher))
    pids: dict[int, int] = {}
    tools: list[int] = []
    try:
        pids = wait_for_pids(tmp_path, proc=proc)
        tools = [p for p in processes_naming(tmp_path) if p not in pids.values()]
        assert proc.pid not in {parent_pid(p) for p in pids.values()}  # started by the tool
        proc.kill()
        left = wait_gone([*pids.values(), *tools], 10.0)
        assert not left, f"{left} outlived their dlscale (ranks {pids}, tools {tools})"
        assert not processes_naming(tmp_path)
    finally:
        kill_all([*pids.values(), *tools], proc)


def test_a_rank_waits_for_a_slow_rank_0_to_serve_the_rendezvous(tmp_path: Path, cli):
    """Rank 0 (the one given Horovod's host plan) starts 8 s late, as a loaded machine can make
    it: rank 1 waits for its rendezvous server instead of calling ``hvd.init`` early, which
    tries the server three times in 1.5 s and then aborts the process (SIGABRT)."""
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(
        "import os, time\nif os.environ.get('DLSCALE_HOROVOD_RENDEZVOUS'):\n    time.sleep(8)\n"
    )
    pythonpath = os.pathsep.join(filter(None, [str(slow), os.environ.get("PYTHONPATH")]))
    run = cli(
        "run", "--backend", "horovod-torch", "--workers", "2", *TINY, "--set",
        "machine_reference=false", "--json", "--results", str(tmp_path / "res"),
        env={"PYTHONPATH": pythonpath},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (result,) = RunStore(tmp_path / "res").results()
    assert result.status == "completed"
    starts = {
        rank: next(
            e["time"]
            for e in read_events(tmp_path / "res" / result.run_id / f"events.rank{rank}.jsonl")
            if e["event"] == "start"
        )
        for rank in (0, 1)
    }
    assert starts[0] - starts[1] > 5  # rank 0 was late indeed
