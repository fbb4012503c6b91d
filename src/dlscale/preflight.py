"""Checks made before anything is launched, so that bad input costs one line, not a run.

* the results directory can be created and written;
* the workers' interpreter exists and runs, and imports the backend's framework and the
  modules it requires (``BackendSpec.requires``; the message names the install command);
* the launcher's tool is installed (``Launcher.check``: horovodrun beside that interpreter,
  mpirun on the PATH), and this machine can run the point's launcher options
  (``Launcher.check_point``: an emulated network needs root, iproute2, netem for a latency);
* ``--device cuda``: the backend's framework sees a CUDA device under that interpreter;
* ``allocator = jemalloc`` or ``tcmalloc``: its library is installed (the message names the
  Debian package and ``scripts/install-allocators.sh``);
* the resource guard (``resource_guard = true``, the default), for launchers that run every
  process on this machine: at most :data:`MAX_PROCESSES_PER_CORE` processes per usable core,
  and a lower bound of the point's memory (see :func:`memory_lower_bound_bytes`) within the
  machine's memory. ``--set resource_guard=false`` runs such a point anyway.

Each failure is a :class:`UserError` naming the key and the fix (exit 2, before launch).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from dlscale.backends import BACKENDS, BackendSpec
from dlscale.config.run_config import RunConfig
from dlscale.datasets import DATASETS
from dlscale.errors import UserError
from dlscale.launchers import LAUNCHERS
from dlscale.models import MODELS
from dlscale.runner import interpreter
from dlscale.runtime import allocator
from dlscale.runtime.environment import memory_gib, usable_cores
from dlscale.runtime.worker_path import prepare_worker_path

MAX_PROCESSES_PER_CORE = 4
"""Beyond this, each process gets under a quarter of a core: the measurement says nothing
about the engine, and hundreds of interpreters exhaust memory before the first step."""
PROCESS_BASE_BYTES = 100 * 2**20
"""A Python interpreter with numpy loaded: the least any process of a run takes."""
PROBE_TIMEOUT_S = 120.0


def check_points(points: tuple[RunConfig, ...], results: Path, *, create: bool = True) -> None:
    """Every check; the results directory is created last, once nothing was refused."""
    check_results_dir(results, create=False)
    checked: set[tuple[str, ...]] = set()
    for config in points:
        python = interpreter(config)
        if ("python", python) not in checked:
            check_interpreter(python, BACKENDS.get(config.backend), given=config.python)
            checked.add(("python", python))
        backend = BACKENDS.get(config.backend)
        if ("launcher", python, config.launcher) not in checked:
            LAUNCHERS.get(config.launcher).create().check(python)
            checked.add(("launcher", python, config.launcher))
        LAUNCHERS.get(config.launcher).create().check_point(config)
        if ("backend", python, config.backend) not in checked:
            check_requirements(python, config.backend)
            checked.add(("backend", python, config.backend))
        probe = backend.device_probe
        if config.device == "cuda" and probe and (python, probe) not in checked:
            check_cuda(python, probe)
            checked.add((python, probe))
        if ("allocator", config.allocator) not in checked:
            check_allocator(config.allocator)
            checked.add(("allocator", config.allocator))
        if config.resource_guard:
            check_resources(config)
    if create:
        check_results_dir(results, create=True)


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
            [python, "-c", code, *modules],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return list(modules)
    return done.stdout.split() if done.returncode == 0 else list(modules)


def check_requirements(python: str, backend_name: str) -> None:
    """The backend's framework and the modules it requires import under the workers'
    interpreter; else one line with the command that installs them."""
    backend = BACKENDS.get(backend_name)
    missing = missing_modules(python, (backend.framework, *backend.requires))
    if missing:
        fix = f": {backend.install}" if backend.install else ""
        raise UserError(
            f"{backend_name} needs {', '.join(missing)}, which {python} cannot import; "
            f"install it{fix}"
        )


def check_cuda(python: str, probe: str) -> None:
    with tempfile.TemporaryDirectory(prefix="dlscale-probe-") as work:
        path = prepare_worker_path(Path(work), [])
        code = f"from dlscale.registry import load_object; print(load_object({probe!r})())"
        try:
            done = subprocess.run(
                [python, "-c", code],
                capture_output=True,
                text=True,
                timeout=PROBE_TIMEOUT_S,
                env={**os.environ, "PYTHONPATH": str(path)},
            )
            count = int(done.stdout.strip().splitlines()[-1])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            tail = done.stderr.strip().splitlines()[-1:] if "done" in locals() else []
            raise UserError(
                f"cannot ask {python} for its CUDA devices ({' '.join(tail) or 'no answer'}); "
                "install the framework there or use --device cpu"
            ) from None
    if count == 0:
        raise UserError(
            f"device cuda requested but the framework under {python} sees no CUDA GPU; "
            "use --device cpu"
        )


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


def check_resources(config: RunConfig) -> None:
    if not LAUNCHERS.get(config.launcher).same_machine:
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
    total = memory_gib()
    if config.device == "cpu" and total is not None:
        needed = memory_lower_bound_bytes(config) / 2**30
        if needed > total:
            raise UserError(
                f"{config.backend} x{config.workers} at batch {config.batch_per_worker} needs "
                f"at least {needed:,.1f} GiB of memory, the machine has {total:g} GiB; use a "
                "smaller batch_size or fewer workers, or --set resource_guard=false"
            )
