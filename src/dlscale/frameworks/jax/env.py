"""JAX in a dlscale process: configured before its first computation, its facts after.

* ``XLA_FLAGS``: with one thread per worker, XLA's CPU client runs each computation on the
  calling thread (``--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1``), as
  ``torch.set_num_threads(1)``; with more, XLA sizes its own pool from the cores the process
  may use (the launcher's affinity), which no flag of jaxlib 0.10 sets to a count.
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
SINGLE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def import_jax(*, threads: int, precision: str) -> Any:
    """``jax``, configured (see the module's docstring); a clear error where it or Flax is
    missing."""
    if threads == 1:
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} {SINGLE_THREAD}".strip()
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
    }
