"""Backend registry. A backend is one framework + distribution strategy.

The core reads only these descriptors and the capabilities they declare; it never branches on a
backend's name. The worker-side code named by ``worker`` runs inside ``python -m dlscale.worker``,
possibly under another interpreter (``python``), and talks to the parent only through files.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlscale.registry import Registry


@dataclass(frozen=True, kw_only=True)
class BackendSpec:
    name: str
    description: str
    framework: str
    """Distribution name of the framework (for availability and version checks)."""
    worker: str
    """``module:function`` called in each worker as ``function(ctx: WorkerContext)``."""
    max_workers: int | None = None
    """Largest world size the backend supports (``None``: unlimited)."""
    devices: tuple[str, ...] = ("cpu", "cuda")
    python: str | None = None
    """Interpreter for the workers (a path); ``None`` uses the parent's interpreter. A study may
    override it with the ``python`` key (e.g. an MXNet virtual environment)."""
    reference: bool = False
    """A plain single-process baseline: preferred as the 1-worker point of speedups."""
    measures_exposed_comm: bool = False
    """Whether the worker measures steps without gradient synchronization (exposed comm)."""
    extra_processes_key: str | None = None
    """Config key giving the number of processes started besides the workers (e.g. the
    parameter servers of ``num_servers``); they take the ranks after the workers."""
    options: tuple[str, ...] = ()
    """Strategy keys (config.STRATEGY_KEYS) this backend reads; setting another is an error."""
    compressions: tuple[str, ...] = ("none",)
    """Gradient compressions the backend implements."""


BACKENDS: Registry[BackendSpec] = Registry("backend")

BACKENDS.register(
    "torch-single",
    BackendSpec(
        name="torch-single",
        description="plain PyTorch model, one process, no wrapper (the 1-worker baseline)",
        framework="torch",
        worker="dlscale.backends.torch_single:run",
        max_workers=1,
        reference=True,
    ),
)
BACKENDS.register(
    "torch-ddp",
    BackendSpec(
        name="torch-ddp",
        description="PyTorch DistributedDataParallel (gloo on CPU, NCCL on CUDA)",
        framework="torch",
        worker="dlscale.backends.torch_ddp:run",
        measures_exposed_comm=True,
        options=(
            "bucket_mb",
            "compression",
            "powersgd_rank",
            "gradient_as_bucket_view",
            "static_graph",
        ),
        compressions=("none", "fp16", "bf16", "powersgd"),
    ),
)
BACKENDS.register(
    "torch-ring",
    BackendSpec(
        name="torch-ring",
        description="explicit ring all-reduce on send/recv, tensor fusion (Horovod's algorithm)",
        framework="torch",
        worker="dlscale.backends.torch_ring:run",
        measures_exposed_comm=True,
        options=("bucket_mb", "compression"),
        compressions=("none", "fp16", "bf16"),
    ),
)
BACKENDS.register(
    "torch-ps",
    BackendSpec(
        name="torch-ps",
        description="parameter server: num_servers server ranks, sync or async (ps_mode)",
        framework="torch",
        worker="dlscale.backends.torch_ps:run",
        measures_exposed_comm=True,
        extra_processes_key="num_servers",
        options=("ps_mode", "num_servers"),
    ),
)
