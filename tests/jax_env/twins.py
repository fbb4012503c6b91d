"""The Flax twins against their PyTorch models, in a process of its own (JAX is not imported
into the test runner's workers: beside TensorFlow, imported there by the Keras twin tests, it
took a pytest-xdist worker down). Prints one JSON line per model:

* ``names``: the twin's parameter names and shapes equal the PyTorch model's;
* ``eval_error``: the largest ``|ours - theirs| / (1e-5 + 1e-4 |theirs|)`` of the eval output
  from the same float32 weights (1 or less: within rtol 1e-4, atol 1e-5);
* ``ours``, ``theirs``: the losses of 3 SGD steps in float64 (JAX engines' step against
  PyTorch's), from the same weights and batches.

``--shapes NAME...`` prints, per model, whether the registry's ``jax`` builder at the model's
default classes and native size has PyTorch's parameter names and shapes (``eval_shape``:
nothing computed).

Usage: python tests/jax_env/twins.py [--shapes] NAME:SIZE:BATCH...
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import numpy as np
import torch
from tests.unit.torch_steps import torch_losses

from dlscale.contract.layout import usable_cores
from dlscale.contract.models import MODELS
from dlscale.frameworks.jax import steps, transfer
from dlscale.frameworks.jax.env import import_jax
from dlscale.frameworks.torch.weights import torch_state

# Every CPU this process may use, not one: pinned to one CPU (what threads=1 does, as a 1-thread
# engine worker is), PyTorch's default threads took turns on that core (GoogLeNet's 3 float64
# steps 21 s, 1.6 s on one thread) and, beside the suite's other tests, the process waited for
# its one core while another was free (59 s of the fixture's 133 s idle)
jax = import_jax(threads=usable_cores(), precision="float64")  # float64 on

LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 5e-4


def _no_dropout(name: str) -> float | None:
    return 0.0 if MODELS.get(name).dropout is not None else None


def _variables(model, state, size: int, dtype: str) -> dict:
    shapes = jax.eval_shape(
        lambda: model.init(jax.random.PRNGKey(0), np.zeros((1, 3, size, size), dtype), train=False)
    )
    return transfer.load_torch_state(shapes, state, dtype)


def _batches(size: int, batch: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [
        (rng.standard_normal((batch, 3, size, size)), rng.integers(0, 10, batch)) for _ in range(3)
    ]


def _flax_losses(model, variables: dict, batches) -> list[float]:
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
        params, momentum = steps.torch_sgd(params, momentum, grads, cfg)
        return params, updates.get("batch_stats", {}), momentum, loss

    losses = []
    for x, y in batches:
        params, stats, momentum, loss = step(params, stats, momentum, x, y)
        losses.append(float(loss))
    return losses


def check(name: str, size: int, batch: int) -> dict:
    spec = MODELS.get(name)
    torch.manual_seed(0)
    torch_model = spec.build(10, "torch", _no_dropout(name))
    model = spec.build(10, "jax", _no_dropout(name))
    state = torch_state(torch_model)
    variables = _variables(model, state, size, "float32")
    ours = {k: v.shape for k, v in transfer.flatten(dict(variables["params"])).items()}
    names = ours == {n: tuple(p.shape) for n, p in torch_model.named_parameters()}
    x = _batches(size, batch)[0][0].astype(np.float32)
    torch_model.eval()
    with torch.no_grad():
        expected = torch_model(torch.from_numpy(x)).numpy()
    # one compile: eager Flax dispatches op by op (GoogLeNet's evaluation 177 s, jitted 14 s)
    evaluate = jax.jit(lambda v, x: model.apply(v, x, train=False))
    got = np.asarray(evaluate(variables, x))
    error = float(np.max(np.abs(got - expected) / (1e-5 + 1e-4 * np.abs(expected))))
    batches = _batches(size, batch)  # float64 images, int64 labels
    losses = _flax_losses(model, _variables(model, state, size, "float64"), batches)
    theirs = torch_losses(torch_model.double(), batches, LR, MOMENTUM, WEIGHT_DECAY)
    return {"model": name, "names": names, "eval_error": error, "ours": losses, "theirs": theirs}


def shapes(name: str) -> dict:
    spec = MODELS.get(name)
    size = spec.input_size
    built = spec.build(spec.default_classes, "jax")
    sample = (  # a GPT takes token ids, the others images
        np.zeros((1, size), np.int32) if spec.sample == "tokens" else np.zeros((1, 3, size, size))
    )
    tree = jax.eval_shape(lambda: built.init(jax.random.PRNGKey(0), sample, train=False))
    ours = {k: v.shape for k, v in transfer.flatten(dict(tree["params"])).items()}
    theirs = {n: tuple(p.shape) for n, p in spec.build(spec.default_classes).named_parameters()}
    return {"model": name, "names": ours == theirs}


if __name__ == "__main__":
    if sys.argv[1] == "--shapes":
        for name in sys.argv[2:]:
            print(json.dumps(shapes(name)), flush=True)
    else:
        for case in sys.argv[1:]:
            name, size, batch = case.split(":")
            print(json.dumps(check(name, int(size), int(batch))), flush=True)
