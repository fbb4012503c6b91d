"""horovod-tf: Horovod's ``DistributedGradientTape`` (Gloo or MPI) under TensorFlow's default
strategy, on the TensorFlow custom loop (:mod:`dlscale.frameworks.tensorflow.loop`), with
Horovod's compression, fusion and cycle-time options."""

from __future__ import annotations

from typing import Any

from dlscale.contract.comm_bytes import ring_bytes_mean
from dlscale.frameworks.horovod.counting import CountingCompression
from dlscale.frameworks.horovod.declare import HorovodCommon
from dlscale.frameworks.horovod.session import HorovodSession
from dlscale.frameworks.tensorflow.env import import_tensorflow, set_threads
from dlscale.frameworks.tensorflow.loop import TFStrategy, run_training
from dlscale.runtime.context import WorkerContext

tf = import_tensorflow()


class TracedCounting(CountingCompression):
    """:class:`CountingCompression` for Horovod's TensorFlow binding, whose compressor runs once
    per trace of a ``tf.function``, not once per step: each compressed tensor's static size is
    added to an int64 variable by an op in the traced step, so the count follows the steps
    that ran (none where Horovod's all-reduce branch is not taken: one process)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner, _static_nbytes)
        self.variable = tf.Variable(0, dtype=tf.int64, trainable=False, name="dlscale_sent")

    def compress(self, tensor: Any) -> tuple[Any, Any]:
        compressed, context = self.inner.compress(tensor)
        self.variable.assign_add(self.nbytes(compressed))
        return compressed, context

    def take(self) -> int:
        sent = int(self.variable.numpy())
        self.variable.assign(0)
        return sent


def _static_nbytes(tensor: Any) -> int:
    elements = tensor.shape.num_elements()
    if elements is None:
        raise ValueError(f"a gradient of unknown shape {tensor.shape} reached Horovod")
    return int(elements) * tensor.dtype.size


def horovod_compression(hvd: Any, config: Any) -> TracedCounting:
    """The run's Horovod compressor (``compression``: ``none`` or ``fp16``), counting."""
    fp16 = config.typed(HorovodCommon).compression == "fp16"
    return TracedCounting(hvd.Compression.fp16 if fp16 else hvd.Compression.none)


class HorovodTape(TFStrategy):
    synchronizes = True
    aggregates_in_optimizer = False

    def __init__(self) -> None:
        self._session = HorovodSession()
        self._compression: TracedCounting | None = None
        self._scale = 1.0

    def setup(self, ctx: WorkerContext) -> Any:
        set_threads(ctx.threads, 1)
        hvd = self._session.start(ctx, "horovod.tensorflow")
        self.hvd = hvd
        self._compression = horovod_compression(hvd, ctx.config)
        self._scale = 0.5 if self._compression.inner is hvd.Compression.fp16 else 1.0
        return tf.distribute.get_strategy()

    def gradients(self, tape: Any, loss: Any, variables: list[Any], sync: bool) -> Any:
        if sync:
            tape = self.hvd.DistributedGradientTape(tape, compression=self._compression)
        return tape.gradient(loss, variables)

    def take_bytes_sent(self) -> int | None:
        """Counted from every tensor the compressor hands to the all-reduce (the ring factor
        applied), as horovod-torch counts."""
        return None if self._compression is None else self._compression.take_sent(self.hvd.size())

    def modelled_bytes(self, gradient_bytes: int, replicas: int) -> float | None:
        return ring_bytes_mean(round(gradient_bytes * self._scale), replicas)

    def describe(self, ctx: WorkerContext, model: Any = None) -> dict[str, Any]:
        facts = self._session.facts(ctx.config)
        return {
            "algorithm": f"Horovod all-reduce ({facts['horovod_controller']}), modelled as a "
            "ring: 2(N-1)/N x payload",
            **facts,
        }

    def teardown(self, completed: bool = True) -> None:
        if completed:  # the messages in Horovod's timeline, where the run recorded one
            self._session.write_messages()
        self._session.shutdown()


def run(ctx: WorkerContext) -> None:
    run_training(ctx, HorovodTape())
