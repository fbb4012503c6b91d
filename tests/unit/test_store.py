import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlscale.errors import SchemaError, UserError
from dlscale.metrics.events import EventWriter, read_events, read_records
from dlscale.metrics.records import Start
from dlscale.store import RunStore, read_json, write_json_atomic


def test_atomic_write_and_schema_checks(tmp_path: Path):
    path = tmp_path / "r" / "result.json"
    write_json_atomic(path, "result", {"status": "completed"})
    assert read_json(path, "result") == {"schema": "dlscale.result/2", "status": "completed"}
    assert [p.name for p in path.parent.iterdir()] == ["result.json"]  # no temp file left
    path.write_text(json.dumps({"schema": "dlscale.result/99"}))
    with pytest.raises(SchemaError, match="newer dlscale"):
        read_json(path, "result")
    path.write_text('{"schema": "dlscale.result/1", "status"')
    with pytest.raises(SchemaError, match="not valid JSON"):
        read_json(path, "result")
    path.write_text(json.dumps({"schema": "dlscale.spec/1"}))
    with pytest.raises(SchemaError, match="not a dlscale result file"):
        read_json(path, "result")


def test_lock_is_exclusive_and_stale_locks_are_taken_over(tmp_path: Path):
    store = RunStore(tmp_path)
    assert store.reserve("run-a")
    assert not store.reserve("run-a")  # held by a live process (this one)
    store.release("run-a")
    assert store.reserve("run-a")
    store.release("run-a")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    lock = tmp_path / "run-a" / "lock"
    lock.write_text(json.dumps({"host": os.uname().nodename, "pid": int(dead), "time": 0}))
    assert store.reserve("run-a")


def test_concurrent_reservations_have_one_winner(tmp_path: Path):
    code = (
        "import sys; from dlscale.store import RunStore; import time;"
        "ok = RunStore(sys.argv[1]).reserve('same'); time.sleep(1); print(int(ok))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    wins = [int(p.communicate()[0]) for p in procs]
    assert sum(wins) == 1


def test_results_listing_and_completed(tmp_path: Path):
    store = RunStore(tmp_path)
    with pytest.raises(UserError, match="no results directory"):
        RunStore(tmp_path / "none").results()
    store.write_result("a", {"run_id": "a", "status": "failed", "finished_at": 2})
    store.write_result("b", {"run_id": "b", "status": "completed", "finished_at": 1})
    assert [r["run_id"] for r in store.results()] == ["b", "a"]
    assert store.completed("a") is None
    assert store.completed("b")["run_id"] == "b"


def test_event_writer_stamps_and_reader_drops_torn_line(tmp_path: Path):
    path = tmp_path / "events.rank3.jsonl"
    writer = EventWriter(path, rank=3)
    writer.write(Start(pid=1))
    writer.close()
    with path.open("a") as handle:
        handle.write('{"event": "window", "ra')  # a rank killed mid-write
    (record,) = read_events(path)
    assert record["event"] == "start" and record["rank"] == 3 and record["pid"] == 1
    assert {"host", "time", "schema"} <= record.keys()
    (typed,) = read_records(path)
    assert isinstance(typed, Start) and typed.rank == 3 and typed.pid == 1


def test_results_of_schema_1_read_into_the_current_shape():
    """tests/data/results was written by schema 1 (every key flat); it reads like schema 2."""
    fixture = Path(__file__).resolve().parent.parent / "data" / "results"
    raw = json.loads(next(fixture.glob("*torch-ddp*/result.json")).read_text())
    assert raw["schema"] == "dlscale.result/1" and "compile" in raw["config"]
    assert "bucket_mb" not in raw["config"]  # written before the key existed
    rows = RunStore(fixture).results()
    ddp = next(r for r in rows if r["config"]["backend"] == "torch-ddp")
    single = next(r for r in rows if r["config"]["backend"] == "torch-single")
    assert ddp["framework"] == single["framework"] == "torch"
    assert ddp["config_options"]["backend"]["compile"] is False  # stored flat, regrouped
    assert ddp["config_options"]["backend"]["bucket_mb"] == 25.0  # added later: its default
    assert "bucket_mb" not in single["config"]  # torch-single never had it
    assert "ps_mode" not in ddp["config"] and "mode" not in ddp["config"]
    assert ddp["config"]["threads_per_worker"] is None  # a core key, read as before
    from dlscale.metrics.scaling import add_scaling

    scaled = {r["run_id"]: r for r in add_scaling(rows)}
    two = next(r for r in scaled.values() if r["config"]["workers"] == 2)
    assert scaled[two["baseline_run_id"]]["config"]["backend"] == "torch-single"
