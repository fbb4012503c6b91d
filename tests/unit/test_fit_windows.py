"""One Keras ``fit`` runs a whole keras-fit run, paused at each window's end
(frameworks/tensorflow/fit_windows.py): exactly the steps asked, windows of any length with
several steps per call of Keras' train function, one ``fit`` (its set-up and its iterator's end
once), and an error inside ``fit`` raised in the caller's thread. That the steps are the right
ones (the data, the update, each step's loss) is proven against PyTorch on real workers
(tests/distributed/test_tensorflow.py, test_float64.py)."""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import pytest

pytestmark = pytest.mark.twins  # TensorFlow in the test's process: make test runs it


@functools.cache
def _tf() -> SimpleNamespace:
    """TensorFlow, imported by the first test that needs it (not at collection)."""
    from dlscale.frameworks.tensorflow import fit_windows
    from dlscale.frameworks.tensorflow.env import import_tensorflow

    return SimpleNamespace(tf=import_tensorflow(), fw=fit_windows)


def _model(steps_per_execution: int) -> Any:
    tf = _tf().tf
    model = tf.keras.Sequential([tf.keras.Input(shape=(3,)), tf.keras.layers.Dense(2)])
    model.compile(
        optimizer=tf.keras.optimizers.SGD(0.01),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_execution=steps_per_execution,
    )
    return model


def _data(bad_from: int | None = None) -> Any:
    """Endless batches of 4; element ``bad_from`` on fails to read."""
    tf = _tf().tf
    x, y = tf.ones((4, 3)), tf.constant([0, 1, 0, 1])

    def batch(i: Any) -> tuple[Any, Any]:
        if bad_from is not None:
            tf.debugging.assert_less(i, tf.constant(bad_from, tf.int64), message="unreadable")
        return x, y

    return tf.data.Dataset.range(10**9).map(batch)


@pytest.mark.parametrize("per_call", [1, 3])
def test_one_fit_runs_exactly_each_windows_steps(per_call: int):
    tf = _tf().tf
    begun: list[int] = []
    counting = tf.keras.callbacks.LambdaCallback(on_train_begin=lambda logs: begun.append(1))
    model = _model(per_call)
    run = _tf().fw.FitWindows(model, _data(), [counting], per_call)
    windows = (1, 2, 3, 7, 6)
    calls = [len(run.window(steps)) for steps in windows]
    assert int(model.optimizer.iterations.numpy()) == sum(windows)  # no step more or less
    # a call of Keras' train function never crosses a window's end
    assert calls == (list(windows) if per_call == 1 else [1, 1, 1, 3, 2])
    run.stop()
    assert begun == [1]  # one fit for every window
    assert int(model.optimizer.iterations.numpy()) == sum(windows)  # stopping ran no step


def test_an_error_inside_fit_is_raised_in_the_callers_thread():
    tf = _tf().tf
    run = _tf().fw.FitWindows(_model(1), _data(bad_from=5), [], 1)
    run.window(3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="unreadable"):
        run.window(3)  # its third step reads element 5
    run.stop()  # fit has ended: nothing to wait for


def test_step_losses_undo_the_running_mean():
    assert _tf().fw.step_losses([2.0, 3.0, 3.0]) == [2.0, 4.0, 3.0]


def test_the_unsynchronized_train_function_takes_fits_own_step():
    """One process, nothing to all-reduce: fit's step and the probe's unsynchronized one (swapped
    in while fit is paused) update the weights alike, and fit's own comes back after it."""
    tf, fw = _tf().tf, _tf().fw
    own, unsynced = _model(1), _model(1)
    unsynced.set_weights(own.get_weights())
    mine = fw.FitWindows(own, _data(), [], 1)
    theirs = fw.FitWindows(unsynced, _data(), [], 1)
    mine.window(2)
    theirs.window(1)  # fit's own function made, then the stand-in for one step
    theirs.train_with(fw.unsynchronized_train_function(unsynced))
    theirs.window(1)
    theirs.train_with(None)
    for a, b in zip(own.get_weights(), unsynced.get_weights(), strict=True):
        tf.debugging.assert_near(a, b, rtol=1e-6, atol=1e-7)
    mine.window(1)
    theirs.window(1)
    assert int(unsynced.optimizer.iterations.numpy()) == 3
    for a, b in zip(own.get_weights(), unsynced.get_weights(), strict=True):
        tf.debugging.assert_near(a, b, rtol=1e-6, atol=1e-7)
    mine.stop()
    theirs.stop()


def test_the_forward_train_function_updates_nothing_and_hands_back_what_it_replaced():
    """The probe's forward step (the share of a step that backward and the update take) runs
    a batch through fit without changing a weight; the function it stood in for comes back."""
    tf, fw = _tf().tf, _tf().fw
    model = _model(1)
    run = fw.FitWindows(model, _data(), [], 1)
    run.window(1)
    weights = model.get_weights()
    unsynced = fw.unsynchronized_train_function(model)
    assert run.train_with(unsynced) is None  # it replaced fit's own
    assert run.train_with(fw.forward_train_function(model)) is unsynced
    run.window(2)
    assert run.train_with(unsynced) is not None
    assert run.train_with(None) is unsynced
    for a, b in zip(weights, model.get_weights(), strict=True):
        tf.debugging.assert_equal(a, b)
    assert int(model.optimizer.iterations.numpy()) == 1
    run.window(1)  # fit's own again: a step
    assert int(model.optimizer.iterations.numpy()) == 2
    run.stop()
