"""The Flax twins compute what their PyTorch models compute (issue 47: like for like, proven).

For every model family of the registry (ResNet-20 for the CIFAR ResNets, whose depths only
repeat its block), as tests/unit/test_keras_twins.py holds the Keras twins: the
same parameter names and count, and with the PyTorch initial weights copied in, the same eval
output (float32, rtol 1e-4) and, in float64, the same losses over 3 of the JAX engines' steps
(training-mode BatchNorm, PyTorch's SGD with momentum and weight decay: ``loop.torch_sgd``) to
1e-9. Dropout off on both sides (its masks cannot match across frameworks). The ImageNet nets
at 10 classes and small images (their layers depend on neither beyond the shapes); GoogLeNet at
64 px takes ``ceil_mode`` where it differs from the floor (32 -> 16, not 15), AlexNet at 64 px
a non-dividing adaptive average pool (1x1 -> 6x6).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from dlscale.contract.models import MODELS
from dlscale.frameworks.torch.weights import torch_state
from tests.unit.torch_steps import torch_losses

pytestmark = pytest.mark.twins

LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 5e-4
CASES = {  # name -> (image size, batch)
    "tiny": (32, 4),
    "resnet20": (32, 4),
    "resnet50": (64, 4),
    "alexnet": (64, 2),
    "googlenet": (64, 4),
}


@functools.cache
def _jax() -> SimpleNamespace:
    """JAX with float64 on (this process's config: no other test here computes in JAX), and the
    twins' modules, imported by the first test that needs them."""
    from dlscale.frameworks.jax.env import import_jax

    jax = import_jax(threads=1, precision="float64")
    from dlscale.frameworks.jax import loop, transfer

    return SimpleNamespace(jax=jax, loop=loop, transfer=transfer)


def _flax(name: str) -> object:
    spec = MODELS.get(name)
    return spec.build(10, "jax", 0.0 if spec.dropout is not None else None)


def _torch(name: str) -> torch.nn.Module:
    spec = MODELS.get(name)
    torch.manual_seed(0)
    return spec.build(10, "torch", 0.0 if spec.dropout is not None else None)


def _variables(model, state, size: int, dtype: str) -> dict:
    jax = _jax().jax
    shapes = jax.eval_shape(
        lambda: model.init(jax.random.PRNGKey(0), np.zeros((1, 3, size, size), dtype), train=False)
    )
    return _jax().transfer.load_torch_state(shapes, state, dtype)


def _batches(size: int, batch: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [
        (rng.standard_normal((batch, 3, size, size)), rng.integers(0, 10, batch)) for _ in range(3)
    ]


def _flax_losses(model, variables: dict, batches) -> list[float]:
    jax, loop = _jax().jax, _jax().loop
    jnp = jax.numpy
    cfg = SimpleNamespace(effective_lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    params, stats = variables["params"], variables.get("batch_stats", {})
    momentum = jax.tree.map(np.zeros_like, params)

    @jax.jit
    def step(params, stats, momentum, x, y):  # the engine's step, one replica
        def loss_fn(p):
            logits, updates = model.apply(
                {"params": p, "batch_stats": stats}, x, train=True, mutable=["batch_stats"]
            )
            logp = jax.nn.log_softmax(logits)
            return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1)), updates

        (loss, updates), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        params, momentum = loop.torch_sgd(params, momentum, grads, cfg)
        return params, updates.get("batch_stats", {}), momentum, loss

    losses = []
    for x, y in batches:
        params, stats, momentum, loss = step(params, stats, momentum, x, y)
        losses.append(float(loss))
    return losses


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_flax_twin_computes_what_the_pytorch_model_computes(name: str) -> None:
    size, batch = CASES[name]
    torch_model, model = _torch(name), _flax(name)
    state = torch_state(torch_model)
    variables = _variables(model, state, size, "float32")
    params = _jax().transfer.flatten(dict(variables["params"]))
    assert set(params) == {n for n, _ in torch_model.named_parameters()}
    assert sum(v.size for v in params.values()) == sum(p.numel() for p in torch_model.parameters())
    x = _batches(size, batch)[0][0].astype(np.float32)
    torch_model.eval()
    with torch.no_grad():
        expected = torch_model(torch.from_numpy(x)).numpy()
    got = np.asarray(model.apply(variables, x, train=False))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)

    batches = _batches(size, batch)  # float64 images, int64 labels
    variables64 = _variables(model, state, size, "float64")
    ours = _flax_losses(model, variables64, batches)
    theirs = torch_losses(torch_model.double(), batches, LR, MOMENTUM, WEIGHT_DECAY)
    np.testing.assert_allclose(ours, theirs, rtol=1e-9)
    assert len(set(theirs)) == 3  # the steps moved the loss


@pytest.mark.parametrize("name", MODELS.names())
def test_the_flax_twin_has_the_registry_models_parameters(name: str) -> None:
    """Every registered model, through the registry's ``jax`` builder (what the runs call), at
    its default classes and native size: PyTorch's parameter names and shapes (a shape check,
    ``eval_shape``: nothing is computed)."""
    spec = MODELS.get(name)
    torch_model = spec.build(spec.default_classes)
    jax = _jax().jax
    size = spec.input_size
    shapes = jax.eval_shape(
        lambda: spec.build(spec.default_classes, "jax").init(
            jax.random.PRNGKey(0), np.zeros((1, 3, size, size), np.float32), train=False
        )
    )
    ours = {k: v.shape for k, v in _jax().transfer.flatten(dict(shapes["params"])).items()}
    assert ours == {n: tuple(p.shape) for n, p in torch_model.named_parameters()}


def test_transfer_refuses_a_twin_that_drifted() -> None:
    model = _flax("tiny")
    state = torch_state(MODELS.get("tiny").build(10))
    with pytest.raises(ValueError, match=r"extra\.weight"):
        _variables(model, {**state, "extra.weight": np.zeros(3, np.float32)}, 32, "float32")
    with pytest.raises(ValueError, match=r"fc\.bias"):
        _variables(model, {k: v for k, v in state.items() if k != "fc.bias"}, 32, "float32")
    with pytest.raises(ValueError, match="does not fit"):
        _variables(model, torch_state(MODELS.get("tiny").build(7)), 32, "float32")
