"""Starting and leaving Horovod in a worker, the same for every framework's binding.

``hvd`` is the framework's binding (``horovod.torch``, ``horovod.tensorflow``): they share one
core, configured by the same variables, so every horovod-* backend starts the same way:
Horovod's variables from the run's options (fusion threshold, cycle time, the timeline), the
Gloo rendezvous server in rank 0 when no launcher tool serves one
(:mod:`dlscale.frameworks.horovod.declare`) and the other ranks waiting until it listens, MPI
checked before ``init`` (which fails without a word of why when the controller is not built),
and the world checked against the layout; after the last step, the messages a step sent
(:meth:`HorovodSession.write_messages`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dlscale.contract.algorithms import PATTERN_FACT
from dlscale.contract.errors import UserError
from dlscale.contract.records import Messages
from dlscale.frameworks.horovod.declare import RENDEZVOUS_ENV, HorovodCommon
from dlscale.frameworks.horovod.fusion import StepMessages, median_index, typical_step
from dlscale.frameworks.horovod.timeline import fused_steps
from dlscale.runtime.context import WorkerContext
from dlscale.runtime.listening import await_listener

TIMELINE = "horovod-timeline.json"
"""Horovod's timeline of a run (Chrome trace format), in the run's directory."""


class HorovodSession:
    """``init`` then ``shutdown`` of one process's Horovod, for any framework binding."""

    def __init__(self) -> None:
        self._rendezvous: Any = None
        self._hvd: Any = None
        self._ctx: WorkerContext | None = None
        self._timeline: Path | None = None
        """The timeline being written (rank 0 writes it), where the run asked for one."""

    def start(self, ctx: WorkerContext, hvd_module: str) -> Any:
        """Set Horovod's variables, serve the rendezvous if this rank must, import the binding
        (``hvd_module``), ``init`` it and check the world; returns the binding."""
        import importlib

        options = ctx.config.typed(HorovodCommon)
        self._ctx = ctx
        if options.horovod_timeline:
            self._timeline = ctx.run_dir / TIMELINE
            os.environ["HOROVOD_TIMELINE"] = str(self._timeline)
        os.environ["HOROVOD_FUSION_THRESHOLD"] = str(int(options.fusion_mb * 2**20))
        os.environ["HOROVOD_CYCLE_TIME"] = str(options.cycle_ms)
        self._rendezvous = serve_or_await_rendezvous(ctx.config.timeout_s)
        try:
            hvd = importlib.import_module(hvd_module)
        except ImportError as error:  # built before this framework was installed
            raise UserError(
                f"Horovod has no {hvd_module} binding here ({error}): make horovod rebuilds it "
                "for every framework installed"
            ) from error
        if os.environ.get("HOROVOD_CONTROLLER") == "mpi" and not hvd.mpi_built():
            raise UserError(
                "this Horovod was built without MPI, which --launcher mpirun needs: "
                "scripts/install-openmpi.sh, then make horovod (rebuilds it with MPI)"
            )
        hvd.init()
        self._hvd = hvd
        if hvd.size() != ctx.processes or hvd.rank() != ctx.rank:
            raise RuntimeError(
                f"horovod says rank {hvd.rank()} of {hvd.size()}, dlscale rank {ctx.rank} of "
                f"{ctx.processes}: the launcher and the layout disagree"
            )
        return hvd

    def facts(self, cfg: Any) -> dict[str, Any]:
        """What the run's ``strategy`` record says of Horovod."""
        import horovod

        hvd = self._hvd
        controller = "mpi" if hvd.mpi_enabled() else "gloo"
        return {
            "horovod_version": horovod.__version__,
            "horovod_controller": controller,
            "horovod_built": {
                "gloo": hvd.gloo_built(),
                "mpi": hvd.mpi_built(),
                "nccl": bool(hvd.nccl_built()),
            },
            "fusion_threshold_bytes": int(os.environ["HOROVOD_FUSION_THRESHOLD"]),
            "cycle_time_ms": float(os.environ["HOROVOD_CYCLE_TIME"]),
            PATTERN_FACT: "ring",
            "traces": [TIMELINE] if cfg.typed(HorovodCommon).horovod_timeline else [],
        }

    def write_messages(self, steps: StepMessages | None = None) -> None:
        """After the last step, on every rank: stop the timeline where the run recorded one;
        on the first training rank (Horovod's rank 0, which wrote it) write the messages of a
        typical step as the run's :class:`~dlscale.contract.records.Messages`: the fused
        responses in the timeline, else ``steps``' (from the gradients' ready times, where
        the binding has them: horovod-torch); nothing where neither has a whole step."""
        ctx = self._ctx
        assert ctx is not None
        if self._timeline is not None:
            self._hvd.stop_timeline()
        if ctx.rank != ctx.layout.training_ranks[0]:
            return
        messages: list[int] = []
        ready_ms: list[float] = []
        if self._timeline is not None:
            seen = fused_steps(self._timeline)
            messages = typical_step(seen)
            source = f"Horovod's timeline ({TIMELINE}): its fused responses"
        elif steps is not None:
            formed = steps.steps()
            seen = [sizes for sizes, _ in formed]
            if seen:
                messages, ready_ms = formed[median_index(seen)]
            source = (
                f"the gradients' ready times on rank {ctx.rank}, fused within Horovod's "
                f"{steps.cycle_s * 1e3:g} ms cycle"
            )
        else:
            return
        if messages:
            ctx.events.write(
                Messages(
                    message_bytes=messages,
                    ready_ms=ready_ms,
                    cycle_ms=float(os.environ["HOROVOD_CYCLE_TIME"]),
                    fusion_bytes=int(os.environ["HOROVOD_FUSION_THRESHOLD"]),
                    steps=len(seen),
                    counts=sorted(len(step) for step in seen),
                    source=source,
                )
            )

    def shutdown(self) -> None:
        if self._hvd is not None and self._hvd.is_initialized():
            self._hvd.shutdown()
        if self._rendezvous is not None:
            self._rendezvous.shutdown()
            self._rendezvous.server_close()


def serve_or_await_rendezvous(timeout_s: float) -> Any:
    """Before ``hvd.init``: rank 0 serves the Gloo rendezvous when dlscale's launcher gave it
    the host plan (returns the server, to shut down at the end); the others, under Gloo, wait
    until some server takes connections (at once under horovodrun, whose server is up before
    any rank starts). ``None`` where this rank serves nothing."""
    if plan := os.environ.get(RENDEZVOUS_ENV):
        return start_rendezvous(plan, int(os.environ["HOROVOD_SIZE"]))
    if (
        os.environ.get("HOROVOD_CONTROLLER") == "gloo"
        and "HOROVOD_GLOO_RENDEZVOUS_ADDR" in os.environ
    ):
        wait_for_rendezvous(timeout_s)
    return None


def wait_for_rendezvous(timeout_s: float) -> None:
    """Return once the Gloo rendezvous server takes connections. ``hvd.init`` tries it three
    times, 0.5 s apart, then aborts the process (SIGABRT, from a C++ exception): a rank that
    reaches ``init`` while rank 0, slower on a loaded machine, is still importing its framework
    must wait here instead."""
    address = (
        os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"],
        int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"]),
    )
    if error := await_listener(address, timeout_s):
        raise RuntimeError(
            f"Horovod's rendezvous on rank 0 ({address[0]}:{address[1]}) took no "
            f"connection in {timeout_s:g} s ({error}): is rank 0 running?"
        )


def start_rendezvous(plan: str, size: int) -> Any:
    """Horovod's Gloo rendezvous server (the HTTP key-value store horovodrun serves) in a thread
    of this process: rank 0's under a launcher other than horovodrun, on the address and port
    every rank was given, with the host plan horovodrun would make (``host:slots,...``).
    (``RendezvousServer.start()`` picks its own port, which the other ranks could not know.)"""
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer
    from horovod.runner.util.threads import in_thread

    address = (
        os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"],
        int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"]),
    )
    server = RendezvousHTTPServer(address, RendezvousHandler, 0)
    server.init(get_host_assignments(parse_hosts(plan), size))
    in_thread(target=server.serve_forever)
    return server
