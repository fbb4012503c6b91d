"""JAX in a dlscale process: configured before its first computation, its facts after.

* threads: XLA's CPU client sizes its thread pool from the CPUs the process may use (its
  affinity mask) and no flag of jaxlib 0.10 sets a count: the ``XLA_FLAGS`` of the old answers
  (``--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1``) left a jitted matmul
  on both cores of this machine (7.3 s of CPU in 3.8 s), and a "1-thread" jax-dp worker beside
  another waited for a CPU most of its time. So a process given fewer threads than the CPUs it
  may use is pinned to that many of them (:func:`confine`: its local rank's share, as mpirun's
  ``--bind-to core`` would), the way JAX's maintainers advise (jax-ml/jax#1539);
* one CPU device per process (``jax_num_cpu_devices = 1``): several host devices per process
  with MPI collectives crash (openxla/xla#16430), and a process a worker is every other
  engine's layout;
* cross-process collectives over gloo (``jax_cpu_collectives_implementation``, the default
  since jax 0.5.1, set explicitly so an older default cannot pick MPI);
* ``jax_enable_x64`` when the run trains in float64 (``precision``): JAX otherwise turns every
  float64 array into float32.
"""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from dlscale.contract.errors import UserError

INSTALL = "pip install 'dlscale[jax]'"


def confine(threads: int, local_rank: int = 0) -> list[int] | None:
    """Pin this process to ``threads`` of the CPUs it may use, the ``local_rank``-th share of
    them (wrapping around), where it may use more; the CPUs chosen, or ``None`` (left as the
    launcher set it)."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) <= threads:
        return None
    start = local_rank * threads % len(allowed)
    chosen = [allowed[(start + k) % len(allowed)] for k in range(threads)]
    os.sched_setaffinity(0, chosen)
    return chosen


def import_jax(*, threads: int, precision: str, local_rank: int = 0) -> Any:
    """``jax``, configured (see the module's docstring); a clear error where it or Flax is
    missing."""
    confine(threads, local_rank)
    try:
        import flax  # noqa: F401  (the twins' library: missing, it is the same one line)
        import jax
    except ImportError as error:
        raise UserError(
            f"JAX is missing or broken in this interpreter ({error}): {INSTALL}"
        ) from error
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", 1)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_enable_x64", precision == "float64")
    return jax


def start_distributed(jax: Any, ctx: Any) -> None:
    """Join the run's processes: the coordinator at rank 0's host and the run's first port
    (the launcher reserved it), this process's rank; a peer that never comes fails after the
    run's timeout (at least a minute, at most half an hour)."""
    jax.distributed.initialize(
        coordinator_address=f"{ctx.addresses.hosts[0]}:{ctx.addresses.ports[0]}",
        num_processes=ctx.processes,
        process_id=ctx.rank,
        initialization_timeout=int(max(60.0, min(ctx.config.timeout_s, 1800.0))),
    )


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def jax_environment(jax: Any) -> dict[str, Any]:
    """What JAX says about itself (the run's framework facts)."""
    return {
        "jax": jax.__version__,
        "jaxlib": _version("jaxlib"),
        "flax": _version("flax"),
        "platform": jax.default_backend(),
        "devices": jax.device_count(),
        "local_devices": jax.local_device_count(),
        "collectives": jax.config.jax_cpu_collectives_implementation,
        "x64": bool(jax.config.jax_enable_x64),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "cpus": sorted(os.sched_getaffinity(0)),
    }
