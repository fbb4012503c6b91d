"""The Keras twins compute what their PyTorch models compute (issue: like for like, proven).

For every model of the registry: the same parameter count, and with the PyTorch initial weights
copied in, the same forward output (rtol 1e-4, float32) and the same loss after 3 SGD steps
(momentum, weight decay, as dlscale's loops step) on the same batches (rtol 1e-3 asked; 1e-6
checked). Dropout is off on both sides (its masks cannot match across engines); every other
layer is the real one.

The 3 steps run in float64 on both sides. In float32 they are chaotic for the ImageNet nets at
a test's batch size: BatchNorm in training mode over few values per channel divides by small
deviations, and PyTorch float32 against PyTorch float64 already differ by 1-16% in the loss
after 3 steps (ResNet-50 at 64-96 px, GoogLeNet at 100 px, batch 4-16, lr 1e-3 to 1e-2; measured
2026-11-22), so a float32 comparison would test rounding, not the twin.
TensorFlow is installed by ``make tensorflow``, which ``make test`` runs.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from dlscale.contract.models import MODELS
from dlscale.frameworks.torch.weights import torch_state
from tests.unit.torch_steps import torch_losses

pytestmark = pytest.mark.twins  # minutes of TensorFlow or MXNet: make test runs them


@functools.cache
def _tf() -> SimpleNamespace:
    """TensorFlow and the twins' modules, imported by the first test that needs them (not at
    collection: every pytest-xdist worker collects this file, one runs it)."""
    from dlscale.frameworks.tensorflow import models
    from dlscale.frameworks.tensorflow.env import import_tensorflow
    from dlscale.frameworks.tensorflow.sgd import TorchSGD
    from dlscale.frameworks.tensorflow.transfer import load_torch_weights

    return SimpleNamespace(
        tf=import_tensorflow(), km=models, TorchSGD=TorchSGD, load=load_torch_weights
    )


LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 5e-4

# name -> (torch builder without dropout, keras builder without dropout, image size, batch):
# ImageNet nets at 10 classes and a smaller size to keep the test fast on 2 cores (their layers
# do not depend on either beyond the shapes). Not smaller than here: BatchNorm in training mode
# over a handful of values per channel (batch 2 on ResNet-50's 2x2 last maps at 64 px) divides
# by a near-zero deviation and turns float rounding into 10% gradient differences between any
# two implementations.
CASES = {
    "tiny": (lambda: MODELS.get("tiny").build(10), lambda: _tf().km.tiny(10), 32, 4),
    "resnet20": (lambda: MODELS.get("resnet20").build(10), lambda: _tf().km.resnet20(10), 32, 4),
    "resnet44": (lambda: MODELS.get("resnet44").build(10), lambda: _tf().km.resnet44(10), 32, 4),
    "resnet50": (
        lambda: MODELS.get("resnet50").build(10),
        lambda: _tf().km.resnet50(10, input_size=96),
        96,
        4,
    ),
    "alexnet": (
        lambda: _torch_alexnet_without_dropout(),
        lambda: _tf().km.alexnet(10, input_size=224, dropout=0.0),
        224,
        2,
    ),
    "googlenet": (
        lambda: _torch_googlenet_without_dropout(),
        lambda: _tf().km.googlenet(10, input_size=100, dropout=0.0),
        100,  # odd sizes on the way (25 -> 12): PyTorch's ceil_mode rule, not Keras' "same"
        4,
    ),
}


def _torch_alexnet_without_dropout() -> torch.nn.Module:
    from dlscale.frameworks.torch.models.alexnet import AlexNet

    return AlexNet(10, dropout=0.0)


def _torch_googlenet_without_dropout() -> torch.nn.Module:
    from dlscale.frameworks.torch.models.googlenet import GoogLeNet

    return GoogLeNet(10, dropout=0.0)


def _batches(size: int, batch: int, count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [
        (
            rng.standard_normal((batch, 3, size, size)).astype(np.float32),
            rng.integers(0, 10, batch).astype(np.int64),
        )
        for _ in range(count)
    ]


def _keras_losses(model, batches) -> list[float]:
    """The TensorFlow engines' step: mean loss, gradient, PyTorch's SGD rule as a Keras optimizer
    (dlscale.frameworks.tensorflow.sgd.TorchSGD: g + wd w, v = m v + g, w -= lr v)."""
    tf = _tf().tf
    optimizer = _tf().TorchSGD(learning_rate=LR, momentum=MOMENTUM, l2=WEIGHT_DECAY)
    losses = []
    for x, y in batches:
        with tf.GradientTape() as tape:
            logits = model(np.transpose(x, (0, 2, 3, 1)), training=True)
            loss = tf.reduce_mean(
                tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
            )
        grads = tape.gradient(loss, model.trainable_weights)
        optimizer.apply_gradients(zip(grads, model.trainable_weights, strict=True))
        losses.append(float(loss))
    return losses


@pytest.mark.parametrize("name", sorted(CASES))
def test_keras_twin_matches_its_pytorch_model(name: str) -> None:
    build_torch, build_keras, size, batch = CASES[name]
    torch.manual_seed(0)
    torch_model = build_torch()
    keras_model = build_keras()
    assert keras_model.count_params() == sum(p.numel() for p in torch_model.parameters()) + sum(
        b.numel() for n, b in torch_model.named_buffers() if not n.endswith("num_batches_tracked")
    )
    state = torch_state(torch_model)
    _tf().load(keras_model, state)

    batches = _batches(size, batch, 3)
    x = batches[0][0]
    torch_model.eval()
    with torch.no_grad():
        expected = torch_model(torch.from_numpy(x)).numpy()
    got = keras_model(np.transpose(x, (0, 2, 3, 1)), training=False).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)

    tf = _tf().tf
    tf.keras.backend.set_floatx("float64")
    try:
        keras64 = build_keras()
    finally:
        tf.keras.backend.set_floatx("float32")
    _tf().load(keras64, {key: value.astype(np.float64) for key, value in state.items()})
    batches64 = [(x.astype(np.float64), y) for x, y in batches]
    theirs = torch_losses(torch_model.double(), batches64, LR, MOMENTUM, WEIGHT_DECAY)
    np.testing.assert_allclose(_keras_losses(keras64, batches64), theirs, rtol=1e-9)


@pytest.mark.parametrize("name", MODELS.names())
def test_keras_twin_has_the_registry_models_parameter_count(name: str) -> None:
    """Every registered model, built through the registry's ``tensorflow`` builder (what the
    runs call) at its default classes and native size."""
    spec = MODELS.get(name)
    trainable = sum(p.numel() for p in spec.build(spec.default_classes).parameters())
    keras_model = spec.build(spec.default_classes, "tensorflow")
    assert sum(int(np.prod(w.shape)) for w in keras_model.trainable_weights) == trainable


def test_transfer_refuses_a_twin_that_drifted() -> None:
    state = torch_state(MODELS.get("tiny").build(10))
    state["extra.weight"] = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match=r"extra\.weight"):
        _tf().load(_tf().km.tiny(10), state)
    state = torch_state(MODELS.get("tiny").build(10))
    del state["fc.bias"]
    with pytest.raises(ValueError, match=r"fc\.bias"):
        _tf().load(_tf().km.tiny(10), state)
    state = torch_state(MODELS.get("tiny").build(7))
    with pytest.raises(ValueError, match="do not fit"):
        _tf().load(_tf().km.tiny(10), state)


def test_keras_3_is_refused_with_the_reason() -> None:
    """A user who forces Keras 3 gets one line naming the variable, not a failure deep inside
    a backend."""
    code = (
        "from dlscale.frameworks.tensorflow.env import import_tensorflow\n"
        "from dlscale.contract.errors import UserError\n"
        "try:\n    import_tensorflow()\nexcept UserError as e:\n    print('REFUSED', e)\n"
    )
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "0"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert "REFUSED tf.keras is keras" in out.stdout, out.stderr[-2000:]
    assert "TF_USE_LEGACY_KERAS=0" in out.stdout
