"""Checks made before anything is launched, so that bad input costs one line, not a run.

* the results directory can be created and written;
* the workers' interpreter exists and is Python 3.11 or newer (workers start with ``-P``),
  and imports the backend's framework and the modules it requires (``BackendSpec.requires``;
  the message names the install command);
* the launcher's tool is installed (``Launcher.check``: horovodrun beside that interpreter,
  mpirun on the PATH, Slurm's srun, sbatch, scontrol and scancel; a dry run, which calls
  none, only notes its absence), this machine can run the point's launcher options
  (``Launcher.check_point``: an emulated network needs root, iproute2, netem for a latency),
  and, unless it is a dry run, the launcher's scheduler takes work now
  (``Launcher.check_ready``: Slurm's controller answers);
* ``--device cuda``, for a launcher that runs every process on this machine: the backend's
  framework sees a CUDA device under that interpreter (elsewhere each rank checks its own
  GPU where it runs, naming its host, and the launcher checks the nodes' GPUs against the
  ranks it puts on each: ``Launcher.check_point``);
* ``allocator = jemalloc`` or ``tcmalloc``: its library is installed (the message names the
  Debian package and ``scripts/install-allocators.sh``);
* the resource guard (``resource_guard = true``, the default), for launchers that run every
  process on this machine: at most :data:`MAX_PROCESSES_PER_CORE` processes per usable core,
  and a lower bound of the point's memory (see :func:`memory_lower_bound_bytes`; a
  microbench's: :func:`microbench_bytes`) within :data:`MEMORY_SHARE` of the memory available
  now. ``--set resource_guard=false`` runs such a point anyway.

Each failure is a :class:`UserError` naming the key and the fix (exit 2, before launch).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from dlscale.contract.backends import BACKENDS, BackendSpec
from dlscale.contract.datasets import DATASETS
from dlscale.contract.errors import UserError
from dlscale.contract.frameworks import framework_module
from dlscale.contract.launchers import LAUNCHERS
from dlscale.contract.layout import usable_cores
from dlscale.contract.models import MODELS
from dlscale.contract.plugins import load_plugins
from dlscale.contract.run_config import RunConfig
from dlscale.contract.text import byte_size
from dlscale.launchers.base import PROBE_TIMEOUT_S, SAFE_PATH, missing_modules
from dlscale.launchers.launch_run import interpreter
from dlscale.microbench import Settings
from dlscale.runtime import allocator
from dlscale.runtime.environment import memory_available_gib, memory_gib
from dlscale.runtime.worker_path import prepare_worker_path
from dlscale.store.results import RunStore

MAX_PROCESSES_PER_CORE = 4
"""Beyond this, each process gets under a quarter of a core: the measurement says nothing
about the engine, and hundreds of interpreters exhaust memory before the first step."""
PROCESS_BASE_BYTES = 100 * 2**20
MEMORY_SHARE = 0.9
"""The share of the memory available when the study starts that a point's lower bound may
take: the bound leaves out each interpreter's framework (torch: about 130 MiB more), the
dlscale parent and the libraries' threads, and a machine with under a tenth of its memory
left evicts its page cache and stalls."""
"""A Python interpreter with numpy loaded: the least any process of a run takes."""
MIN_WORKER_PYTHON = (3, 11)


def check_points(
    points: tuple[RunConfig, ...],
    results: Path,
    *,
    create: bool = True,
    microbench: Settings | None = None,
) -> list[str]:
    """Every check; the results directory is created last, once nothing was refused.
    ``create`` (not a dry run): the launchers' schedulers are asked too whether they take work
    now (:meth:`~dlscale.launchers.base.Launcher.check_ready`), and a launcher's missing tool
    refuses; a dry run calls no tool, and says it in the notes returned (each once): a study
    is planned on a laptop or a login node for nodes that have the tools.
    ``microbench``: the points run these collectives, whose buffers the resource guard counts."""
    check_results_dir(results, create=False)
    checked: set[tuple[str, ...]] = set()
    notes: list[str] = []
    for config in points:
        python = interpreter(config)
        if ("python", python) not in checked:
            check_interpreter(python, BACKENDS.get(config.backend), given=config.python)
            checked.add(("python", python))
        backend = BACKENDS.get(config.backend)
        if ("launcher", python, config.launcher) not in checked:
            try:
                LAUNCHERS.get(config.launcher).create().check(python)
            except UserError as missing:
                if create:
                    raise
                notes.append(f"a real run from here would stop: {missing}")
            checked.add(("launcher", python, config.launcher))
        if create and ("ready", config.launcher) not in checked:
            LAUNCHERS.get(config.launcher).create().check_ready()
            checked.add(("ready", config.launcher))
        LAUNCHERS.get(config.launcher).create().check_point(config)
        # only where the ranks run here: on compute nodes each rank checks its own GPU and
        # names its host (runtime/gpus.py); a login node without one plans their study
        here = LAUNCHERS.get(config.launcher).on_this_machine(config.options)
        for kind, name, check in (("backend", config.backend, check_requirements),
                                  ("model", config.model, check_model)):  # fmt: skip
            if (kind, python, name) in checked:
                continue
            checked.add((kind, python, name))
            try:
                check(python, name)
            except UserError as missing:
                if create or here:
                    raise  # a dry run for other nodes plans without their framework here
                notes.append(f"the nodes' interpreter must have it: {missing}")
        probe = backend.device_probe
        if config.device == "cuda" and probe and here and (python, probe) not in checked:
            check_cuda(python, probe)
            checked.add((python, probe))
        if ("allocator", config.allocator) not in checked:
            check_allocator(config.allocator)
            checked.add(("allocator", config.allocator))
        if config.resource_guard:
            check_resources(config, microbench)
    if create:
        check_results_dir(results, create=True)
        # a link or a file planted where a point's run directory goes stops the study before
        # any point runs (the runner refuses it again for later repeats)
        RunStore(results).check_run_dirs(config.run_id() for config in points)
    return notes


def check_results_dir(results: Path, *, create: bool = True) -> None:
    """The results directory exists (or can be made: ``create``) and is writable."""
    existing = results
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == results else f"is under {existing}, a file"
        raise UserError(f"--results {results} {what}, not a directory; choose another path")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"results directory {existing} is not writable; choose another --results")
    if create:
        if results.is_symlink() and not results.exists():
            raise UserError(
                f"--results {results} is a link to {os.readlink(results)}, which does not "
                "exist; create that directory or choose another --results"
            )
        try:
            results.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UserError(
                f"cannot create results directory {results} ({error.strerror}); "
                "choose a writable --results DIR"
            ) from None


def check_interpreter(python: str, backend: BackendSpec, *, given: str | None = None) -> None:
    """The workers' interpreter exists: the study's ``python`` key (``given``), else the
    backend's own environment (named with its install command), else the parent's."""
    found = shutil.which(python)
    if found is not None and os.access(found, os.X_OK):
        check_python_version(python)
        return
    if given is None and backend.python is not None:
        raise UserError(
            f"backend {backend.name} runs in its own environment, and {python} is not there: "
            f"{backend.install} creates it (or set the python key to another interpreter)"
        )
    raise UserError(
        f"python = {python!r}: no such interpreter; set the python key to an existing "
        "interpreter (e.g. a venv's bin/python)"
    )


def check_python_version(python: str) -> None:
    """The workers' interpreter is Python >= 3.11: a worker starts with ``-P`` (the working
    directory kept off its import path: :data:`dlscale.launchers.base.SAFE_PATH`), which an
    older one refuses, and dlscale needs 3.11 anyway."""
    if python == sys.executable:
        return
    code = "import sys; sys.stdout.write('%d %d' % sys.version_info[:2])"  # Python 2 too
    try:  # imports only builtins (the working directory is on the path of -c before 3.11)
        done = subprocess.run(
            [python, "-E", "-s", "-c", code],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
        version = tuple(int(part) for part in done.stdout.split())
    except (OSError, subprocess.SubprocessError, ValueError):
        version = ()
    if len(version) != 2:
        raise UserError(
            f"python = {python!r} does not run as a Python interpreter; set the python key "
            "to a venv's bin/python (Python 3.11 or newer)"
        )
    if version < MIN_WORKER_PYTHON:
        raise UserError(
            f"python = {python!r} is Python {version[0]}.{version[1]}; dlscale's workers need "
            f"Python {'.'.join(map(str, MIN_WORKER_PYTHON))} or newer: set the python key to "
            "such an interpreter"
        )


def check_requirements(python: str, backend_name: str) -> None:
    """The backend's framework and the modules it requires import under the workers'
    interpreter; else one line with the command that installs them."""
    backend = BACKENDS.get(backend_name)
    missing = missing_modules(python, (framework_module(backend.framework), *backend.requires))
    if missing:
        fix = f": {backend.install}" if backend.install else ""
        raise UserError(
            f"{backend_name} needs {', '.join(missing)}, which {python} cannot import; "
            f"install it{fix}"
        )


def check_model(python: str, model: str) -> None:
    """A model that needs more than its framework (a library's: ``torchvision:NAME``) can be
    built under the workers' interpreter: its modules import, and its probe finds it."""
    spec = MODELS.get(model)
    missing = missing_modules(python, spec.requires) if spec.requires else []
    if missing:
        raise UserError(
            f"model {model} needs {', '.join(missing)}, which {python} cannot import: "
            f"{spec.install}"
        )
    if spec.probe is not None:
        why = ask_interpreter(
            python, spec.probe, model, what=f"whether it has model {model}", fix=spec.install
        )
        if why:
            raise UserError(f"model {model}: {why}")


def check_cuda(python: str, probe: str) -> None:
    fix = "install the framework there or use --device cpu"
    answer = ask_interpreter(python, probe, what="for its CUDA devices", fix=fix)
    try:
        count = int(answer)
    except ValueError:
        raise UserError(f"cannot ask {python} for its CUDA devices ({answer}); {fix}") from None
    if count == 0:
        raise UserError(
            f"device cuda requested but the framework under {python} sees no CUDA GPU; "
            "use --device cpu"
        )


def ask_interpreter(python: str, reference: str, *args: str, what: str, fix: str) -> str:
    """What ``load_object(reference)(*args)`` returns, as one line of text, under the workers'
    interpreter (with dlscale and the plug-ins on its path, not the working directory); a
    :class:`UserError` with its last line of error and ``fix`` when it gives no answer."""
    with tempfile.TemporaryDirectory(prefix="dlscale-probe-") as work:
        path = prepare_worker_path(Path(work), load_plugins())  # a probe may be a plug-in's
        code = (
            "import sys; from dlscale.contract.registry import load_object; "
            "answer = str(load_object(sys.argv[1])(*sys.argv[2:])); "
            "sys.stdout.write(answer.replace('\\n', ' ') + '\\n')"
        )
        try:
            done = subprocess.run(
                [python, *SAFE_PATH, "-c", code, reference, *args],
                capture_output=True,
                text=True,
                timeout=PROBE_TIMEOUT_S,
                env={**os.environ, "PYTHONPATH": str(path), "PYTHONSAFEPATH": "1"},
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise UserError(f"cannot ask {python} {what} ({error}); {fix}") from None
    lines = done.stdout.splitlines()
    if done.returncode != 0 or not lines:
        tail = done.stderr.strip().splitlines()[-1:] or ["no answer"]
        raise UserError(f"cannot ask {python} {what} ({tail[0]}); {fix}")
    return lines[-1].strip()


def check_allocator(name: str) -> None:
    """A preloaded allocator's library is on this machine (glibc's choices need nothing)."""
    missing = allocator.missing_library(name)
    if missing is not None:
        raise UserError(missing)


def memory_lower_bound_bytes(config: RunConfig) -> int:
    """What the point needs at least: an interpreter per process, and per training process
    twice its input batch in float32 (the batch and the first layer's activations)."""
    layout = config.layout()
    size = config.image_size or MODELS.get(config.model).input_size
    batch_bytes = config.batch_per_worker * 3 * size * size * 4
    trained = sum(p.replicas for p in layout.processes)
    return process_count(config) * PROCESS_BASE_BYTES + 2 * batch_bytes * trained


def loader_count(config: RunConfig) -> int:
    """The data set's loader processes over all training processes of the point."""
    per_process = DATASETS.get(config.dataset).helper_processes(config.options)
    return per_process * sum(1 for p in config.layout().processes if p.trains)


def process_count(config: RunConfig) -> int:
    """Every process the point starts on its machines: its ranks and their loaders."""
    return config.layout().size + loader_count(config)


def check_resources(config: RunConfig, microbench: Settings | None = None) -> None:
    """The resource guard (module docstring); ``microbench``: the point runs these
    collectives instead of training, and its memory is their buffers."""
    if not LAUNCHERS.get(config.launcher).on_this_machine(config.options):
        return
    processes, cores = process_count(config), usable_cores()
    if processes > MAX_PROCESSES_PER_CORE * cores:
        loaders = loader_count(config)
        which = f" ({loaders} of them loader processes: fewer loader_workers)" if loaders else ""
        raise UserError(
            f"{config.backend} x{config.workers} needs {processes} processes on {cores} cores "
            f"(more than {MAX_PROCESSES_PER_CORE} per core){which}; use fewer workers, or "
            "--set resource_guard=false to run it anyway"
        )
    available = memory_available_gib()
    available = memory_gib() if available is None else available
    if config.device != "cpu" or available is None:
        return
    usable = MEMORY_SHARE * available
    room = f"more than {MEMORY_SHARE:.0%} of the {available:g} GiB available here"
    if microbench is not None:
        needed, collective, size = microbench_bytes(config, microbench)
        if needed / 2**30 > usable:
            raise UserError(
                f"microbench {collective} of {byte_size(size)} on {config.workers} ranks needs at "
                f"least {needed / 2**30:,.1f} GiB of memory (its messages, results and checks), "
                f"{room}; use smaller --sizes or fewer --workers, or --set resource_guard=false"
            )
        return
    gib = memory_lower_bound_bytes(config) / 2**30
    if gib > usable:
        raise UserError(
            f"{config.backend} x{config.workers} at batch {config.batch_per_worker} needs "
            f"at least {gib:,.1f} GiB of memory, {room}; use a smaller batch_size or fewer "
            "workers, or --set resource_guard=false"
        )


COLLECTIVE_BUFFERS = {
    "all_reduce": (4, 0),
    "broadcast": (4, 0),
    "all_gather": (5, 1),
    "reduce_scatter": (2, 3),
    "send_recv": (3, 0),
    "ps_pushpull": (4, 0),
}
"""What a rank of ``dlscale microbench`` holds at once for a message of ``size`` bytes, as
(whole messages, messages / processes): the input, the output or in-place buffer, the
expected result, the check's difference and its absolute value, and the library's own copy.
Measured (peak resident memory, VmHWM, less the same run's at 4 bytes) for
torch.distributed's kernel on gloo at 256 MiB on 2 and 4 ranks: all_reduce 4.0 (its input and
in-place buffer, the check's two), broadcast 4.0 (gloo's staging copy), all_gather 5.3-5.5
(input size/p, output, expected, the check's two, gloo's flat output), reduce_scatter 4.0-5.5
(counted: input, a copy, output, the check's two of size/p); Horovod's kernel holds one message
less for broadcast and all_gather, and more for reduce_scatter (6.0-6.5)."""


def collective_bytes(collective: str, size: int, processes: int, rank: int = 0) -> int:
    """Bytes a rank holds at once for ``collective`` of ``size`` bytes
    (:data:`COLLECTIVE_BUFFERS`); send_recv's other ranks than 0 and 1 hold only its buffer."""
    whole, part = COLLECTIVE_BUFFERS[collective]
    if collective == "send_recv" and rank >= 2:
        whole = 1
    return whole * size + part * size // max(1, processes)


def microbench_bytes(config: RunConfig, settings: Settings) -> tuple[int, str, int]:
    """A microbench point's memory: every process's interpreter, and each measuring rank's
    buffers for the collective and size that take the most (a parameter server's push and
    pull also the servers': every worker's part of the message, received before they sum);
    (bytes, that collective, size)."""
    layout = config.layout()
    measuring = layout.training_ranks
    serves = len(layout.processes) > len(measuring)
    size = max(settings.sizes)
    ranked = [
        (sum(collective_bytes(c, size, len(measuring), r) for r in range(len(measuring)))
         + (len(measuring) * size if c == "ps_pushpull" and serves else 0), c)
        for c in settings.collectives
    ]  # fmt: skip
    buffers, collective = max(ranked)
    return process_count(config) * PROCESS_BASE_BYTES + buffers, collective, size
