"""horovod-tf: Horovod's ``DistributedGradientTape`` (Gloo or MPI) under TensorFlow's default
strategy, on the TensorFlow custom loop (:mod:`dlscale.frameworks.tensorflow.loop`), with
Horovod's compression, fusion and cycle-time options."""

from __future__ import annotations

from typing import Any

from dlscale.contract.comm_bytes import ring_bytes_mean
from dlscale.frameworks.horovod.declare import HorovodCommon
from dlscale.frameworks.horovod.session import HorovodSession
from dlscale.frameworks.tensorflow.env import import_tensorflow, set_threads
from dlscale.frameworks.tensorflow.loop import TFStrategy, run_training
from dlscale.runtime.context import WorkerContext

tf = import_tensorflow()


class HorovodTape(TFStrategy):
    synchronizes = True
    aggregates_in_optimizer = False

    def __init__(self) -> None:
        self._session = HorovodSession()
        self._compression: Any = None
        self._scale = 1.0

    def setup(self, ctx: WorkerContext) -> Any:
        set_threads(ctx.threads, 1)
        hvd = self._session.start(ctx, "horovod.tensorflow")
        self.hvd = hvd
        fp16 = ctx.config.typed(HorovodCommon).compression == "fp16"
        self._compression = hvd.Compression.fp16 if fp16 else hvd.Compression.none
        self._scale = 0.5 if fp16 else 1.0
        return tf.distribute.get_strategy()

    def gradients(self, tape: Any, loss: Any, variables: list[Any], sync: bool) -> Any:
        if sync:
            tape = self.hvd.DistributedGradientTape(tape, compression=self._compression)
        return tape.gradient(loss, variables)

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
        self._session.shutdown()


def run(ctx: WorkerContext) -> None:
    run_training(ctx, HorovodTape())
