"""``dlscale run`` of a study in one job of the launcher's scheduler (Slurm's ``slurm_mode =
study``, from a login node): submit the job that runs the study, watch it from here, print the
study's own output at the end, through :class:`~dlscale.launchers.one_job.StudyJob` alone (the
launcher says how the job is made: :mod:`dlscale.launchers.slurm_study`)."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

from dlscale.cli.tables import console, markup
from dlscale.config.study import Study
from dlscale.contract.files import read_small_file, write_atomic
from dlscale.contract.launchers import LAUNCHERS
from dlscale.contract.run_config import RunConfig
from dlscale.contract.text import shell_command, visible
from dlscale.launchers.one_job import JOB_ID_MARK, StudyJob
from dlscale.store.results import RunStore


def job_name(study: str) -> str:
    """The study's name as a job's and a file's name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", study or "study")[:64]


def study_job(points: tuple[RunConfig, ...]) -> StudyJob | None:
    """How the study runs as one job, if a launcher of its points runs it so."""
    for name in dict.fromkeys(point.launcher for point in points):
        if (job := LAUNCHERS.get(name).create().study_job(points)) is not None:
            return job
    return None


def run_study_job(study: Study, one_job: StudyJob, results: Path, command: list[str]) -> int:
    """Submit the study's job and, unless ``wait = false``, watch it to its end: 0 when every
    point completed, else 1 with how to run the rest."""
    err = console(stderr=True)

    def say(text: str) -> None:
        err.print(visible(f"dlscale: {markup(text)}"), highlight=False, soft_wrap=True)

    name = job_name(study.name)
    folder = results / ".slurm"
    out = folder / f"study-{name}-{JOB_ID_MARK}.out"
    script = folder / f"study-{name}.sbatch"
    job = running_job(one_job, folder / f"study-{name}.job")
    if job is not None:  # an earlier dlscale submitted it and was killed, or its session ended
        output = Path(str(out).replace(JOB_ID_MARK, job))
        say(
            f"the study {name} already runs as Slurm job {job} (submitted earlier; its output "
            f"{output}): watching it (to run a changed study: scancel {job}, then run again)"
        )
    else:
        text = one_job.script(study.points, command, Path.cwd(), out, name)
        results.mkdir(parents=True, exist_ok=True)
        job = one_job.submit(script, text)
        write_atomic(folder / f"study-{name}.job", job + "\n")
        output = Path(str(out).replace(JOB_ID_MARK, job))
        say(f"the study runs as Slurm job {job} (batch script {script}; its output {output})")
    if not one_job.waits(study.points):
        say(f"submitted; dlscale ls runs shows the points as they complete; scancel {job} stops it")
        return 0
    store = RunStore(results)
    wanted = {
        dataclasses.replace(point, repeat_id=point.repeat_id + number).run_id()
        for point in study.points
        for number in range(study.repeats.repeats)
    }

    def completed() -> int:  # the study's own points only, not the whole store each time
        return sum(1 for run_id in wanted if store.completed(run_id) is not None)

    state = one_job.watch(job, completed, len(wanted), say)
    if output.is_file():  # the study's own table and notes, as a run here prints them
        sys.stdout.write(output.read_text(errors="replace"))
        sys.stdout.flush()
    done = completed()
    if done >= len(wanted):
        return 0
    say(
        f"Slurm job {job} ended {state} with {done} of {len(wanted)} points completed; the "
        "same command runs the rest in a new job (completed points are kept)"
    )
    return 1


def running_job(one_job: StudyJob, record: Path) -> str | None:
    """The study's job recorded in ``record`` while it may still run (queued, running);
    ``None`` when there is none, it ended, or the record holds no job id."""
    try:
        job = read_small_file(record, 64).decode("ascii", "replace").strip()
    except OSError:
        return None
    return job if one_job.may_run(job) else None


def study_job_lines(one_job: StudyJob, points: Any, results: Path, study: str) -> None:
    """Print the study's one batch script, whole (`dlscale.cli.dry_run.file_lines`), and the
    command that submits it (the points' own plans, srun steps, follow it)."""
    from dlscale.cli.dry_run import file_lines

    dry = ("--dry-run", "--verbose")
    command = ["dlscale", "run", *(word for word in sys.argv[2:] if word not in dry)]
    name = job_name(study)
    out = results / ".slurm" / f"study-{name}-{JOB_ID_MARK}.out"
    script = results / ".slurm" / f"study-{name}.sbatch"
    print(visible(f"# the study runs as one Slurm job, this batch script ({script}):"))
    for line in file_lines(script, one_job.script(points, command, Path.cwd(), out, name)):
        print(line)
    print(visible(shell_command(one_job.submit_argv(script))))
    print("# in which each point runs as a step:")
