"""A submitted Slurm batch job as one plan entry (:class:`~dlscale.launchers.base.Running`):
its state polled from slurmctld (``scontrol show job``, at most every :data:`POLL_S`), its
exit code, how it ended in words, and ``scancel`` to stop it."""

from __future__ import annotations

import contextlib
import math
import subprocess
import time

from dlscale.contract.numbers import whole_number
from dlscale.launchers.base import Running
from dlscale.runtime.slurm_jobs import ASK_TIMEOUT_S, GONE, RUNNING_STATES, show_job

POLL_S = 1.0
"""How often a submitted job's state is asked for (scontrol is a call to slurmctld)."""
STOP_WAIT_S = 30.0
QUEUED_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "SUSPENDED"})
FAILED_CODES = {"TIMEOUT": 124, "OUT_OF_MEMORY": 137, "CANCELLED": 143}
"""An exit code for a job that ended without one of its own (as a shell would report it)."""


class SlurmJob(Running):
    """A submitted batch job as one plan entry: its state from ``scontrol show job``."""

    def __init__(self, job: str) -> None:
        self.job = job
        self._state: tuple[str, str] = ("PENDING", "0:0")
        self._asked = -math.inf
        self.gone = False

    def state(self) -> tuple[str, str]:
        """(JobState, ExitCode), asked at most every :data:`POLL_S`."""
        if time.monotonic() - self._asked >= POLL_S and self._state[0] in RUNNING_STATES:
            self._asked = time.monotonic()
            self._state = self._ask()
        return self._state

    def _ask(self) -> tuple[str, str]:
        said = show_job(self.job)
        if said is None:  # slurmctld slow, busy or away: ask again later
            return self._state
        self.gone = said is GONE
        return said

    def queued(self) -> bool:
        return self.state()[0] in QUEUED_STATES

    def poll(self) -> list[int | None]:
        state, exit_code = self.state()
        if state in RUNNING_STATES:
            return [None]
        if state == "COMPLETED":
            return [0]
        code, signal = (whole_number(part, high=255) for part in exit_code.partition(":")[::2])
        if code:
            return [code]
        return [FAILED_CODES.get(state, 128 + signal if signal else 1)]

    def describe(self, index: int) -> str | None:
        state, exit_code = self.state()
        if self.gone:
            return f"Slurm job {self.job} is no longer known to slurmctld (purged unseen)"
        return f"Slurm job {self.job} ended {state} (ExitCode {exit_code})"

    def stop(self, entries: list[int] | None = None) -> None:
        if self.state()[0] not in RUNNING_STATES:
            return
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["scancel", self.job], capture_output=True, timeout=ASK_TIMEOUT_S)
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline and self._ask()[0] in RUNNING_STATES:
            time.sleep(POLL_S / 2)
        self._state = self._ask()
