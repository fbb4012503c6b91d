"""mxnet-kv: Gluon's Trainer on an MXNet kvstore, and the ps-lite scheduler and servers.

``kvstore = "local"``: a ``local`` KVStore in the one process (the update runs in the store).
``dist_sync``, ``dist_device_sync``, ``dist_async``: ps-lite's parameter server. Each worker
pushes every gradient and pulls every parameter each step (``pushpull`` per parameter, in
Gluon's priority order); the optimizer runs in the servers (Gluon's ``update_on_kvstore``, the
default for a dist kvstore). Synchronous servers sum the N workers' pushes, then update once,
so a worker's ``trainer.step`` rescales by the global batch; asynchronous servers apply each
push as it comes, rescaled by the worker's batch and by the run's ``async_update`` rule (by
1/N for ``mean``, the default: :mod:`dlscale.contract.algorithms`), and the version counter of
:mod:`dlscale.frameworks.mxnet.sgd` records each push's staleness in the servers.

The scheduler and servers are the same ``dlscale.worker`` processes with DMLC_ROLE set
(:func:`dlscale.frameworks.mxnet.declare.dmlc_env`): ``import mxnet`` serves until every worker
has finished (MXNet then calls ``sys.exit``), after which a server writes its counters. A
worker's kvstore must be freed explicitly at its end (it waits for the other workers and
tells the servers to stop): the worker process leaves with ``os._exit``, which runs no
destructor.
"""

from __future__ import annotations

import gc
from typing import Any

from dlscale.contract.algorithms import MESSAGES_FACT, PATTERN_FACT, async_gradient_scale
from dlscale.contract.errors import UserError
from dlscale.contract.records import Server, Staleness
from dlscale.frameworks.mxnet.declare import KVOptions, MXLoopOptions
from dlscale.frameworks.mxnet.env import import_mxnet
from dlscale.frameworks.mxnet.loop import MXStrategy, run_training
from dlscale.runtime.context import WorkerContext


class KVStrategy(MXStrategy):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.synchronizes = kind != "local"
        self.asynchronous = kind == "dist_async"
        self.kv: Any = None
        self._trainer: Any = None
        self.counter_key: int | None = None
        self._read: Any = None
        self._version: Any = None
        self.mx: Any = None

    def trainer(self, params: Any, cfg: Any, mx: Any) -> Any:
        from dlscale.frameworks.mxnet.sgd import make_sgd

        self.mx = mx
        self.kv = mx.kv.create(self.kind)
        if self.asynchronous:  # a key no parameter uses: Gluon's keys are the indices of every
            self.counter_key = len(list(params.values()))  # BatchNorm statistics included
        optimizer = make_sgd(cfg, counter_key=self.counter_key)
        self._trainer = mx.gluon.Trainer(params, optimizer, kvstore=self.kv)
        return self._trainer

    def samples_per_update(self, ctx: WorkerContext) -> int:
        """Synchronous servers sum every worker's push, so the global batch; asynchronous ones
        apply each push, scaled by the run's ``async_update`` rule (1/N for ``mean``)."""
        cfg = ctx.config
        if self.synchronizes and not self.asynchronous:
            return cfg.batch_per_worker * cfg.workers
        if self.asynchronous:
            scale = async_gradient_scale(cfg.typed(KVOptions).async_update, cfg.workers)
            return round(cfg.batch_per_worker / scale)
        return cfg.batch_per_worker

    def after_step(self) -> None:
        """Push the version this step's gradients were computed from; pull the current one."""
        if self.counter_key is None:
            return
        nd = self.mx.nd
        if self._version is None:
            self._version = nd.zeros((1,))
            self._read = nd.zeros((1,))
            self.kv.init(self.counter_key, nd.zeros((1,)))
        self._version.copyto(self._read)
        self.kv.pushpull(self.counter_key, self._read, out=self._version)

    def unsynced_update(self, trainer: Any, samples: int) -> None:
        """Nothing: the update runs in the servers (compute only, as torch-ps's probe)."""

    def modelled_bytes(self, gradient_bytes: int, replicas: int) -> float | None:
        """A push of every gradient and a pull of every parameter (torch-ps counts the same)."""
        return 2 * gradient_bytes if self.synchronizes else None

    def describe(self, ctx: WorkerContext, model: Any = None) -> dict[str, Any]:
        """The kvstore's facts; ``model``: the bytes of each trainable parameter, in their keys'
        order (the messages a synchronized step pushes and pulls)."""
        cfg = ctx.config
        facts: dict[str, Any] = {"kvstore": self.kind, "kvstore_type": self.kv.type}
        if self.synchronizes:
            facts.update(
                algorithm="parameter server (ps-lite): push every gradient, pull every parameter",
                servers=cfg.typed(KVOptions).num_servers,
                mode="async" if self.asynchronous else "sync",
                **{PATTERN_FACT: "ps-async" if self.asynchronous else "ps-sync"},
                update_on_kvstore=True,
            )
            if self.asynchronous:
                facts["async_update"] = cfg.typed(KVOptions).async_update
            if model:  # Gluon's Trainer pushes and pulls each trainable parameter as its key
                facts[MESSAGES_FACT] = list(model)
        else:
            facts["algorithm"] = "local kvstore in one process (no network)"
        return facts

    def settle(self, trainer: Any) -> None:
        """Asynchronous: once every worker's pushes are applied (its own waited for, then a
        barrier of all workers), pull every trained parameter from the servers, so each worker
        holds the final model before it is saved (its last pull may miss the others' last
        updates). Synchronous: nothing (every worker holds it after the last round)."""
        if not self.asynchronous or self.kv is None or not trainer._kv_initialized:
            return
        nd = self.mx.nd
        nd.waitall()
        self.kv._barrier()
        for param in trainer._params:
            if param.grad_req != "null":  # BatchNorm's statistics never leave the worker
                index = trainer._param2idx[param.name]
                self.kv.pull(index, out=param.list_data(), priority=-index)
        nd.waitall()

    def teardown(self, completed: bool = True) -> None:
        """Free the kvstore (a worker barrier, then worker 0 stops the servers); after a failure
        the other processes are stopped by the launcher instead (a barrier would wait forever)."""
        if not completed or self.kv is None:
            return
        if self._trainer is not None:
            self._trainer._kvstore = None
            self._trainer._kvstore_params["kvstore"] = None
        self.kv = self._trainer = None
        gc.collect()


def serve(ctx: WorkerContext) -> None:
    """A ps-lite scheduler or server: serve inside ``import mxnet``, then record the counters."""
    cfg = ctx.config
    try:
        import_mxnet(mkldnn=cfg.typed(MXLoopOptions).mkldnn, threads=ctx.threads)
    except SystemExit:  # MXNet's end of serving
        pass
    else:
        raise UserError(
            f"import mxnet returned in a {ctx.process.role} process instead of serving: "
            "DMLC_ROLE was not seen (an mxnet without the distributed kvstore?)"
        )
    if ctx.process.role != "server":
        return
    import sys

    counting = sys.modules.get("dlscale.frameworks.mxnet.sgd")
    staleness = dict(counting.STALENESS) if counting is not None else {}
    if staleness:
        histogram = {str(k): v for k, v in sorted(staleness.items())}
        ctx.events.write(Staleness(server=ctx.process.index, histogram=histogram))
    ctx.events.write(
        Server(server=ctx.process.index, counters={"async_pushes": sum(staleness.values())})
    )


def run(ctx: WorkerContext) -> None:
    if ctx.process.trains:
        run_training(ctx, KVStrategy(ctx.config.typed(KVOptions).kvstore))
    else:
        serve(ctx)
