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
JOB_ID = re.compile(r"[0-9]{1,20}")


def this_job() -> str | None:
    """The Slurm job this process runs in (``SLURM_JOB_ID``, digits only), else ``None``."""
    job = os.environ.get("SLURM_JOB_ID", "")
    return job if JOB_ID.fullmatch(job) else None


def job_ended(job: str) -> bool:
    """Whether Slurm says ``job`` ended (or no longer knows it: purged after ``MinJobAge``).
    False while it may run, and whenever Slurm cannot be asked (no scontrol, no answer): then
    only the job's own host can tell."""
    if not JOB_ID.fullmatch(job) or shutil.which("scontrol") is None:
        return False
    try:
        done = subprocess.run(
            ["scontrol", "show", "job", "-o", job],
            capture_output=True,
            text=True,
            timeout=ASK_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    if done.returncode != 0:
        return "Invalid job id" in done.stderr
    state = re.search(r"\bJobState=(\S+)", done.stdout)
    return state is not None and state.group(1) not in RUNNING_STATES
