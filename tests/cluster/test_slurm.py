"""A real one-node Slurm (Debian's slurm-wlm and munge, installed by scripts/install-slurm.sh
and started here by scripts/slurm-local.sh): a study submitted with sbatch and polled, one run
through srun inside an allocation, a job cancelled from outside and one cancelled by stopping
dlscale, each checked in Slurm's records and in the stored results."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlscale.store import RunStore
from tests.distributed.processes import kill_all, processes_naming, start_long_run, wait_for_pids

pytestmark = pytest.mark.dist

ROOT = Path(__file__).resolve().parents[2]
STUDY = """
name = "slurm-2"
description = "torch-single at 1 worker against DDP at 2, through the launcher given"
backend = ["torch-single", "torch-ddp"]
workers = [1, 2]
model = "tiny"
dataset = "digits"
steps = 4
windows = 1
warmup_steps = 1
machine_reference = false
"""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory) -> dict[str, str]:
    """SLURM_CONF of a one-node Slurm running for this module; stopped at its end."""
    where = tmp_path_factory.mktemp("slurm")
    script = ROOT / "scripts" / "slurm-local.sh"
    started = subprocess.run(
        [str(script), "start", str(where)], capture_output=True, text=True, timeout=120
    )
    assert started.returncode == 0, started.stderr
    env = {"SLURM_CONF": str(where / "slurm.conf")}
    try:
        yield env
    finally:
        subprocess.run([str(script), "stop", str(where)], timeout=120)


def _show_job(job: str, env: dict[str, str]) -> str:
    shown = subprocess.run(
        ["scontrol", "show", "job", job],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def _job_state(job: str, env: dict[str, str]) -> str:
    return re.search(r"JobState=(\S+)", _show_job(job, env)).group(1)


def _final_state(job: str, env: dict[str, str], timeout: float = 60) -> str:
    """The job's state once it has ended: a job whose finishing step has written its result can
    still read RUNNING or COMPLETING for a moment while Slurm closes it."""
    end = time.monotonic() + timeout
    state = _job_state(job, env)
    while state in ("PENDING", "RUNNING", "COMPLETING") and time.monotonic() < end:
        time.sleep(0.5)
        state = _job_state(job, env)
    return state


def _job_comment(job: str, env: dict[str, str]) -> str:
    """The Comment field, which scontrol prints on a line of its own (spaces and all)."""
    return re.search(r"Comment=(.*)", _show_job(job, env)).group(1).rstrip()


def test_a_study_submitted_with_sbatch_is_polled_to_its_results(tmp_path: Path, cli, slurm):
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    results = tmp_path / "res"
    run = cli(
        "run", str(study), "--launcher", "slurm", "--set", "slurm_mode=sbatch",
        "--set", "slurm_args=--comment='dlscale test; a b'",
        "--json", "--results", str(results), env=slurm,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    stored = RunStore(results).results()
    assert sorted((r.config["backend"], r.config["workers"]) for r in stored) == [
        ("torch-ddp", 1),
        ("torch-ddp", 2),
        ("torch-single", 1),
    ]
    for result in stored:
        assert result.status == "completed", result.error
        run_dir = results / result.run_id
        script = (run_dir / "job.sbatch").read_text()  # kept beside the results
        assert f"#SBATCH --ntasks={result.config['workers']}" in script
        job = (run_dir / "slurm-job-id").read_text().strip()
        assert _final_state(job, slurm) == "COMPLETED"
        assert _job_comment(job, slurm) == "dlscale test; a b"  # one option, kept whole
        assert result.environment["slurm_job_id"] == job  # recorded by the ranks, in the job
        assert result.environment["slurm_step_id"] == "0"  # its one srun step
        assert result.metrics["measured_steps"] > 0
    # the ranks took their ranks from Slurm: both ranks of the DDP point wrote their events
    ddp = next(r for r in stored if r.config["workers"] == 2)
    points = [r for r in map(json.loads, run.stdout.splitlines()) if r["kind"] == "point"]
    (two,) = [p for p in points if p["workers"] == 2]
    assert two["speedup"] is not None  # over the torch-single point, as in a local study
    assert sorted(p.name for p in (results / ddp.run_id).glob("events.rank*")) == [
        "events.rank0.jsonl",
        "events.rank1.jsonl",
    ]
    listing = cli("ls", "runs", "--results", str(results), env=slurm)
    assert listing.returncode == 0 and listing.stdout.count(" ok ") == 3, listing.stdout


def test_inside_an_allocation_the_run_is_an_srun_step(tmp_path: Path, slurm):
    """salloc gives an allocation; dlscale in it (slurm_mode = auto) runs srun there."""
    results = tmp_path / "res"
    run = subprocess.run(
        [
            "salloc", "--ntasks=2", "--job-name=dlscale-test-salloc",
            sys.executable, "-m", "dlscale", "run", "--backend", "torch-ddp", "--workers", "2",
            "--model", "tiny", "--dataset", "digits", "--steps", "4", "--windows", "1",
            "--repeats", "1", "--set", "machine_reference=false", "--launcher", "slurm",
            "--json", "--results", str(results),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **slurm},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (result,) = RunStore(results).results()
    assert result.status == "completed", result.error
    run_dir = results / result.run_id
    assert not (run_dir / "job.sbatch").exists()  # a step of salloc's job, not a new job
    assert (run_dir / "launcher.stderr").exists()  # srun's own output
    spec = json.loads((run_dir / "spec.json").read_text())
    assert spec["cluster"]["hosts"] == []  # the ranks learnt their hosts from the step


def _wait_for_job(results: Path, proc: subprocess.Popen) -> str:
    end = time.monotonic() + 90
    while time.monotonic() < end:
        found = list(results.glob("*/slurm-job-id"))
        if found:
            return found[0].read_text().strip()
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    raise AssertionError("no job was submitted")


@contextlib.contextmanager
def _running_job(results: Path, env: dict[str, str]):
    """A long 2-worker sbatch run, once its job runs and both ranks started: (dlscale, job)."""
    proc = start_long_run(results, 300, extra=("--launcher", "slurm"), env=env)
    pids: dict[int, int] = {}
    try:
        job = _wait_for_job(results, proc)
        pids = wait_for_pids(results, ranks=2, proc=proc)
        yield proc, job
    finally:
        kill_all(pids.values(), proc)


def test_a_job_cancelled_from_outside_is_recorded_cancelled(tmp_path: Path, slurm):
    env = {**os.environ, **slurm}
    with _running_job(tmp_path, env) as (proc, job):
        subprocess.run(["scancel", job], check=True, env=env)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 1, err
        record = json.loads(out.strip().splitlines()[-1])
        assert record["status"] == "failed"
        assert f"Slurm job {job} ended CANCELLED" in record["error"], record
        assert "Traceback" not in err
        (result,) = RunStore(tmp_path).results()
        assert result.status == "failed"
        assert _final_state(job, slurm) == "CANCELLED"
        assert not processes_naming(tmp_path)


def test_stopping_dlscale_cancels_its_job(tmp_path: Path, slurm):
    env = {**os.environ, **slurm}
    with _running_job(tmp_path, env) as (proc, job):
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
        assert proc.returncode != 0
        assert _final_state(job, slurm) == "CANCELLED"
        end = time.monotonic() + 30
        while processes_naming(tmp_path) and time.monotonic() < end:
            time.sleep(0.2)
        assert not processes_naming(tmp_path)


def _ls_runs(results: Path, env: dict[str, str]) -> str:
    listing = subprocess.run(
        [sys.executable, "-m", "dlscale", "ls", "runs", "--results", str(results)],
        capture_output=True, text=True, timeout=60, env={**os.environ, **env, "COLUMNS": "250"},
    )  # fmt: skip
    assert listing.returncode == 0, listing.stderr
    return listing.stdout


def test_a_study_submitted_without_waiting_records_its_results_from_its_jobs(
    tmp_path: Path, cli, slurm
):
    """wait = false: dlscale returns once every point is submitted; ls runs shows the jobs
    pending (held, so that no job can end before it is looked at); once released, each job's
    finishing step records its point, and the study then reads as one that waited (speedup
    over the 1-worker point)."""
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    results = tmp_path / "res"
    run = cli(
        "run", str(study), "--launcher", "slurm", "--set", "wait=false", "--json",
        "--set", "slurm_args=--hold", "--results", str(results), env=slurm,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    submitted = [r for r in map(json.loads, run.stdout.splitlines()) if r["kind"] == "submitted"]
    assert len(submitted) == 3 and not list(results.glob("*/result.json"))
    assert all(re.fullmatch(r"Slurm job \d+ PENDING", s["detail"]) for s in submitted)
    listing = _ls_runs(results, slurm)
    assert "submitted, no result yet (3)" in listing and "scancel" in listing
    assert listing.count(" pending ") == 3, listing
    jobs = [p.read_text().strip() for p in results.glob("*/slurm-job-id")]
    subprocess.run(["scontrol", "release", *jobs], check=True, env={**os.environ, **slurm})
    end = time.monotonic() + 240
    while len(list(results.glob("*/result.json"))) < 3 and time.monotonic() < end:
        time.sleep(1)
    stored = RunStore(results).results()
    assert [r.status for r in stored] == ["completed"] * 3, [r.error for r in stored]
    for result in stored:
        run_dir = results / result.run_id
        assert "-m dlscale.finish" in (run_dir / "job.sbatch").read_text()
        job = (run_dir / "slurm-job-id").read_text().strip()
        assert _final_state(job, slurm) == "COMPLETED"
        assert result.metrics["measured_steps"] > 0 and result.duration_s > 0
    listing = _ls_runs(results, slurm)
    assert listing.count(" ok ") == 3 and "no result yet" not in listing, listing
    assert "1.00x*" in listing  # speedups over the torch-single point, as in a local study


def test_a_submitted_point_is_not_run_again_while_its_job_runs_and_a_cancel_is_recorded(
    tmp_path: Path, cli, slurm
):
    """The job is held (pending until cancelled), so the second run meets it live."""
    flags = ("--backend", "torch-ddp", "--workers", "2", "--model", "tiny", "--dataset", "digits",
             "--steps", "2000", "--windows", "2", "--repeats", "1", "--launcher", "slurm",
             "--set", "wait=false", "--set", "machine_reference=false",
             "--set", "slurm_args=--hold", "--results", str(tmp_path))  # fmt: skip
    first = cli("run", *flags, env=slurm)
    assert first.returncode == 0, first.stderr
    (job_file,) = tmp_path.glob("*/slurm-job-id")
    job = job_file.read_text().strip()
    again = cli("run", *flags, "--force", env=slurm)  # even --force leaves a live job alone
    assert again.returncode == 0, again.stderr
    assert f"Slurm job {job}" in again.stderr and "not run again while it is" in again.stderr
    assert list(tmp_path.glob("*/slurm-job-id")) == [job_file]
    assert job_file.read_text().strip() == job
    subprocess.run(["scancel", job], check=True, env={**os.environ, **slurm})
    end = time.monotonic() + 60
    while _job_state(job, slurm) not in ("CANCELLED", "COMPLETED") and time.monotonic() < end:
        time.sleep(0.5)
    listing = _ls_runs(tmp_path, slurm)  # records the job that ended without its result
    assert "FAILED" in listing and "no result yet" not in listing, listing
    (result,) = RunStore(tmp_path).results()
    assert result.status == "failed"
    said = rf"Slurm job {job} ended CANCELLED \(ExitCode \d+:\d+\) before it recorded its result"
    assert re.fullmatch(said, result.error), result.error
