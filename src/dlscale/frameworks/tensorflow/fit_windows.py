"""One Keras ``fit`` call for a whole run, paused at each window's end.

A user trains with one long ``fit``; a measurement that called ``fit`` once a window would time,
in every window, what such a user pays once: ``fit``'s set-up and, at its end, the destruction
of its distributed iterator, which blocked the main thread for 2.6-5.6 s a window under
MultiWorkerMirroredStrategy across emulated nodes (docs/perfmodel.md, py-spy:
``~MultiDeviceIterator`` waiting for a tf.data thread). So :class:`FitWindows` runs ``fit`` once,
in a thread of its own, over the data stream of the whole run; a callback (:class:`_Gate`) stops
it after each window's last step, hands the window's running mean losses back and waits there
until the kernel asks for the next window. The kernel's thread times each window from handing
it over to getting it back: the window's steps and Keras' per-step callbacks, nothing of
``fit``'s set-up (it falls in the warm-up) or of its end (after the last window, in
:meth:`FitWindows.stop`). The evaluation between windows runs in the kernel's thread while
``fit`` is paused; so does the swap of the train function by which the exposed-communication
probe's unsynchronized steps run inside the same ``fit`` (:meth:`FitWindows.train_with`).

With ``steps_per_execution`` above 1 Keras runs several steps per call of its compiled train
function and calls the batch callbacks only between such calls; the gate shortens the call
that would cross a window's end (as Keras shortens an epoch's last call, by assigning the
model's ``_steps_per_execution`` counter, which the train function's loop and Keras' step
count both read at each call), so windows of any length end where the kernel asked.
"""

from __future__ import annotations

import math
import queue
import threading
from typing import Any

from dlscale.frameworks.tensorflow.env import import_tensorflow

tf = import_tensorflow()

ENDLESS = 2**62
"""``fit``'s ``steps_per_epoch``: the run ends when :meth:`FitWindows.stop` says so, not at a
count (the data stream has no end)."""


class FitWindows:
    """``model.fit(data, ...)`` run window by window; ``callbacks`` go to ``fit`` before the
    gate (Horovod's broadcast of the initial weights)."""

    def __init__(self, model: Any, data: Any, callbacks: list[Any], steps_per_execution: int):
        self._model, self._data, self._callbacks = model, data, callbacks
        self._gate = _Gate(steps_per_execution)
        self._thread: threading.Thread | None = None
        self._own: Any = None  # fit's own train function, while another stands in for it

    def window(self, steps: int) -> list[float]:
        """Run ``steps`` steps; the running mean of the window's losses after each call of
        Keras' train function (after each step when ``steps_per_execution`` is 1). An error of
        ``fit`` is raised here, in the caller's thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._fit, name="keras-fit", daemon=True)
            self._thread.start()
        self._gate.windows.put(steps)
        ended = self._gate.ended.get()
        if isinstance(ended, BaseException):
            raise ended
        if ended is None:  # fit returned without being stopped: it ran out of steps
            raise RuntimeError(f"Keras fit ended before its window of {steps} steps")
        return ended

    def train_with(self, function: Any | None) -> Any | None:
        """Let the next windows' steps run ``function`` (``None``: ``fit``'s own train function)
        in place of Keras' train function; ``fit`` looks the model's ``train_function`` up at
        each call, and reads nothing of it while paused, when this is called. Returns the one
        it replaces (``None``: ``fit``'s own)."""
        if self._own is None:
            self._own = self._model.train_function
        before = self._model.train_function
        self._model.train_function = self._own if function is None else function
        return None if before is self._own else before

    def stop(self) -> None:
        """End ``fit`` after the last window and wait for it (its iterator's teardown)."""
        if self._thread is None or not self._thread.is_alive():  # never started, or failed
            return
        self._gate.windows.put(None)
        ended = self._gate.ended.get()
        self._thread.join()
        if isinstance(ended, BaseException):
            raise ended

    def _fit(self) -> None:
        try:
            self._model.fit(
                self._data,
                steps_per_epoch=ENDLESS,
                epochs=1,
                verbose=0,
                callbacks=[*self._callbacks, self._gate],
            )
        except BaseException as error:  # to the kernel's thread, which raises it
            self._gate.ended.put(error)
        else:
            self._gate.ended.put(None)


class _Gate(tf.keras.callbacks.Callback):  # type: ignore[name-defined]
    """Stops ``fit`` between windows. It takes Keras' own tensors (``_supports_tf_logs``): no
    step waits for its loss to be copied to a Python number, which a batch callback otherwise
    makes ``fit`` do after every step; the window's values are read once, at its end (which
    also waits for its last step)."""

    _supports_tf_logs = True

    def __init__(self, steps_per_execution: int) -> None:
        super().__init__()
        self.windows: queue.Queue[int | None] = queue.Queue()
        """The next window's steps; ``None``: stop."""
        self.ended: queue.Queue[list[float] | BaseException | None] = queue.Queue()
        """A window's running means, an error of ``fit``, or ``None`` when ``fit`` returned."""
        self._per_call = steps_per_execution
        self._left = self._running = 0
        self._means: list[Any] = []

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._open()

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._means.append((logs or {}).get("loss", math.nan))
        self._left -= self._running
        if self._left > 0:
            self._next_call()
            return
        self.ended.put([float(mean) for mean in self._means])
        self._open()

    def _open(self) -> None:
        """Wait for the next window: reset the loss's running mean (each window's means are its
        own, as each epoch's are in Keras), or stop ``fit``."""
        steps = self.windows.get()
        if steps is None:
            self.model.stop_training = True
            return
        self.model.reset_metrics()
        self._means, self._left = [], steps
        self._next_call()

    def _next_call(self) -> None:
        self._running = min(self._per_call, self._left)
        if self._per_call > 1:
            self.model._steps_per_execution.assign(self._running)


def step_losses(means: list[float]) -> list[float]:
    """Each step's loss from the running means of a window's steps: step i's loss is
    ``i m_i - (i-1) m_(i-1)``."""
    return [(i + 1) * mean - i * (means[i - 1] if i else 0.0) for i, mean in enumerate(means)]


def unsynchronized_train_function(model: Any) -> Any:
    """A train function for ``fit`` (a call runs one step from ``fit``'s iterator) that does
    what Keras' own step does but synchronize: the forward, loss, backward, the optimizer's
    update of the local replica and the loss metric, with the gradients neither all-reduced by
    the strategy (``skip_gradients_aggregation``, as tf-mwms' custom loop skips it) nor by
    Horovod (its ``DistributedOptimizer`` all-reduces in ``_compute_gradients``, which a tape's
    gradients do not pass), and the logs taken from the first local replica, not summed across
    the workers. The exposed-communication probe times it beside ``fit``'s own step."""
    variables = model.trainable_variables

    def replica_step(data: Any) -> Any:
        x, y, weights = tf.keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            predicted = model(x, training=True)
            loss = model.compute_loss(x, y, predicted, weights)
        gradients = tape.gradient(loss, variables)
        model.optimizer.apply_gradients(
            list(zip(gradients, variables, strict=True)), skip_gradients_aggregation=True
        )
        return model.compute_metrics(x, y, predicted, weights)

    return _local_train_function(model, replica_step)


def forward_train_function(model: Any) -> Any:
    """A train function for ``fit`` that runs a step's forward and loss alone (recorded on a
    tape, as the step records them), with no backward or update: the probe's forward step,
    for the share of a step that backward and the update take."""

    def replica_forward(data: Any) -> Any:
        x, y, weights = tf.keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape():
            predicted = model(x, training=True)
            model.compute_loss(x, y, predicted, weights)
        return model.compute_metrics(x, y, predicted, weights)

    return _local_train_function(model, replica_forward)


def _local_train_function(model: Any, replica_step: Any) -> Any:
    """``replica_step`` on each local replica of one batch of ``fit``'s iterator, its logs
    taken from the first (nothing crosses the workers)."""
    strategy = model.distribute_strategy

    @tf.function(reduce_retracing=True)
    def train_function(iterator: Any) -> Any:
        outputs = strategy.run(replica_step, args=(next(iterator),))
        return tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], outputs)

    return train_function
