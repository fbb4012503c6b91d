"""Whether a Slurm job still runs, asked of slurmctld: what a process on one host can know of a
process that ran on another inside a job (a lock left by a dlscale killed on a compute node is
stale once its job ended, whichever node reads it). The launcher polls its own jobs with the
same states (:mod:`dlscale.launchers.slurm`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

RUNNING_STATES = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}
    | {"SIGNALING", "STAGE_OUT", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "STOPPED"}
)
"""A job in any of these states may still have processes on its nodes."""
ASK_TIMEOUT_S = 10.0
"""The longest one scontrol/scancel call may hold its caller (the watch loop, a lock check)."""
JOB_ID = re.compile(r"[0-9]{1,20}")


def this_job() -> str | None:
    """The Slurm job this process runs in (``SLURM_JOB_ID``, digits only), else ``None``."""
    job = os.environ.get("SLURM_JOB_ID", "")
    return job if JOB_ID.fullmatch(job) else None


GONE = ("UNKNOWN", "1:0")
"""What :func:`show_job` says of a job slurmctld no longer knows (purged after ``MinJobAge``)."""


def show_job(job: str) -> tuple[str, str] | None:
    """``(JobState, ExitCode)`` of ``job`` as ``scontrol show job`` says them; :data:`GONE`
    when slurmctld no longer knows it; ``None`` when it cannot be asked now (no scontrol, no
    answer, slurmctld busy or restarting): ask again later."""
    if not JOB_ID.fullmatch(job) or shutil.which("scontrol") is None:
        return None
    try:
        done = subprocess.run(
            ["scontrol", "show", "job", "-o", job],
            capture_output=True,
            text=True,
            timeout=ASK_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return GONE if "Invalid job id" in done.stderr else None
    fields = dict(re.findall(r"(\w+)=(\S*)", done.stdout))
    return fields.get("JobState", "UNKNOWN"), fields.get("ExitCode", "0:0")


def job_ended(job: str) -> bool:
    """Whether Slurm says ``job`` ended (or no longer knows it). False while it may run, and
    whenever Slurm cannot be asked: then only the job's own host can tell."""
    said = show_job(job)
    return said is not None and said[0] not in RUNNING_STATES
