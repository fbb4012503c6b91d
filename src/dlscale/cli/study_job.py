"""``dlscale run`` of a study in one Slurm job (``slurm_mode = study``, from a login node):
submit the job that runs the study, watch it from here, print the study's own output at the
end (:mod:`dlscale.launchers.slurm_study` says how the job is made)."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

from dlscale.cli.tables import console, markup
from dlscale.config.study import Study
from dlscale.contract.text import visible
from dlscale.launchers.options import SlurmOptions
from dlscale.launchers.slurm import SlurmJob
from dlscale.launchers.slurm_study import study_script, submit, watch
from dlscale.store.results import RunStore


def job_name(study: str) -> str:
    """The study's name as a job's and a file's name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", study or "study")[:64]


def run_study_job(study: Study, results: Path, command: list[str]) -> int:
    """Submit the study's job and, unless ``wait = false``, watch it to its end: 0 when every
    point completed, else 1 with how to run the rest."""
    err = console(stderr=True)

    def say(text: str) -> None:
        err.print(visible(f"dlscale: {markup(text)}"), highlight=False, soft_wrap=True)

    name = job_name(study.name)
    folder = results / ".slurm"
    out = folder / f"study-{name}-%j.out"
    text = study_script(study.points, command, Path.cwd(), out, name)
    results.mkdir(parents=True, exist_ok=True)
    script = folder / f"study-{name}.sbatch"
    job = submit(script, text)
    output = Path(str(out).replace("%j", job))
    say(f"the study runs as Slurm job {job} (batch script {script}; its output {output})")
    if not study.points[0].typed(SlurmOptions).wait:
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

    state = watch(SlurmJob(job), completed, len(wanted), say)
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


def study_job_lines(points: Any, results: Path, study: str) -> None:
    """Print the study's one batch script (the points' own plans, srun steps, follow it)."""
    command = ["dlscale", "run", *(word for word in sys.argv[2:] if word != "--dry-run")]
    name = job_name(study)
    out = results / ".slurm" / f"study-{name}-%j.out"
    print("# the study runs as one Slurm job, this batch script:")
    for line in study_script(points, command, Path.cwd(), out, name).splitlines():
        print(visible(f"#   {line}"))
    print("# in which each point runs as a step:")
