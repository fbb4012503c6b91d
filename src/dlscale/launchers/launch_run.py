"""Start one run and watch it to its end: plan it, write its spec, start its processes.

What :func:`dlscale.runner.run_point` (a study's point) and ``dlscale microbench`` (the
collectives) share. A launch that loses a port it was given is planned and started again
(:mod:`dlscale.launchers.port_retry`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlscale.contract.backends import BACKENDS
from dlscale.contract.files import write_json_atomic
from dlscale.contract.launchers import LAUNCHERS
from dlscale.contract.layout import usable_cores
from dlscale.contract.plugins import load_plugins
from dlscale.contract.run_config import RunConfig
from dlscale.launchers.base import LaunchOutcome, LaunchPlan
from dlscale.launchers.port_retry import PORT_ATTEMPTS, lost_port
from dlscale.launchers.watch import watch
from dlscale.runtime.worker_path import prepare_worker_path


def interpreter(config: RunConfig) -> str:
    return config.python or BACKENDS.get(config.backend).python or sys.executable


def launch(
    config: RunConfig,
    run_dir: Path,
    *,
    command: list[str],
    study: str,
    on_warning: Callable[[str], None],
    task: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], LaunchOutcome | str, float]:
    """Plan the point, write its spec (with ``task``: what the workers do instead of training,
    e.g. ``dlscale microbench``'s collectives), start it and watch it: (the spec, how the
    launch ended or, for a launcher that detaches, where it stands, the start time)."""
    started_at = time.time()
    launcher = LAUNCHERS.get(config.launcher).create()
    for attempt in range(1, PORT_ATTEMPTS + 1):
        plan = launcher.plan(config, run_dir / "spec.json", interpreter(config))
        spec = _write_spec(config, plan, run_dir, study=study, command=command, task=task)
        for warning in plan.warnings if attempt == 1 else ():
            on_warning(warning)
        running = launcher.start(plan)  # start and watch in this thread: see launchers/processes
        if launcher.detaches(config):
            where = launcher.submitted(run_dir, config)
            return spec, where.words if where is not None else "started", started_at
        try:
            outcome = watch(plan, running, run_dir, config.timeout_s, launcher.blame)
        except BaseException:  # a signal between start and watch: stop what was started
            running.stop()
            raise
        lost = lost_port(outcome, plan, run_dir) if attempt < PORT_ATTEMPTS else None
        if lost is None:
            break
        on_warning(f"{lost}; starting it again on new ports ({attempt + 1} of {PORT_ATTEMPTS})")
    return spec, outcome, started_at


def _write_spec(
    config: RunConfig,
    plan: LaunchPlan,
    run_dir: Path,
    *,
    study: str,
    command: list[str],
    task: dict[str, Any] | None,
) -> dict[str, Any]:
    """Write the run's spec (what every worker reads) and its import path; the spec."""
    plugins = load_plugins()
    spec = {
        "run_id": run_dir.name,
        "study": study,
        "command": command,
        "config": config.to_dict(),
        "cluster": plan.addresses.to_dict(),
        "layout": plan.layout.to_dict(),
        "plugins": plugins,
        "threads_per_worker": plan.threads_per_worker,
        "warnings": list(plan.warnings),
        "oversubscribed": _oversubscribed(
            plan, LAUNCHERS.get(config.launcher).on_this_machine(config.options)
        ),
        **(task or {}),
    }
    write_json_atomic(run_dir / "spec.json", "spec", spec)
    prepare_worker_path(run_dir, plugins)
    return spec


def _oversubscribed(plan: LaunchPlan, same_machine: bool) -> bool | None:
    """Whether the run's processes times their threads exceed this machine's usable cores;
    ``None`` when its ranks are not all on this machine (the launcher knows the hosts). The
    ranks of a ``same_machine`` launcher are here even at other addresses (the namespaces of
    an emulated network)."""
    hosts = plan.addresses.hosts
    here = same_machine or all(host in ("127.0.0.1", "localhost") for host in hosts)
    if not hosts or not here:
        return None
    return plan.threads_per_worker * plan.layout.size > usable_cores()
