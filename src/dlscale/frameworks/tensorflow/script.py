"""A user's TensorFlow training script (tf-script; a Horovod TensorFlow one under
horovod-script), unmodified: ``model.fit`` under MultiWorkerMirroredStrategy, or a loop of
its own (``GradientTape`` and ``apply_gradients``, in a ``tf.function`` or not).

The worker has set ``TF_CONFIG`` (every process a ``worker``, as a cluster manager would), so
the script's own ``MultiWorkerMirroredStrategy()`` finds its peers, and the script runs as
:func:`dlscale.runtime.script_run.run_script` runs every script. The steps of
``tf.keras.Model.fit`` are counted by a callback that every ``fit`` of the script gets besides
its own: the end of each training batch is a step. The steps of a loop of its own are counted
where its optimizer applies them, from the optimizer's ``iterations``
(:mod:`.applied_steps`); a loop with no Keras optimizer marks them with
``dlscale.mark_step(samples)``. Keras is legacy Keras 2 (tf-keras) as for every TensorFlow
backend (:mod:`dlscale.frameworks.tensorflow.env`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlscale.frameworks.tensorflow import applied_steps
from dlscale.frameworks.tensorflow.env import import_tensorflow, tensorflow_environment
from dlscale.runtime.script_run import run_script
from dlscale.runtime.script_steps import StepRecorder

if TYPE_CHECKING:
    from dlscale.runtime.context import WorkerContext

_CALLBACKS_POSITION = 5
"""``fit(x, y, batch_size, epochs, verbose, callbacks, ...)``: where callbacks come when
given by position."""


def run(ctx: WorkerContext) -> None:
    tf = import_tensorflow()
    tf.config.threading.set_intra_op_parallelism_threads(ctx.threads)
    run_script(ctx, tensorflow_environment(), _hooks)


def _hooks(recorder: StepRecorder, path: Path) -> Callable[[], None]:
    """Every ``tf.keras.Model.fit`` gets a callback that ends a step at each batch's end, and
    every Keras optimizer's applied steps outside ``fit`` end one each; returns the removal
    of the hooks."""
    tf = import_tensorflow()
    applied, remove_applied = applied_steps.install(tf, recorder)
    model_class = tf.keras.Model
    original = model_class.fit

    class EndOfStep(tf.keras.callbacks.Callback):  # type: ignore[name-defined]
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            recorder.stepped()

    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        if len(args) > _CALLBACKS_POSITION:
            args = (
                *args[:_CALLBACKS_POSITION],
                [*(args[_CALLBACKS_POSITION] or []), EndOfStep()],
                *args[_CALLBACKS_POSITION + 1 :],
            )
        else:
            kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), EndOfStep()]
        applied.in_fit += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            applied.passed()  # fit's steps were its callback's
            applied.in_fit -= 1

    model_class.fit = fit

    def remove() -> None:
        model_class.fit = original
        remove_applied()

    return remove
