"""A whole study as one job of a launcher's scheduler (Slurm's ``slurm_mode = study``): what
``dlscale run`` on a login node needs of it, whichever scheduler it is. The launcher says
whether a study runs so (:meth:`dlscale.launchers.base.Launcher.study_job`); ``cli/study_job.py``
submits the job, watches it and prints its output through this interface alone."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

from dlscale.contract.run_config import RunConfig

JOB_ID_MARK = "%j"
"""Where the job's id goes in its output file's name (the scheduler's own pattern)."""


class StudyJob(ABC):
    @abstractmethod
    def script(
        self, points: tuple[RunConfig, ...], command: list[str], workdir: Path, out: Path, name: str
    ) -> str:
        """The job's batch script: an allocation holding the study's largest point, then
        ``command`` (the same ``dlscale run``) in ``workdir``, its output to ``out``."""

    @abstractmethod
    def submit(self, script: Path, text: str) -> str:
        """Write the batch script and submit it; the job's id."""

    @abstractmethod
    def submit_argv(self, script: Path) -> list[str]:
        """The command that submits the batch script ``script`` (what ``submit`` runs, and
        what a dry run shows after the script)."""

    @abstractmethod
    def waits(self, points: tuple[RunConfig, ...]) -> bool:
        """Whether dlscale watches the job to its end (else it submits and returns)."""

    @abstractmethod
    def may_run(self, job: str) -> bool:
        """Whether ``job`` (an id read back from a file: checked here) is queued or running."""

    @abstractmethod
    def watch(
        self, job: str, completed: Callable[[], int], total: int, say: Callable[[str], None]
    ) -> str:
        """Wait for ``job`` to end, saying its state and the points completed as they change;
        its final state in the scheduler's word. Stopping dlscale cancels the job."""
