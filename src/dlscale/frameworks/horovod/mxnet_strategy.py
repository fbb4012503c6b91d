"""horovod-mxnet: Horovod's ``DistributedTrainer`` on the MXNet Gluon loop
(:mod:`dlscale.frameworks.mxnet.loop`): gradients all-reduced (averaged) before a local update."""

from __future__ import annotations

from typing import Any

import numpy as np

from dlscale.contract.comm_bytes import ring_bytes_mean
from dlscale.frameworks.horovod.counting import CountingCompression
from dlscale.frameworks.horovod.declare import HorovodCommon
from dlscale.frameworks.horovod.session import HorovodSession
from dlscale.frameworks.mxnet.loop import MXStrategy, run_training
from dlscale.runtime.context import WorkerContext


def _nbytes(array: Any) -> int:
    """An MXNet NDArray's bytes, from its shape and dtype (no wait on its value)."""
    return int(array.size) * np.dtype(array.dtype).itemsize


class HorovodMX(MXStrategy):
    """Horovod's ``DistributedTrainer``: gradients all-reduced (averaged) before a local update;
    MKLDNN off (Horovod's ops cannot read its arrays)."""

    synchronizes = True

    def __init__(self) -> None:
        self.session = HorovodSession()
        self.hvd: Any = None
        self.fp16 = False
        self._counter: CountingCompression | None = None

    def setup(self, ctx: WorkerContext, mx: Any) -> None:
        self.hvd = self.session.start(ctx, "horovod.mxnet")
        self.fp16 = ctx.config.typed(HorovodCommon).compression == "fp16"

    def trainer(self, params: Any, cfg: Any, mx: Any) -> Any:
        from dlscale.frameworks.mxnet.sgd import make_sgd  # imports mxnet: after import_mxnet

        hvd = self.hvd
        hvd.broadcast_parameters(params, root_rank=0)
        compression = hvd.Compression.fp16 if self.fp16 else hvd.Compression.none
        self._counter = CountingCompression(compression, _nbytes)
        return hvd.DistributedTrainer(params, make_sgd(cfg), compression=self._counter)

    def take_bytes_sent(self) -> int | None:
        """Counted from every tensor the compressor hands to the all-reduce (the ring factor
        applied), as horovod-torch counts."""
        return None if self._counter is None else self._counter.take_sent(self.hvd.size())

    def unsynced_update(self, trainer: Any, samples: int) -> None:
        trainer.update(samples)  # the local update without the all-reduce

    def modelled_bytes(self, gradient_bytes: int, replicas: int) -> float | None:
        # fp16 compression halves what goes on the wire
        return ring_bytes_mean(round(gradient_bytes * (0.5 if self.fp16 else 1.0)), replicas)

    def describe(self, ctx: WorkerContext, model: Any = None) -> dict[str, Any]:
        return {
            "algorithm": "ring all-reduce (Horovod)",
            "compression": ctx.config.typed(HorovodCommon).compression,
            **self.session.facts(ctx.config),
        }

    def teardown(self, completed: bool = True) -> None:
        if completed:  # the messages in Horovod's timeline, where the run recorded one
            self.session.write_messages()
        self.session.shutdown()


def run(ctx: WorkerContext) -> None:
    run_training(ctx, HorovodMX())
