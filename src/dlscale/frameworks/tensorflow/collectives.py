"""TensorFlow's cross-worker collectives, the ones MultiWorkerMirroredStrategy's all-reduce
runs on, for ``dlscale microbench --backend tf-mwms``: the same sizes, iterations, untimed
preparation, check and records as :mod:`dlscale.frameworks.torch.collectives` (the loop is
:mod:`dlscale.microbench.timing`'s).

TensorFlow is started as the tf-mwms training backend starts it
(:class:`~dlscale.frameworks.tensorflow.strategies.MultiWorker`: the run's threads, the cluster from
TF_CONFIG, ``MultiWorkerMirroredStrategy`` with the run's ``collective``, which configures the
collective executor, starts this task's gRPC server and the coordination service). Each call is
then one of TensorFlow's collective ops, the op the strategy's own calls end in
(``CollectiveReplicaLauncher`` in ``tensorflow/python/distribute/cross_device_utils.py``), in a
``tf.function`` of its own (one per collective and size, traced once, at the first warm-up
call), with the ``collective`` option as its ``communication_hint``:

* all_reduce: ``CollectiveReduceV2`` (``merge_op="Add"``, ``final_op="Id"``: a sum), what
  ``ReplicaContext.all_reduce(SUM, x)`` and the strategy's gradient all-reduce run;
* all_gather: ``CollectiveGatherV2`` along the first dimension. ``ReplicaContext.all_gather``
  runs two of them: first the shapes (to pad unequal first dimensions), then the data; the
  second alone is timed here, as torch's and Horovod's single call is;
* broadcast: ``CollectiveBcastSendV2`` on rank 0, ``CollectiveBcastRecvV2`` on the others.
  The strategy gives every worker rank 0's initial variables with the V1 ops
  (``CollectiveBcastSend``/``Recv``: the same broadcaster, its keys fixed in the graph, so a
  new key would be a new trace); the V2 ops take the key as a tensor, as the others do.

No op is in place: each returns a new tensor. A reduce copies its input into that output
inside the op when it cannot take the input's buffer (here it cannot: the input is kept for
the next call; a gradient made inside a training step's function can be taken): about 4-5 ms
at 16 MiB on a 2-core machine, within the noise of the 60 ms call, which was no faster when
its input was made inside the function instead. ``prepare`` drops the previous output, so the
check reads the timed call's own result.

Every call gets a new instance key (the same sequence on every rank), as the strategy gives
each of its collectives one; TensorFlow resolves a new instance with the group's leader (a
gRPC call from the other ranks, inside the timed call): 4 B took about 1.8 ms with a new key
against 1.5 ms when one key was reused (2 ranks, 200 calls each, medians). The group key is
the kernel's own, apart from the strategy's.

The barrier before each call is the coordination service's (``wait_at_barrier``, each with a
new name), which the strategy starts between its workers: TensorFlow's barrier between tasks
(in ``tensorflow.python.eager.context``, not in the public API).

Not offered: reduce_scatter (TensorFlow has ``CollectiveReduceScatterV2``, but only over NCCL;
on a CPU the collective executor has no implementation of it and aborts the group) and
send_recv (its collective ops have no point-to-point; the Send/Recv between tasks of
ParameterServerStrategy is another mechanism, not the collectives'). The kernel records
nothing for them and ``dlscale microbench`` says they were not measured. CPU only: on GPUs
the timed call would return before the device finished (untested; refused).
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import numpy as np

from dlscale.frameworks.tensorflow.declare import check_cpu_collectives
from dlscale.frameworks.tensorflow.strategies import MultiWorker, tf
from dlscale.microbench import Settings
from dlscale.microbench.timing import Operation, time_offered
from dlscale.runtime.context import WorkerContext

OFFERED = ("all_reduce", "all_gather", "broadcast")
GROUP_KEY = 0x0D15CA1E
"""The kernel's collective group (every rank's CPU); the strategy numbers its own from 1."""
LEAVING_MS = 30_000
"""How long rank 0 waits for another rank to say it is leaving, past the last barrier."""


def run(ctx: WorkerContext, settings: Settings) -> None:
    check_cpu_collectives(ctx.config)  # as dlscale microbench checked it before launch
    strategy = MultiWorker()
    dist = strategy.setup(ctx)
    (device,) = dist.extended.worker_devices  # this worker's CPU
    collectives = _Collectives(ctx, strategy.collective, device)
    p, rank = ctx.processes, ctx.rank
    for record in time_offered(
        settings, OFFERED, p, rank,
        lambda collective, _, count: collectives.operation(collective, count),
        collectives.barrier,
    ):  # fmt: skip
        ctx.events.write(record)
    collectives.leave()


class _Collectives:
    """The kernel's calls and barrier on this rank: instance keys and barrier names are
    counted, the same on every rank (every rank makes the same calls in the same order)."""

    def __init__(self, ctx: WorkerContext, hint: str, device: str) -> None:
        from tensorflow.python.eager import context

        self._context = context.context()
        self.p, self.rank, self.hint, self.device = ctx.processes, ctx.rank, hint, device
        self._barriers = itertools.count(1)
        self._instances = itertools.count(1)
        self._timeout_ms = int(ctx.config.timeout_s * 1000)
        self._output: Any = None
        self._key: Any = None

    def barrier(self) -> None:
        self._context.wait_at_barrier(
            f"dlscale.microbench.{next(self._barriers)}", self._timeout_ms
        )

    def leave(self) -> None:
        """No rank leaves (and takes its gRPC server along) while another still waits on a
        call: a last barrier. Rank 0 hosts the coordination service and leaves last: it
        answers every rank's last barrier, and its answer to a rank could still be on its way
        when rank 0's own came back (rank 1 once failed with "Barrier: Socket closed" when
        rank 0 had left). So each other rank, past the barrier, says it is leaving, and rank 0
        waits for that; the saying may fail as rank 0 leaves at once, which loses nothing (every
        call and the barrier are done). The worker then leaves with os._exit, skipping
        TensorFlow's exit-time clean-up of its collective executor."""
        self.barrier()
        key = "dlscale.microbench.left.{}"
        if self.rank != 0:  # an error: rank 0 gone as it answered, nothing was left to do
            with contextlib.suppress(tf.errors.OpError):
                self._context.set_config_key_value(key.format(self.rank), "1")
            return
        for rank in range(1, self.p):  # an error: a rank died past the barrier (its exit says)
            with contextlib.suppress(tf.errors.OpError):
                self._context.get_config_key_value(key.format(rank), LEAVING_MS)

    def _prepare(self) -> None:
        """Outside the clock: the next call's instance key, the last call's output dropped."""
        self._output = None
        self._key = tf.constant(next(self._instances), dtype=tf.int32)

    def operation(self, collective: str, count: int) -> Operation:
        """The call on ``count`` float32 elements (one function per collective and size),
        with its check: each element's difference from the exact result."""
        p, rank, hint, group = self.p, self.rank, self.hint, GROUP_KEY
        # broadcast: rank 0 sends ones; the others' input is not read (they receive)
        value = float(rank == 0) if collective == "broadcast" else float(rank + 1)
        with tf.device(self.device):
            x = tf.fill([count], value)
        if collective == "all_reduce":
            expected = np.full(count, p * (p + 1) / 2, dtype=np.float32)
        elif collective == "all_gather":
            expected = np.repeat(np.arange(1, p + 1, dtype=np.float32), count)
        elif collective == "broadcast":
            expected = np.ones(count, dtype=np.float32)
        else:
            raise ValueError(f"TensorFlow's collectives offer no {collective} on a CPU")

        def call(x: Any, key: Any) -> Any:
            common = {"group_size": p, "group_key": group, "instance_key": key,
                      "communication_hint": hint}  # fmt: skip
            with tf.device(self.device):
                if collective == "all_reduce":
                    return tf.raw_ops.CollectiveReduceV2(
                        input=x, ordering_token=[], merge_op="Add", final_op="Id", **common
                    )
                if collective == "all_gather":
                    return tf.raw_ops.CollectiveGatherV2(input=x, ordering_token=[], **common)
                if rank == 0:
                    return tf.raw_ops.CollectiveBcastSendV2(input=x, **common)
                return tf.raw_ops.CollectiveBcastRecvV2(shape=[count], T=tf.float32, **common)

        traced = tf.function(
            call,
            input_signature=[tf.TensorSpec([count], tf.float32), tf.TensorSpec([], tf.int32)],
            autograph=False,
        )

        def op() -> None:
            self._output = traced(x, self._key)

        return self._prepare, op, lambda: self._error(expected)

    def _error(self, expected: np.ndarray) -> np.ndarray:
        """Each element's difference from ``expected`` (one buffer: the difference, made
        absolute in place); a missing or misshapen result counts as zeros (never exact: every
        expected value is at least 1)."""
        if self._output is None or tuple(self._output.shape) != expected.shape:
            return np.abs(expected)
        difference = self._output.numpy() - expected
        return np.abs(difference, out=difference)
