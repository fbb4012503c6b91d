"""horovod-keras: Keras ``model.fit`` with Horovod's ``DistributedOptimizer`` (which all-reduces
the gradients Keras computes) and no strategy, on the keras-fit engine
(:class:`dlscale.frameworks.tensorflow.keras_fit.FitEngine`)."""

from __future__ import annotations

from dlscale.frameworks.horovod.session import HorovodSession
from dlscale.frameworks.horovod.tensorflow_strategy import horovod_compression
from dlscale.frameworks.tensorflow.env import import_tensorflow, set_threads
from dlscale.frameworks.tensorflow.keras_fit import FitEngine
from dlscale.runtime.context import WorkerContext
from dlscale.runtime.schedule import run_schedule

tf = import_tensorflow()


def run(ctx: WorkerContext) -> None:
    set_threads(ctx.threads, 1)
    session = HorovodSession()
    try:
        hvd = session.start(ctx, "horovod.tensorflow")
        import horovod.tensorflow.keras as hvd_keras

        compression = horovod_compression(hvd, ctx.config)
        fp16 = compression.inner is hvd.Compression.fp16
        dist = tf.distribute.get_strategy()
        engine = FitEngine(ctx, dist, hvd_keras, compression=compression, fp16=fp16)
        facts = session.facts(ctx.config)
        algorithm = f"Horovod all-reduce ({facts['horovod_controller']}), modelled as a ring"
        engine.write_strategy(
            {"strategy": "Horovod DistributedOptimizer", "algorithm": algorithm, **facts}
        )
        run_schedule(ctx, engine)
        session.write_messages()  # those in Horovod's timeline, where the run recorded one
    finally:
        session.shutdown()
