"""Backend registry. A backend is one framework + distribution strategy.

The core reads only these descriptors and what they declare (options, roles, cluster
environment); it never branches on a backend's name. The worker-side code named by ``worker``
runs inside ``python -m dlscale.worker``, possibly under another interpreter (``python``), and
talks to the parent only through files. Registering a backend from another package (see
:mod:`dlscale.contract.plugins`) needs no edit here, and the built-in backends register the same
way:
each folder of :mod:`dlscale.frameworks` has a ``plugin`` module, named by an entry point of the
``dlscale.plugins`` group in pyproject.toml.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dlscale.contract.layout import Addresses, Process, ProcessLayout, Role
from dlscale.contract.options import Option
from dlscale.contract.registry import Registry

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig


def one_worker_role(config: RunConfig) -> tuple[Role, ...]:
    """The default: one training process per data-parallel replica, nothing else."""
    return (Role(name="worker", count=config.workers),)


def no_cluster_env(
    process: Process, layout: ProcessLayout, addresses: Addresses, config: RunConfig
) -> dict[str, str]:
    return {}


ClusterEnv = Callable[[Process, ProcessLayout, Addresses, "RunConfig"], dict[str, str]]


@dataclass(frozen=True, kw_only=True)
class BackendSpec:
    name: str
    description: str
    framework: str
    """The framework's name, as its :class:`~dlscale.contract.frameworks.FrameworkSpec` and
    model builders name it; the workers import its ``FrameworkSpec.module`` (or, with no
    FrameworkSpec registered, a module of this name)."""
    worker: str
    """``module:function`` called in each process as ``function(ctx: WorkerContext)``."""
    max_workers: int | None = None
    """Largest number of replicas the backend supports (``None``: unlimited)."""
    devices: tuple[str, ...] = ("cpu", "cuda")
    python: str | None = None
    """Interpreter for the workers (a path); ``None`` uses the parent's interpreter. A study may
    override it with the ``python`` key (e.g. an MXNet virtual environment)."""
    install: str = ""
    """The command that installs the framework, shown when it is missing."""
    reference: bool = False
    """A plain single-process baseline of its framework: preferred as the 1-worker point and
    run as the whole machine's one worker. One per framework (a second is refused)."""
    options: tuple[Option, ...] = ()
    """The backend's own settings; setting another backend's is refused (skipped in grids)."""
    roles: Callable[[RunConfig], tuple[Role, ...]] = one_worker_role
    """The processes a run needs, in rank order (pure; must import no framework)."""
    cluster_env: ClusterEnv = no_cluster_env
    """Each process's variables from the layout and the allocated addresses (pure)."""
    ports: int | Callable[[RunConfig], int] = 0
    """Ports the launcher reserves for a run (``Addresses.ports``): a number, or a function of
    the config (TensorFlow: a gRPC server in every process)."""
    requires: tuple[str, ...] = ()
    """Modules the workers import beyond the framework (e.g. ``horovod``): checked under the
    workers' interpreter before launch, and by ``dlscale ls backends``."""
    installed: str | None = None
    """``module:function(python) -> str`` saying what ``dlscale ls backends`` shows in its
    installed column (e.g. what a build was built with); ``None``: whether the framework and
    ``requires`` can be imported."""
    resumable: bool = False
    """Its replicas hold one training state that its engine checkpoints and restores, so a run
    whose ranks a launcher restarts resumes from the last saved window (``max_restarts``);
    the engine must say the same (``Engine.resumable``): a restarted run whose engine cannot
    checkpoint fails in one line naming the disagreement (``runtime/checkpoint.py``)."""
    collectives: str | None = None
    """``module:function(ctx, settings)`` running ``dlscale microbench``'s collectives on this
    engine's communication library (:mod:`dlscale.microbench`); ``None``: none to measure."""
    collectives_everywhere: bool = False
    """``collectives`` runs on every process of the run, the roles that do not train too
    (torch-ps' servers serve its push and pull there); else only the training processes run
    it and the others run ``worker`` as in training (mxnet-kv's ps-lite servers)."""
    collectives_options: tuple[tuple[str, object], ...] = ()
    """The options a microbench of this engine runs with where its command does not set them
    (tf-ps: ``ps_mode = "sync"``, the layout whose workers its kernel runs in)."""
    collectives_check: Callable[[RunConfig], None] | None = None
    """The settings its ``collectives`` kernel cannot run under (pure, no framework import):
    raises :class:`~dlscale.contract.errors.UserError` naming the setting and the fix, called by
    ``dlscale microbench`` before anything starts (tf-ps' kernel times the synchronous
    layout only, on the CPU)."""
    check: Callable[[RunConfig], None] | None = None
    """The contradictions between a point's settings that no single option sees (pure, no
    framework import: ``precision = float64`` with ``amp = bf16``, or with a compression that
    sends the gradients in 16 bits): raises
    :class:`~dlscale.contract.errors.UnsupportedPoint` naming both settings and the fix. Called
    when the point's config is built, so ``--dry-run`` says it and a grid skips the point."""
    precisions: tuple[str, ...] = ("float32",)
    """The ``precision`` values its engine trains in (``float64``: model, inputs, gradients
    and collectives all in it); a point asking another is skipped, or refused alone."""
    precision_note: str = ""
    """Why it cannot train in the others, where a library stops it (said in the refusal)."""
    loader_only: bool = True
    """Its engine takes each step's batch itself, so ``loader_only`` can time the input
    pipeline alone; ``False``: the framework reads its own batches (Keras ``fit``, the
    parameter-server coordinator), and such a point is skipped."""
    device_probe: str | None = None
    """``module:function`` run under the workers' interpreter before launch, returning the
    number of CUDA devices the framework sees (so ``--device cuda`` without a GPU is refused
    before anything starts); ``None``: not checked."""

    runs_scripts: bool = False
    """It runs the user's training script (``model = "FILE.py"``, ``dataset = "own"``) and
    measures it from its optimizer steps, instead of building a model itself."""

    def port_count(self, config: RunConfig) -> int:
        """How many ports a run of ``config`` needs."""
        return self.ports(config) if callable(self.ports) else self.ports


class BackendRegistry(Registry[BackendSpec]):
    """The backends, with one reference backend per framework: the baseline and the
    whole-machine point are picked by framework, so two would be a guess."""

    def register(self, name: str, entry: BackendSpec) -> BackendSpec:
        if entry.reference and (taken := self._reference_of(entry.framework)) is not None:
            raise ValueError(
                f"backend {name!r} is a second reference backend of framework "
                f"{entry.framework!r} ({taken!r} is one); give it its own framework name or "
                "reference=False"
            )
        return super().register(name, entry)

    def reference_of(self, framework: str) -> str | None:
        """The framework's reference backend, if it has one."""
        _ = self.names()  # the plug-ins loaded first
        return self._reference_of(framework)

    def _reference_of(self, framework: str) -> str | None:
        return next(
            (n for n, s in self._entries.items() if s.reference and s.framework == framework),
            None,
        )


BACKENDS: BackendRegistry = BackendRegistry("backend")
