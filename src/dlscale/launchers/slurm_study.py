"""``slurm_mode = "study"``: the whole study in one Slurm job, so the queue is waited once.

From a login node (no ``SLURM_JOB_ID``), ``dlscale run`` writes one batch script into the
results directory (``.slurm/study-NAME.sbatch``, kept) whose allocation holds the study's
largest point (``--nodes`` = the most nodes a point takes, whole nodes: ``--exclusive``, and
under ``--device cuda`` the nodes' GPUs), submits it and watches it: the batch script runs the
same ``dlscale run`` command inside the allocation, where ``study`` means ``srun`` (each point
an srun step, in the study's interleaved order), and the login node's dlscale says as the
points complete (from the shared results directory) and prints the study's own output at the
end. ``wait = false`` submits it and returns. A job that ends early (its time limit, a cancel,
a lost node) leaves every point it completed; the same command runs the rest in a new job (the
store's resume skips completed points). The job's time limit is the partition's default
unless ``slurm_args`` gives ``--time``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from dlscale.contract.errors import UserError
from dlscale.contract.run_config import RunConfig
from dlscale.launchers.one_job import StudyJob
from dlscale.launchers.options import SlurmOptions
from dlscale.launchers.slurm_controller import said
from dlscale.launchers.slurm_job import SlurmJob
from dlscale.launchers.slurm_nodes import node_facts, one_line_each, users_options
from dlscale.runtime.slurm_jobs import JOB_ID, RUNNING_STATES

WATCH_S = 5.0
"""How often the login node's dlscale looks at the job and the points completed."""


def in_one_job(points: tuple[RunConfig, ...], environ: dict[str, str] | None = None) -> bool:
    """Whether the study is to be submitted as one job from here: every point asks it and
    dlscale is not already inside an allocation (there, ``study`` runs each point as a step)."""
    environ = dict(os.environ) if environ is None else environ
    modes = {p.typed(SlurmOptions).slurm_mode if p.launcher == "slurm" else None for p in points}
    if "study" not in modes:
        return False
    if modes != {"study"}:
        raise UserError(
            "slurm_mode = study runs the whole study in one Slurm job: give it to every point "
            "(every point under --launcher slurm)"
        )
    return "SLURM_JOB_ID" not in environ


def study_script(
    points: tuple[RunConfig, ...], command: list[str], workdir: Path, out: Path, name: str
) -> str:
    """The batch script: an allocation holding the largest point, then ``command`` (a
    ``dlscale run`` under this interpreter) in ``workdir``."""
    facts = [node_facts(p) for p in points]
    nodes = max(f.nodes for f in facts)
    options = points[0].typed(SlurmOptions)
    args = [f"--job-name=dlscale-study-{name}", f"--nodes={nodes}", "--exclusive"]
    args += [f"--output={out}", f"--error={out}"]
    if any(p.device == "cuda" for p in points):
        args.append(f"--gpus-per-node={max(f.gpus or 0 for f in facts) or 1}")
    args = one_line_each(args + users_options(options))
    lines = ["#!/bin/bash", "# written by dlscale (slurm_mode = study): the whole study, one job"]
    lines += [f"#SBATCH {shlex.quote(arg)}" for arg in args]
    lines.append(shlex.join(("cd", str(workdir))))
    lines.append(shlex.join(("exec", sys.executable, "-m", "dlscale", *command[1:])))
    return "\n".join(lines) + "\n"


def submit_argv(script: Path) -> list[str]:
    return ["sbatch", "--parsable", str(script)]


def submit(script: Path, text: str) -> str:
    """Write the batch script and submit it; its job id."""
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(text)
    done = subprocess.run(submit_argv(script), capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise UserError(f"sbatch refused the study's job: {said(done.stderr or done.stdout)}")
    return done.stdout.strip().split(";")[0]


def watch(
    job: SlurmJob, completed: Callable[[], int], total: int, say: Callable[[str], None]
) -> str:
    """Wait for the job to end, saying its state and the points completed as they change;
    its final state. Stopping dlscale cancels the job (its completed points stay)."""
    said_last = ""
    try:
        while True:
            state, _ = job.state()
            words = f"Slurm job {job.job} {state}: {completed()} of {total} points completed"
            if words != said_last:
                say(words)
                said_last = words
            if state not in RUNNING_STATES:
                return state
            time.sleep(WATCH_S)
    except BaseException:
        job.stop()
        raise


class SlurmStudyJob(StudyJob):
    """The study as one Slurm batch job."""

    def script(
        self, points: tuple[RunConfig, ...], command: list[str], workdir: Path, out: Path, name: str
    ) -> str:
        return study_script(points, command, workdir, out, name)

    def submit(self, script: Path, text: str) -> str:
        return submit(script, text)

    def submit_argv(self, script: Path) -> list[str]:
        return submit_argv(script)

    def waits(self, points: tuple[RunConfig, ...]) -> bool:
        return bool(points[0].typed(SlurmOptions).wait)

    def may_run(self, job: str) -> bool:
        return JOB_ID.fullmatch(job) is not None and SlurmJob(job).state()[0] in RUNNING_STATES

    def watch(
        self, job: str, completed: Callable[[], int], total: int, say: Callable[[str], None]
    ) -> str:
        return watch(SlurmJob(job), completed, total, say)
