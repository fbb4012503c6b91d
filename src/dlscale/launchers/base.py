"""The launcher contract: a plan as data, then a watched run of it.

A plan entry is one command for a range of ranks: one entry per rank (``local``), or one for
all ranks (horovodrun, mpirun, torchrun, srun start every rank from one command). Which rank
failed is read from the per-rank event files, so it is named whichever launcher started it.

A launcher implements :meth:`Launcher.plan` (pure: printed by ``--dry-run``, unit-tested as
data) and may override :meth:`Launcher.start`, which by default runs each entry as a local
process (:mod:`dlscale.launchers.processes`). A submit-then-poll launcher (sbatch) overrides
``start`` to submit and returns a :class:`Running` whose ``poll`` asks the scheduler; the
watch loop (:mod:`dlscale.launchers.watch`) is the same for both.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dlscale.contract.files import read_tail
from dlscale.contract.layout import Addresses, ProcessLayout, usable_cores
from dlscale.contract.nodes import NodeFacts
from dlscale.contract.run_config import RunConfig
from dlscale.contract.weights_cache import CACHE_ENV
from dlscale.runtime.allocator import allocator_env
from dlscale.runtime.worker_path import worker_path_dir

if TYPE_CHECKING:
    from dlscale.launchers.one_job import StudyJob


@dataclass(frozen=True, kw_only=True)
class PlanEntry:
    ranks: range
    """The ranks this command starts."""
    argv: tuple[str, ...]
    env: dict[str, str]
    """Variables set for this command on top of the parent's environment."""
    stdout: Path
    stderr: Path
    files: dict[Path, str] = field(default_factory=dict)
    """Files the launcher writes before starting the command (a batch script), path -> text."""
    cpus: tuple[int, ...] = ()
    """The CPUs of this machine the command (and all it starts) may run on: an emulated node's
    share (:func:`dlscale.contract.layout.node_cpus`); empty: those dlscale may run on."""


class Setup(ABC):
    """Something on this machine a plan's commands need, made before they start and removed
    once they are all stopped (an emulated network: :mod:`dlscale.launchers.network`)."""

    @abstractmethod
    def describe(self) -> list[str]:
        """What making it does, one command or file per line (``--dry-run`` prints them)."""

    @abstractmethod
    def create(self) -> None:
        """Make it; on failure leave nothing behind and raise."""

    @abstractmethod
    def remove(self) -> None:
        """Remove it (keeping what it measured in the run's directory); safe to call twice."""


@dataclass(frozen=True, kw_only=True)
class LaunchPlan:
    entries: tuple[PlanEntry, ...]
    layout: ProcessLayout
    addresses: Addresses
    threads_per_worker: int
    warnings: tuple[str, ...] = ()
    setups: tuple[Setup, ...] = ()
    """Made before the entries start, removed after they stop (by the default ``start``)."""
    nodes: str = ""
    """The machines the plan was made for, where they are not this one (a dry run says it)."""
    placed: tuple[str, ...] = ()
    """Where each role's processes go on those machines, where a rule chose (a dry run says it)."""


@dataclass(frozen=True, kw_only=True)
class LaunchOutcome:
    ok: bool
    returncodes: dict[int, int | None]
    """Exit code of the command that started each rank (``None``: stopped by the launcher
    because its role never exits by itself)."""
    failed_rank: int | None = None
    reason: str | None = None
    stderr_tail: list[str] = field(default_factory=list)
    duration_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Submitted:
    """Where a point started by a launcher that detaches stands, while it has no result."""

    state: str
    """``pending`` (queued), ``running``, or ``ended`` (without writing its result)."""
    words: str
    """The scheduler's words: ``Slurm job 12 PENDING``, ``Slurm job 12 ended CANCELLED``."""
    stop_hint: str = ""
    """How to stop it: ``scancel 12``."""
    code: int | None = None
    """``ended``: the exit code the scheduler gives the job."""

    @property
    def ended(self) -> bool:
        return self.state == "ended"


class Running(ABC):
    """A started plan: one status per entry."""

    @abstractmethod
    def poll(self) -> list[int | None]:
        """Each entry's exit code, ``None`` while it runs (or is queued)."""

    @abstractmethod
    def stop(self, entries: list[int] | None = None) -> None:
        """Stop these entries (all when ``None``) and whatever they started; waits for them."""

    def queued(self) -> bool:
        """Whether the plan still waits for a scheduler to start it (the run's timeout counts
        from the moment it runs)."""
        return False

    def describe(self, index: int) -> str | None:
        """How entry ``index`` ended, in the launcher's words, when its exit code says too
        little (a Slurm job's state); ``None``: the exit code says it."""
        return None


class Launcher(ABC):
    @abstractmethod
    def plan(self, config: RunConfig, spec_path: Path, python: str) -> LaunchPlan:
        """Commands and environments for every rank; pure (no process is started)."""

    def check(self, python: str) -> None:
        """Before launch: raise :class:`~dlscale.contract.errors.UserError` naming what is missing
        (the tool, and the command that installs it); by default nothing is needed."""
        return None

    def check_ready(self) -> None:
        """Before a launch (not a dry run), once per launcher: raise
        :class:`~dlscale.contract.errors.UserError` when the launcher's scheduler cannot take work
        now (Slurm's controller unreachable), naming the fix; by default nothing to ask."""
        return None

    def blame(self, entry: PlanEntry) -> int | None:
        """The rank a failed one-command entry reports as the cause (mpirun and horovodrun
        print it); ``None``: unknown, and the watcher reads the per-rank events instead."""
        return None

    def node_facts(self, config: RunConfig, cores: int | None = None) -> NodeFacts:
        """The machines the point's processes run on, which its threads are planned from; by
        default this machine (``cores``: its usable cores, counted when not given)."""
        return NodeFacts(cpus=cores or usable_cores(), gpus=None, nodes=1, source="this machine")

    def study_job(self, points: tuple[RunConfig, ...]) -> StudyJob | None:
        """How the whole study runs as one job of this launcher's scheduler, submitted from
        here (Slurm's ``slurm_mode = study``); ``None``: each point is launched by itself."""
        return None

    def on_each_node(self, config: RunConfig, argv: tuple[str, ...]) -> tuple[str, ...]:
        """The command that runs ``argv`` once on each machine the point's ranks run on, its
        lines prefixed ``N: `` by machine where there are several (``dlscale doctor``); by
        default ``argv`` itself, here."""
        return argv

    def unfit(self, config: RunConfig) -> str | None:
        """Why the machines this launcher runs ``config`` on cannot hold it (a study skips such
        a point with the reason as its note); ``None``: they can, or it shows only at launch."""
        return None

    def check_point(self, config: RunConfig) -> None:
        """Before launch, for every point: raise :class:`~dlscale.contract.errors.UserError` when
        this machine cannot run the point's launcher options (an emulated network needs root)."""
        return None

    def start(self, plan: LaunchPlan) -> Running:
        """Start the plan's commands (after writing their ``files`` and making its
        ``setups``); by default each is a process on this machine."""
        from dlscale.launchers.processes import start_processes

        write_files(plan)
        made: list[Setup] = []
        try:
            for setup in plan.setups:
                made.append(setup)
                setup.create()
            running = start_processes(plan)
        except BaseException:
            for setup in reversed(made):
                setup.remove()
            raise
        return WithSetups(running, made) if made else running

    def detaches(self, config: RunConfig) -> bool:
        """Whether ``dlscale run`` returns as soon as this point is started (a submitted batch
        job), not waiting for it: its plan then records the point's result itself
        (``python -m dlscale.finish``), and :meth:`submitted` says where it stands."""
        return False

    def submitted(self, run_dir: Path, config: RunConfig) -> Submitted | None:
        """For a point this launcher started detached that has no result yet: where it stands
        (asked of the scheduler); ``None``: the point was not started detached."""
        return None

    def hosts(self, size: int) -> tuple[str, ...]:
        """In a worker whose spec has no hosts (the scheduler placed the ranks): each rank's
        host, from what the launcher's tool told this process."""
        raise NotImplementedError(f"{type(self).__name__} plans every rank's host")


class WithSetups(Running):
    """A started plan whose setups are removed once every command is stopped."""

    def __init__(self, running: Running, setups: list[Setup]) -> None:
        self.running = running
        self.setups = setups

    def poll(self) -> list[int | None]:
        return self.running.poll()

    def stop(self, entries: list[int] | None = None) -> None:
        self.running.stop(entries)
        if entries is None:
            for setup in reversed(self.setups):
                setup.remove()

    def queued(self) -> bool:
        return self.running.queued()

    def describe(self, index: int) -> str | None:
        return self.running.describe(index)


def write_files(plan: LaunchPlan) -> None:
    """Write every entry's ``files`` (a batch script) before its command starts."""
    for entry in plan.entries:
        for path, text in entry.files.items():
            path.write_text(text)


OUTPUT_BYTES = 4 * 2**20
"""The most of a command's output a launcher's blame reads, from each file's end."""


def output_text(entry: PlanEntry) -> str:
    """What an entry's command printed (stderr, then stdout; the last :data:`OUTPUT_BYTES`
    of each), for a launcher's blame."""
    text = ""
    for path in (entry.stderr, entry.stdout):
        with contextlib.suppress(OSError):
            text += read_tail(path, OUTPUT_BYTES)[0].decode("utf-8", errors="replace")
    return text


def killed_by_signal(code: int) -> bool:
    """Whether a rank's exit status, as a launcher printed it (Python's -N or the shell's
    128 + N), says a signal killed it, and not SIGTERM, with which launchers stop the ranks
    still running once one failed: such a rank is the cause more often than the peers that
    then failed on its closed connections."""
    number = -code if code < 0 else code - 128 if code > 128 else 0
    return 0 < number < signal.NSIG and number != signal.SIGTERM


def thread_budget(processes: int, threads: int | None, cores: int) -> tuple[int, list[str]]:
    """Intra-op threads per process: cores // processes unless set; warn on oversubscription."""
    threads = threads or max(1, cores // processes)
    warnings = []
    if threads * processes > cores:
        warnings.append(
            f"{processes} processes x {threads} threads = {threads * processes} threads "
            f"on {cores} cores: oversubscribed, expect lower and noisier throughput"
        )
    return threads, warnings


PROBE_TIMEOUT_S = 120.0
"""How long a probe of the workers' interpreter (what it can import, its version) may take."""
SAFE_PATH = ("-P",)
"""The interpreter flag that keeps the working directory (``-m``, ``-c``) or a script's
directory off ``sys.path``; every Python command a plan starts takes it or
``PYTHONSAFEPATH=1`` (:func:`common_env`), which also reaches the interpreters a tool starts
itself (torchrun's ranks, multiprocessing's spawned children)."""


def missing_modules(python: str, modules: tuple[str, ...]) -> list[str]:
    """The modules of ``modules`` the interpreter cannot import (found, not imported)."""
    if python == sys.executable:
        return [m for m in modules if importlib.util.find_spec(m) is None]
    code = (
        "import importlib.util, sys; "
        "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"
    )
    try:
        done = subprocess.run(
            [python, *SAFE_PATH, "-c", code, *modules],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return list(modules)
    return done.stdout.split() if done.returncode == 0 else list(modules)


def worker_command(python: str, spec_path: Path, module: str = "dlscale.worker") -> tuple[str, ...]:
    """``python -P -m dlscale.worker spec.json``: ``-P`` (Python >= 3.11, which preflight
    checks) keeps the working directory off the worker's import path, so a ``random.py`` or
    ``numpy.py`` where ``dlscale run`` was started never runs inside a worker."""
    return (python, *SAFE_PATH, "-m", module, str(spec_path))


def common_env(config: RunConfig, spec_path: Path, threads: int) -> dict[str, str]:
    """What every worker command gets, whatever the launcher: thread counts, a path that
    holds dlscale and the plug-ins but not the parent's site-packages nor the working
    directory (``PYTHONSAFEPATH``; an empty entry of the parent's ``PYTHONPATH``, which
    Python reads as the working directory, is dropped), and the variables of the point's
    memory allocator (:mod:`dlscale.runtime.allocator`: thresholds, a preloaded library in
    front of the parent's ``LD_PRELOAD``), and the parent's ``DLSCALE_CACHE_DIR`` where it is
    set (:mod:`dlscale.contract.weights_cache`)."""
    inherited = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    pythonpath = os.pathsep.join(
        p for p in (str(worker_path_dir(spec_path.parent).absolute()), *inherited) if p
    )
    return {
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "DLSCALE_THREADS": str(threads),
        "PYTHONUNBUFFERED": "1",
        "PYTHONSAFEPATH": "1",
        "PYTHONPATH": pythonpath,
        **allocator_env(config.allocator),
        **_cache_env(),
    }


def _cache_env() -> dict[str, str]:
    """The parent's ``DLSCALE_CACHE_DIR`` for the ranks, made absolute (a rank starts in
    another directory); empty (the cache off) stays empty; unset, each rank's own default."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen is None:
        return {}
    return {CACHE_ENV: str(Path(chosen).absolute()) if chosen else ""}
