"""The custom-loop TensorFlow backends: tf-single, tf-mirrored, tf-mwms (horovod-tf, on the
same loop, is in :mod:`dlscale.frameworks.horovod.tensorflow_strategy`).

Each is a :class:`~dlscale.frameworks.tensorflow.loop.TFStrategy` run by the same engine:

* ``tf-single``: the default strategy, one replica, nothing synchronized (the 1-worker
  TensorFlow baseline);
* ``tf-mirrored``: ``MirroredStrategy`` over ``workers`` devices of one process. On a CPU
  machine these are *logical* CPU devices of one thread pool: the replicas share the process's
  cores, and the all-reduce is a sum of in-memory tensors (``ReductionToOneDevice``), so this
  measures TensorFlow's replication machinery, not a network; it is the GPU strategy of one
  machine (NCCL all-reduce) where GPUs exist;
* ``tf-mwms``: ``MultiWorkerMirroredStrategy``: one process per worker, the cluster from
  TF_CONFIG, the gradients all-reduced by TensorFlow's collective ops (ring over gRPC on CPU;
  ``collective`` chooses).
"""

from __future__ import annotations

import json
import os
from typing import Any

from dlscale.contract.algorithms import PATTERN_FACT
from dlscale.contract.comm_bytes import ring_bytes_mean
from dlscale.contract.errors import UserError
from dlscale.frameworks.tensorflow.declare import MWMSOptions
from dlscale.frameworks.tensorflow.env import import_tensorflow, set_threads
from dlscale.frameworks.tensorflow.loop import TFStrategy, run_training
from dlscale.runtime.context import WorkerContext

tf = import_tensorflow()


class Mirrored(TFStrategy):
    synchronizes = True
    distributes_values = True

    def setup(self, ctx: WorkerContext) -> Any:
        replicas = ctx.process.replicas
        # one inter-op thread per replica, so the replicas' ops run side by side
        set_threads(max(1, ctx.threads // replicas), replicas)
        if ctx.config.device == "cuda":
            gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
            if len(gpus) < replicas:
                raise UserError(
                    f"tf-mirrored with {replicas} workers needs {replicas} GPUs; TensorFlow sees "
                    f"{len(gpus)}: use --workers {len(gpus) or 1} or --device cpu"
                )
            return tf.distribute.MirroredStrategy(devices=gpus[:replicas])
        (cpu,) = tf.config.list_physical_devices("CPU")
        logical = tf.config.LogicalDeviceConfiguration
        tf.config.set_logical_device_configuration(cpu, [logical() for _ in range(replicas)])
        devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(
            devices=devices, cross_device_ops=tf.distribute.ReductionToOneDevice()
        )

    def describe(self, ctx: WorkerContext, model: Any = None) -> dict[str, Any]:
        where = "GPUs" if ctx.config.device == "cuda" else "logical CPU devices of one process"
        return {"algorithm": f"MirroredStrategy over {ctx.process.replicas} {where}"}


class MultiWorker(TFStrategy):
    synchronizes = True
    distributes_values = True
    evaluates_in_replica = True

    def setup(self, ctx: WorkerContext) -> Any:
        set_threads(ctx.threads, 1)
        implementation = tf.distribute.experimental.CommunicationImplementation
        self.collective = ctx.config.typed(MWMSOptions).collective
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=getattr(implementation, self.collective.upper())
        )
        dist = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        task = json.loads(os.environ["TF_CONFIG"])["task"]
        if dist.num_replicas_in_sync != ctx.config.workers or task["index"] != ctx.rank:
            raise RuntimeError(
                f"TF_CONFIG task {task} with {dist.num_replicas_in_sync} replicas, dlscale rank "
                f"{ctx.rank} of {ctx.config.workers}: the launcher and the layout disagree"
            )
        return dist

    def modelled_bytes(self, gradient_bytes: int, replicas: int) -> float | None:
        return ring_bytes_mean(gradient_bytes, replicas)

    def describe(self, ctx: WorkerContext, model: Any = None) -> dict[str, Any]:
        return {
            "algorithm": f"TensorFlow collective all-reduce ({self.collective}), modelled as a "
            "ring: 2(N-1)/N x payload",
            "collective": self.collective,
            PATTERN_FACT: "ring",
        }


def run_single(ctx: WorkerContext) -> None:
    run_training(ctx, TFStrategy())


def run_mirrored(ctx: WorkerContext) -> None:
    run_training(ctx, Mirrored())


def run_mwms(ctx: WorkerContext) -> None:
    run_training(ctx, MultiWorker())
