"""tf-ps' own push and pull, for ``dlscale microbench --backend tf-ps`` (``ps_mode = "sync"``): the
same sizes, iterations, untimed preparation, check and records as every kernel (the loop is
:mod:`dlscale.microbench.timing`'s), on the way tf-ps' synchronous step moves its gradient and
variables (:mod:`dlscale.frameworks.tensorflow.ps_sync`: TF1's ``SyncReplicasOptimizer`` in a
``tf.compat.v1.Session``, over TensorFlow's gRPC between tasks):

* ps_pushpull: the message of ``size`` bytes is ``k`` resource variables on the ps tasks, one a
  task, in near-equal parts (:func:`~dlscale.microbench.timing.server_parts`: as a model's
  variables are spread over the ps tasks; fewer parts where the message has fewer elements
  than there are tasks). One call is one ``Session.run`` of a graph on this worker: each part
  of the worker's message (a variable on this worker) is added into its ps variable
  (``assign_add``: the push, as a gradient goes into the ps's accumulator); then the worker
  waits at a gate the way the optimizer's workers wait for their token (every worker says it
  pushed in a queue on ps task 0; worker 0, the chief, takes all N and puts a token a worker
  in a second queue; each worker takes one); then each ps variable is read into a variable
  on this worker (the pull, as the next step's forward reads the updated variables). The ps
  variables keep summing call after call (no reset: a reset by one worker could race another
  worker's pull), so the check after the first timed call expects that many calls' sums.
  Recorded as ``ps_pushpull`` with the tasks that held the message (``Collective.servers``),
  which the ``ps`` fit and ``predict --validate``'s ``ps_pushpull/<servers>`` read.

Only the workers run this; the ps tasks serve as in training (:func:`~.ps.serve`). The barrier
before each call is a second gate of the same kind (untimed). A size's variables are made
before its first call (worker 0 initializes the ps ones, each worker its own, then a barrier)
and freed after its last (``DestroyResourceOp``, after a barrier), so a ps task holds one
size's at a time. CPU only, as tf-mwms' kernel. The synchronous layout only (every worker its
own process, which tf-ps' asynchronous layout has not: its chief drives every replica), which
the microbench takes unless told otherwise (``BackendSpec.collectives_options``); its rows
price both modes' predictions.

Not in these times: the chief applying the mean with its optimizer (compute on the ps, which
the model prices from the point's step) and Python's feed of each step's batch.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np

from dlscale.frameworks.tensorflow.declare import TFPSOptions, check_ps_collectives
from dlscale.frameworks.tensorflow.ps_sync import start_worker_server, tf, v1, worker_session
from dlscale.microbench import Settings
from dlscale.microbench.timing import Operation, server_parts, time_offered
from dlscale.runtime.context import WorkerContext

OFFERED = ("ps_pushpull",)
"""tf-ps moves only its pushes and pulls."""


def run(ctx: WorkerContext, settings: Settings) -> None:
    check_ps_collectives(ctx.config)  # as dlscale microbench checked it before launch
    options = ctx.config.typed(TFPSOptions)
    kernel = _PushPull(ctx, options.num_ps)
    p, rank = ctx.config.workers, ctx.process.index
    for record in time_offered(
        settings, OFFERED, p, rank,
        lambda _collective, _size, count: kernel.operation(count),
        kernel.barrier,
    ):  # fmt: skip
        held = len(server_parts(record.bytes // 4, options.num_ps))
        ctx.events.write(dataclasses.replace(record, servers=held))


class _Gate:
    """Every worker goes on only once all ``workers`` have arrived, as
    ``SyncReplicasOptimizer``'s workers wait for their token: each puts an item in an arrivals
    queue on ps task 0; worker 0 takes ``workers`` items there, then puts a token a worker in
    a tokens queue; each worker takes one. A gate can be used again and again: worker 0 makes
    the tokens of its next use only once every worker arrived there, which each does after
    taking its token of this one (and worker 0 takes arrivals of the next use only then)."""

    def __init__(self, name: str, worker: int, workers: int) -> None:
        self.worker, self.workers = worker, workers
        with v1.device("/job:ps/task:0"):
            self.arrivals, self.tokens = (
                v1.FIFOQueue(
                    workers,
                    [tf.int32],
                    shapes=[()],
                    shared_name=f"{name}_{kind}",
                    name=f"{name}_{kind}",
                )
                for kind in ("arrivals", "tokens")
            )

    def after(self, ops: list[Any]) -> Any:
        """An op that passes the gate once ``ops`` ran (this worker's part done)."""
        with tf.control_dependencies(ops):
            arrived = self.arrivals.enqueue(self.worker)
        waited = [arrived]
        if self.worker == 0:
            with tf.control_dependencies([arrived]):
                everyone = self.arrivals.dequeue_many(self.workers)
            with tf.control_dependencies([everyone]):
                waited = [self.tokens.enqueue_many([tf.zeros([self.workers], tf.int32)])]
        with tf.control_dependencies(waited):
            return self.tokens.dequeue()


class _PushPull:
    """The kernel's graph and session on this worker; each size's variables in turn."""

    def __init__(self, ctx: WorkerContext, servers: int) -> None:
        self.worker, self.workers, self.servers = ctx.process.index, ctx.config.workers, servers
        _, self.server = start_worker_server(ctx)
        self.graph = tf.Graph()
        self.here = f"/job:worker/task:{self.worker}"
        with self.graph.as_default():
            self._barrier = _Gate("dlscale_microbench_barrier", self.worker, self.workers).after([])
            self._gate = _Gate("dlscale_microbench_gate", self.worker, self.workers)
        self.session = worker_session(ctx, self.server, self.graph)
        self._options = v1.RunOptions(timeout_in_ms=int(ctx.config.timeout_s * 1000))
        self._sizes = itertools.count(1)
        self._free: list[Any] = []  # the last size's variables, freed at the next size

    def run(self, fetches: Any) -> Any:
        return self.session.run(fetches, options=self._options)

    def barrier(self) -> None:
        self.run(self._barrier)

    def operation(self, count: int) -> Operation:
        """The push, gate and pull of ``count`` float32 elements, with the untimed reset of
        the pulled copy and the check: each element's difference from the calls' sum."""
        self.barrier()  # every worker done with the last size: its variables can go
        if self._free:
            self.run(self._free)
        tag = next(self._sizes)
        parts = server_parts(count, self.servers)
        with self.graph.as_default():
            held, mine, pulled = [], [], []
            for s, elements in enumerate(parts):
                with v1.device(f"/job:ps/task:{s}"):
                    held.append(self._variable(f"held_{tag}_{s}", elements, 0.0))
                with v1.device(self.here):
                    mine.append(self._variable(f"mine_{tag}_{s}", elements, self.worker + 1.0))
                    pulled.append(self._variable(f"pulled_{tag}_{s}", elements, 0.0))
            pushes = [h.assign_add(m, read_value=False) for h, m in zip(held, mine, strict=True)]
            with tf.control_dependencies([self._gate.after(pushes)]):
                call = tf.group(
                    *(
                        p.assign(h.read_value(), read_value=False)
                        for p, h in zip(pulled, held, strict=True)
                    )
                )
            reset = tf.group(*(p.assign(tf.zeros_like(p), read_value=False) for p in pulled))
            read = [p.read_value() for p in pulled]
            ours = v1.variables_initializer(mine + pulled)
            theirs = v1.variables_initializer(held)
            self._free = [self._destroy(v) for v in mine + pulled]
            if self.worker == 0:
                self._free += [self._destroy(v) for v in held]
        self.run(ours)
        if self.worker == 0:
            self.run(theirs)
        self.barrier()  # no push before the ps variables are there
        sum_of_all = self.workers * (self.workers + 1) / 2
        made = 0  # calls of this size: the ps variables hold that many sums

        def op() -> None:
            nonlocal made
            self.run(call)
            made += 1

        def error() -> np.ndarray:
            got = np.concatenate(self.run(read))
            got -= made * sum_of_all
            return np.abs(got, out=got)

        return (lambda: self.run(reset)), op, error

    @staticmethod
    def _variable(name: str, elements: int, value: float) -> Any:
        return v1.get_variable(
            name, [elements], tf.float32, v1.constant_initializer(value), use_resource=True
        )

    @staticmethod
    def _destroy(variable: Any) -> Any:
        with v1.device(variable.device):
            return tf.raw_ops.DestroyResourceOp(resource=variable.handle)
