"""``--launcher slurm``: the ranks as the tasks of a Slurm job step (``srun``), started from
inside an allocation or submitted as a batch job (``sbatch``) and polled.

``slurm_mode``: ``srun`` runs ``srun --ntasks N ... python -P -m dlscale.worker spec.json`` and
watches it like any local command (inside ``salloc``/an sbatch script it is a step of that
allocation; elsewhere srun asks for one and waits for it); ``sbatch`` writes the batch script
into the run's directory (kept there: ``job.sbatch``), submits it, and polls the job with
``scontrol`` until it ends; ``auto`` (the default) is ``srun`` inside an allocation
(``SLURM_JOB_ID`` set) and ``sbatch`` outside one. A job that fails, is cancelled, times out or
loses its node is recorded as a failed run saying so; stopping dlscale (Ctrl-C, SIGTERM)
cancels the job. With ``wait = false`` (sbatch only) dlscale submits every point and returns:
each batch script ends with a finishing step (``python -m dlscale.finish``) that records the
point's result, ``dlscale ls runs`` shows the jobs still pending or running, and a job that
ended without its finishing step is recorded as failed from Slurm's word (:meth:`submitted`).

Every rank takes its rank from SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS and its peers' hosts
from the step's node list (:func:`slurm_hosts`, Slurm's block distribution), so backends that
need every rank's address (TF_CONFIG, DMLC_*, Horovod's rendezvous) run across nodes too; the
ports are reserved on the submitting machine. The run's directory must be on a file system the
nodes share, and the workers' interpreter at the same path there. Under ``--device cuda`` each
task gets its own GPU (``--gpus-per-task=1``, which binds it: :mod:`dlscale.runtime.gpus`; a
rank that sees none fails naming its host). The plan is made from the compute nodes, never from
this machine (:mod:`dlscale.launchers.slurm_nodes`): the job asks ``--nodes`` (as many as the
point needs, the 1-worker baseline one), each task ``--cpus-per-task`` = ``threads_per_worker``
(a study plans it as a node's CPUs over the ranks on the fullest node), and ``--time`` =
``timeout_s`` rounded up to minutes; the run's timeout counts from the moment the job runs, not
while it waits in the queue.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from dlscale.contract.errors import UserError
from dlscale.contract.files import read_small_file
from dlscale.contract.layout import Addresses
from dlscale.contract.nodes import NodeFacts
from dlscale.contract.numbers import whole_number
from dlscale.contract.run_config import RunConfig
from dlscale.launchers.base import (
    Launcher,
    LaunchPlan,
    PlanEntry,
    Running,
    Submitted,
    common_env,
    output_text,
    worker_command,
    write_files,
)
from dlscale.launchers.local import reserved_ports
from dlscale.launchers.one_job import StudyJob
from dlscale.launchers.options import SlurmOptions
from dlscale.launchers.slurm_controller import START, controller_problem, said
from dlscale.launchers.slurm_job import QUEUED_STATES, SlurmJob
from dlscale.launchers.slurm_nodes import (
    check_gpus,
    gpus_per_task,
    node_facts,
    one_line_each,
    srun_on_each_node,
    users_options,
)
from dlscale.launchers.slurm_place import (
    allocation_nodes,
    by_hostfile,
    placed_lines,
    placement_files,
    placement_lines,
    slurm_hosts,
    step_arguments,
)
from dlscale.runtime.gpus import BOUND_ENV
from dlscale.runtime.slurm_jobs import RUNNING_STATES

RANK_VARS = "SLURM_PROCID,SLURM_LOCALID,SLURM_NTASKS"
INSTALL = "install Slurm's client commands (Debian: scripts/install-slurm.sh)"
SRUN_KILLED = re.compile(r"^srun: error: \S+: tasks? (\d+)(?:-\d+)?: Killed", re.M)


def slurm_mode(config: RunConfig, environ: dict[str, str] | None = None) -> str:
    """How a point runs: ``srun`` or ``sbatch``. ``study`` is always srun: its points run only
    as steps of the study's own job (:mod:`dlscale.launchers.slurm_study`; a point run on its
    own, e.g. by microbench, is an srun that asks for its allocation). ``auto`` is srun inside
    an allocation, else sbatch."""
    mode = config.typed(SlurmOptions).slurm_mode
    if mode == "study":
        return "srun"
    if mode != "auto":
        return mode
    return "srun" if "SLURM_JOB_ID" in (os.environ if environ is None else environ) else "sbatch"


def job_arguments(
    config: RunConfig, threads: int, name: str, size: tuple[str, ...]
) -> tuple[str, ...]:
    """The allocation's options, the same for srun and sbatch but for its ``size`` (nodes and
    tasks: :mod:`dlscale.launchers.slurm_place`)."""
    args = [
        f"--job-name={name}",
        *size,
        f"--cpus-per-task={threads}",
        f"--time={math.ceil(config.timeout_s / 60)}",
    ]
    if config.device == "cuda":  # each task its own GPUs, bound (CUDA_VISIBLE_DEVICES per task)
        args.append(f"--gpus-per-task={gpus_per_task(config)}")
    return tuple(args + users_options(config.typed(SlurmOptions)))


def batch_script(
    args: tuple[str, ...],
    env: dict[str, str],
    worker: tuple[str, ...],
    out: Path,
    err: Path,
    finisher: tuple[str, ...] | None = None,
    *,
    place: list[str] | None = None,
    step_args: tuple[str, ...] = (),
) -> str:
    """The batch job: its allocation, the run's variables, one srun step of every rank (where
    ``place``'s shell lines put them, with ``step_args``); with a ``finisher`` (a detached
    point), then the step that records the point's result, given the ranks' exit code and
    the time they started."""
    lines = ["#!/bin/bash", "# written by dlscale (--launcher slurm, slurm_mode = sbatch)"]
    lines += [f"#SBATCH {shlex.quote(arg)}" for arg in args]  # sbatch unquotes these lines
    lines += [f"#SBATCH {arg}" for arg in one_line_each([f"--output={out}", f"--error={err}"])]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())]
    lines += place or []
    step = ("srun", *step_args, "--kill-on-bad-exit=1", "--export=ALL", *worker)
    if finisher is None:
        lines.append(shlex.join(("exec", *step)))
    else:
        lines.append("started=$(date +%s.%N)")
        lines.append(shlex.join(step))
        lines.append("code=$?")
        lines.append(f'{shlex.join(finisher)} "$code" "$started"')
        lines.append('exit "$code"')
    return "\n".join(lines) + "\n"


class SlurmLauncher(Launcher):
    def check(self, python: str) -> None:
        for tool in ("srun", "sbatch", "scontrol", "scancel"):
            if shutil.which(tool) is None:
                raise UserError(f"--launcher slurm needs {tool}, which is not installed: {INSTALL}")

    def plan(
        self,
        config: RunConfig,
        spec_path: Path,
        python: str,
        *,
        ports: tuple[int, ...] | None = None,
        cores: int | None = None,
    ) -> LaunchPlan:
        layout = config.layout()
        spec_path = spec_path.absolute()
        run_dir = spec_path.parent
        threads = config.threads_per_worker or 1
        # hosts: where Slurm places the tasks, which each rank reads (slurm_hosts)
        addresses = Addresses(hosts=(), ports=reserved_ports(config, ports))
        env = {**common_env(config, spec_path, threads), "DLSCALE_RANK_VARS": RANK_VARS}
        if config.device == "cuda":
            env[BOUND_ENV] = "1"  # --gpus-per-task=1 bound each task to its own GPU
        facts, warnings = self._placed(config)
        name = f"dlscale-{run_dir.name}"
        worker = worker_command(python, spec_path)
        files = placement_files(facts, run_dir)
        if slurm_mode(config) == "srun":
            tasks = step_arguments(facts, layout.size) or [f"--ntasks={layout.size}"]
            args = job_arguments(config, threads, name, (f"--nodes={facts.nodes}", *tasks))
            srun = ("srun", *args, "--kill-on-bad-exit=1", "--export=ALL", *worker)
            place = placement_lines(facts, run_dir)
            entry = PlanEntry(
                ranks=range(layout.size),
                argv=("bash", "-c", "\n".join([*place, 'exec "$@"']), "dlscale-step", *srun)
                if place
                else srun,
                env=env,
                stdout=run_dir / "launcher.stdout",
                stderr=run_dir / "launcher.stderr",
                files=files,
            )
        else:
            args = job_arguments(config, threads, name, tuple(allocation_nodes(facts, layout.size)))
            out, err = run_dir / "slurm.stdout", run_dir / "slurm.stderr"
            script = run_dir / "job.sbatch"
            finisher = None
            if self.detaches(config):  # this dlscale's interpreter records the result
                finisher = worker_command(sys.executable, spec_path, "dlscale.finish")
            script_text = batch_script(
                args, env, worker, out, err, finisher,
                place=placement_lines(facts, run_dir),
                step_args=(*step_arguments(facts, layout.size), f"--cpus-per-task={threads}"),
            )  # fmt: skip
            entry = PlanEntry(
                ranks=range(layout.size),
                argv=("sbatch", "--parsable", str(script)),
                env={},
                stdout=out,
                stderr=err,
                files={**files, script: script_text},
            )
        return LaunchPlan(
            entries=(entry,),
            layout=layout,
            addresses=addresses,
            threads_per_worker=threads,
            nodes=facts.describe(layout.size),
            placed=placed_lines(config, facts),
            warnings=warnings,
        )

    def _placed(self, config: RunConfig) -> tuple[NodeFacts, tuple[str, ...]]:
        """The point's nodes and each rank's node; an srun outside an allocation has no
        nodes' names to place by until it runs: Slurm's block order there, said."""
        facts = self.node_facts(config)
        options = config.typed(SlurmOptions)
        inside = "SLURM_JOB_ID" in os.environ or options.slurm_mode == "study"
        if not by_hostfile(facts) or slurm_mode(config) != "srun" or inside:
            return facts, ()
        block = dataclasses.replace(facts, node_of=None)
        return block, (
            f"placement = {options.placement} needs the allocation's nodes, which an srun "
            "outside one gets only as it starts: Slurm places the ranks in block order (use "
            "slurm_mode = sbatch, or run inside salloc)",
        )

    def start(self, plan: LaunchPlan) -> Running:
        (entry,) = plan.entries
        if entry.argv[0] != "sbatch":
            return super().start(plan)
        write_files(plan)
        done = subprocess.run(entry.argv, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise UserError(f"sbatch refused the job: {said(done.stderr or done.stdout)}")
        job = done.stdout.strip().split(";")[0]
        (entry.stdout.parent / "slurm-job-id").write_text(job + "\n")
        return SlurmJob(job)

    def blame(self, entry: PlanEntry) -> int | None:
        """The task srun reports killed (``srun: error: node2: task 1: Killed``): its peers
        fail after it, on their lost link. Else ``None``: the ranks' events say which failed
        first."""
        found = SRUN_KILLED.search(output_text(entry))
        return int(found.group(1)) if found else None

    def check_ready(self) -> None:
        problem = controller_problem(dict(os.environ))
        if problem is not None:
            raise UserError(f"--launcher slurm: {problem}; {START}")

    def hosts(self, size: int) -> tuple[str, ...]:
        return slurm_hosts(dict(os.environ), size)

    def detaches(self, config: RunConfig) -> bool:
        return not config.typed(SlurmOptions).wait and slurm_mode(config) == "sbatch"

    def node_facts(self, config: RunConfig, cores: int | None = None) -> NodeFacts:
        """The compute nodes, given or asked of Slurm (:mod:`dlscale.launchers.slurm_nodes`);
        ``cores`` (this machine's) plays no part."""
        return node_facts(config)

    def on_each_node(self, config: RunConfig, argv: tuple[str, ...]) -> tuple[str, ...]:
        return srun_on_each_node(config, argv)

    def study_job(self, points: tuple[RunConfig, ...]) -> StudyJob | None:
        from dlscale.launchers.slurm_study import SlurmStudyJob, in_one_job

        return SlurmStudyJob() if in_one_job(points) else None

    def unfit(self, config: RunConfig) -> str | None:
        if config.device != "cuda":
            return None
        facts = self.node_facts(config)  # the nodes unknown: that error, not a skipped point
        try:
            check_gpus(config, facts)
        except UserError as problem:
            return str(problem)
        return None

    def check_point(self, config: RunConfig) -> None:
        check_gpus(config, self.node_facts(config))
        options = config.typed(SlurmOptions)
        if options.wait or options.slurm_mode == "study":  # wait: of the study's one job
            return
        if slurm_mode(config) != "sbatch":
            raise UserError(
                "wait = false submits batch jobs and returns, and this point would run as an "
                "srun step of the allocation dlscale runs in: set slurm_mode = sbatch, or "
                "leave wait = true"
            )
        never = sorted({p.role for p in config.layout().processes if not p.exits})
        if never:
            raise UserError(
                f"wait = false cannot run {config.backend}: its {', '.join(never)} processes "
                "never exit by themselves, and only a watching dlscale stops them once "
                "training ended (the job would run until its time limit); leave wait = true"
            )

    def submitted(self, run_dir: Path, config: RunConfig) -> Submitted | None:
        try:
            job = read_small_file(run_dir / "slurm-job-id", 64).decode("ascii", "replace").strip()
        except OSError:
            return None  # never submitted (sbatch refused it), or not detached
        if not self.detaches(config) or whole_number(job) is None:
            return None
        polled = SlurmJob(job)
        state, _ = polled.state()
        hint = f"scancel {job} stops it"
        if state in QUEUED_STATES:
            return Submitted(state="pending", words=f"Slurm job {job} {state}", stop_hint=hint)
        if state in RUNNING_STATES:
            return Submitted(state="running", words=f"Slurm job {job} {state}", stop_hint=hint)
        words = polled.describe(0) or f"Slurm job {job} ended {state}"
        if state == "COMPLETED":
            words += ", without recording its result (see slurm.stderr in the run's directory)"
        else:
            words += " before it recorded its result"
        (code,) = polled.poll()
        return Submitted(state="ended", words=words, code=1 if code in (None, 0) else code)
