"""A TensorFlow script's own loop is counted where its optimizer applies its steps (the
optimizer's ``iterations``), whether the step runs eagerly or in a ``tf.function`` (traced
once, called many times), and ``model.fit``'s steps are its callback's alone, never twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest


class Steps:
    """The recorder's side of the hook: how many steps ended."""

    def __init__(self) -> None:
        self.count = 0

    def stepped(self, samples: int | None = None) -> None:
        self.count += 1


@pytest.fixture
def tf() -> Any:
    from dlscale.frameworks.tensorflow.env import import_tensorflow

    return import_tensorflow()


@pytest.fixture
def hooked(tf: Any):
    """The tf-script hooks installed on a fresh recorder, removed after the test."""
    from dlscale.frameworks.tensorflow import script

    steps = Steps()
    remove = script._hooks(steps, Path("loop.py"))  # type: ignore[arg-type]
    yield steps
    remove()


def _model(tf: Any) -> Any:
    return tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,))])


def _tape_step(tf: Any, model: Any, optimizer: Any) -> None:
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(tf.ones((4, 3))) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))


@pytest.mark.parametrize("legacy", [False, True])
def test_a_tf_function_step_and_an_eager_one_each_count_once(tf: Any, hooked: Steps, legacy):
    model = _model(tf)
    optimizers = tf.keras.optimizers.legacy if legacy else tf.keras.optimizers
    optimizer = optimizers.SGD(0.1)

    @tf.function
    def step(first: bool) -> None:
        _tape_step(tf, model, optimizer)

    step(True)
    for _ in range(4):
        step(False)  # traced once more, then called: no Python runs inside
    assert hooked.count == 5 == int(optimizer.iterations)
    _tape_step(tf, model, optimizer)  # eager, outside every tf.function
    assert hooked.count == 6 == int(optimizer.iterations)


def test_nested_functions_two_optimizers_and_unrolled_steps(tf: Any, hooked: Steps):
    model, other = _model(tf), _model(tf)
    first, second = tf.keras.optimizers.SGD(0.1), tf.keras.optimizers.Adam(0.1)

    @tf.function
    def inner() -> None:
        _tape_step(tf, model, first)

    @tf.function
    def gan_like() -> None:  # each optimizer one step: one step of the loop
        inner()
        _tape_step(tf, other, second)

    @tf.function
    def three() -> None:  # a Python loop, unrolled when traced: three steps a call
        for _ in range(3):
            _tape_step(tf, model, first)

    gan_like()
    gan_like()
    assert hooked.count == 2
    three()
    assert hooked.count == 5 == int(first.iterations) and int(second.iterations) == 2


def test_fit_counts_its_batches_once_and_the_loop_after_it_counts_on(tf: Any, hooked: Steps):
    model = _model(tf)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    x, y = np.ones((12, 3), "float32"), np.zeros((12, 2), "float32")
    model.fit(x, y, batch_size=4, epochs=2, verbose=0)  # 6 batches, each its callback's step
    assert hooked.count == 6 == int(model.optimizer.iterations)

    @tf.function
    def step() -> None:
        _tape_step(tf, model, model.optimizer)

    step()
    assert hooked.count == 7


def test_the_hooks_are_removed(tf: Any):
    from dlscale.frameworks.tensorflow import script

    function_call = type(tf.function(lambda: None)).__call__
    apply = tf.keras.optimizers.Optimizer.apply_gradients
    steps = Steps()
    script._hooks(steps, Path("loop.py"))()  # type: ignore[arg-type]
    assert type(tf.function(lambda: None)).__call__ is function_call
    assert tf.keras.optimizers.Optimizer.apply_gradients is apply
    assert "apply_gradients" not in vars(tf.keras.optimizers.SGD)
    optimizer = tf.keras.optimizers.SGD(0.1)
    _tape_step(tf, _model(tf), optimizer)
    assert steps.count == 0
