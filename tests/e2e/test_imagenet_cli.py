"""ImageNet-layout data from disk through the command line: the input share beside compute and
communication, loader-only runs, every framework installed, and bad data as a user meets it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlscale.contract.records import Window, from_dict
from dlscale.store import RunStore
from tests.distributed.processes import processes_naming
from tests.image_data import write_folder, write_tfrecords

pytestmark = [pytest.mark.e2e, pytest.mark.dist]  # starts workers: not in make check

SMALL = ("--model", "tiny", "--dataset", "imagenet-subset", "--set", "classes=3",
         "--batch-size", "4", "--steps", "3", "--windows", "2", "--warmup-steps", "1",
         "--repeats", "1", "--set", "machine_reference=false")  # fmt: skip


def _points(stdout: str) -> list[dict]:
    return [r for r in map(json.loads, stdout.splitlines()) if r["kind"] == "point"]


def test_a_jpeg_folder_shows_the_input_share_and_the_loaders_cap(tmp_path: Path, cli):
    data = write_folder(tmp_path / "imagenet", classes=3, per_class=12)
    results = tmp_path / "res"
    flags = (*SMALL, "--backend", "torch-ddp", "--workers", "1,2", "--loader-only", "false,true",
             "--data-dir", str(data), "--results", str(results))  # fmt: skip
    run = cli("run", *flags, env={"COLUMNS": "250"})
    assert run.returncode == 0, run.stderr
    header = next(line for line in run.stdout.splitlines() if line.startswith("backend"))
    assert " input " in header  # the table's column
    caps = [line for line in run.stdout.splitlines() if line.startswith("input: torch-ddp x")]
    assert len(caps) == 2 and all("input caps you at" in line for line in caps), run.stdout
    stored = RunStore(results).results()
    assert sorted((r.config["workers"], r.settings["loader_only"]) for r in stored) == [
        (1, False), (1, True), (2, False), (2, True)
    ]  # fmt: skip
    for result in stored:
        metrics = result.metrics
        assert result.status == "completed", result.error
        wait = metrics["input_wait_fraction"]
        assert 0 < wait <= 1 and metrics["input_time_p50_ms"] > 0
        if result.settings["loader_only"]:
            assert wait > 0.9  # a step is the wait for the batch and nothing else
            assert metrics["exposed_comm_fraction"] in (0.0, None) and not metrics["loss_diverged"]
        # images/s recomputed from the ranks' windows: images summed, the slowest rank's time
        windows: dict[int, list[Window]] = {}
        for events in (results / result.run_id).glob("events.rank*.jsonl"):
            for line in events.read_text().splitlines():
                record = from_dict(json.loads(line))
                if isinstance(record, Window) and record.kind == "measure":
                    windows.setdefault(record.index, []).append(record)
        by_hand = [
            sum(w.samples for w in ws) / max(w.duration_s for w in ws) for ws in windows.values()
        ]
        kept = metrics["throughput_windows_samples_s"]  # the noise guard may leave windows out
        assert 1 <= len(kept) <= len(by_hand) == 2
        assert all(any(v == pytest.approx(h) for h in by_hand) for v in kept)
        assert metrics["throughput_samples_s"] == pytest.approx(sum(kept) / len(kept))
    report = cli("report", "--results", str(results), "--out", str(tmp_path / "report.html"))
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "report.html").read_text()
    assert "<h3>Input pipeline</h3>" in page and "input caps you at" in page


@pytest.mark.parametrize("backend", ["tf-single", "mxnet-single", "torch-single"])
def test_tfrecord_shards_train_on_every_framework(tmp_path: Path, cli, backend):
    data = write_tfrecords(tmp_path / "records", classes=3, per_class=8, shards=2)
    results = tmp_path / "res"
    run = cli("run", *SMALL, "--backend", backend, "--workers", "1", "--data-dir", str(data),
              "--json", "--set", "loader_workers=1", "--results", str(results),
              timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr
    (point,) = _points(run.stdout)
    assert point["status"] == "completed" and point["throughput_samples_s"] > 0
    assert 0 < point["input_wait_fraction"] < 1
    assert point["eval_accuracy"] is not None  # the validation shards were read too


def test_bad_images_stop_the_run_before_training_or_are_left_out_when_asked(tmp_path: Path, cli):
    data = write_folder(tmp_path / "imagenet", classes=3, per_class=6)
    victim = sorted((data / "train" / "n00000001").iterdir())[0]
    victim.write_bytes(victim.read_bytes()[:100])
    flags = (*SMALL, "--backend", "torch-single", "--workers", "1", "--data-dir", str(data),
             "--results", str(tmp_path / "res"))  # fmt: skip
    failed = cli("run", *flags)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    assert failed.stderr.strip().splitlines() == [
        f"dlscale: error: {victim}: truncated JPEG (no end marker); remove or replace the file, "
        'or set bad_files = "skip" (with verify = "decode" for images that only decoding finds) '
        "to leave such files out"
    ]
    assert not (tmp_path / "res").exists() or not list((tmp_path / "res").glob("*/result.json"))
    skipped = cli("run", *flags, "--set", "bad_files=skip", "--set", "images_per_class=0")
    assert skipped.returncode == 0, skipped.stderr
    assert (
        f"dlscale: note: imagenet-subset: 1 bad image left out of train (first: {victim}: "
        "truncated JPEG (no end marker))"
    ) in skipped.stderr
    (result,) = RunStore(tmp_path / "res").results()
    assert result.status == "completed"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--data-dir", "/nonexistent/imagenet"), "/nonexistent/imagenet: not a directory"),
        (("--set", "loader_workers=nan"), "loader_workers must be int, got 'nan'"),
        (("--set", "layout=[red]zip"), "layout"),
        (("--set", "classes=-1"), "classes must be >= 0"),
    ],
)
def test_impossible_settings_are_one_line(tmp_path: Path, cli, args, message):
    data = write_folder(tmp_path / "imagenet", classes=3, per_class=2)
    run = cli("run", *SMALL, "--backend", "torch-single", "--workers", "1",
              "--data-dir", str(data), *args, "--results", str(tmp_path / "res"))  # fmt: skip
    assert run.returncode == 2 and "Traceback" not in run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("dlscale: error: ") and message in line


def test_a_killed_loader_process_fails_the_run_and_leaves_nothing_running(tmp_path: Path):
    """kill -9 of one of a rank's DataLoader processes (children of the rank): the run is
    recorded failed in one line with torch's words for it, and every process of the run is
    gone."""
    data = write_folder(tmp_path / "imagenet", classes=3, per_class=12)
    results = tmp_path / "res"
    flags = ("--model", "tiny", "--dataset", "imagenet-subset", "--set", "classes=3",
             "--batch-size", "4", "--steps", "100000", "--windows", "1", "--repeats", "1",
             "--set", "machine_reference=false", "--backend", "torch-ddp", "--workers", "2",
             "--data-dir", str(data), "--results", str(results))  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlscale", "run", *flags],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        loader = None
        end = time.monotonic() + 120
        while loader is None and time.monotonic() < end:
            ranks = set(processes_naming(results))
            # a DataLoader process is a fork of its rank: the same command line
            loader = next((p for p in ranks if _same(p, _parent(p))), None)
            time.sleep(0.2)
        assert loader is not None, "no loader process appeared"
        os.kill(loader, signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    line = err.splitlines()[0]
    assert "a loader process of this worker died (DataLoader worker (pid" in line, err
    assert "Traceback" not in err and "killed from outside" in line
    (result,) = RunStore(results).results()
    assert result.status == "failed"
    end = time.monotonic() + 30
    while processes_naming(results) and time.monotonic() < end:
        time.sleep(0.2)
    assert not processes_naming(results)


def _same(pid: int, other: int | None) -> bool:
    """Both are ranks' processes with one command line (not a launch's fork before its exec)."""
    try:
        mine = Path(f"/proc/{pid}/cmdline").read_bytes()
        theirs = Path(f"/proc/{other}/cmdline").read_bytes() if other else b""
    except OSError:
        return False
    return mine == theirs and b"dlscale.worker" in mine


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])
