"""Copy a PyTorch model's weights into its Keras twin (:mod:`dlscale.frameworks.tensorflow.models`).

The twin's layers carry the names of the PyTorch modules they mirror, so the copy goes by name:
a convolution's weight (out, in, kh, kw) becomes Keras' kernel (kh, kw, in, out), a linear
layer's (out, in) becomes (in, out), and BatchNorm's weight, bias, running mean and running
variance become gamma, beta, moving mean and moving variance; LayerNorm's weight and bias
become gamma and beta, an embedding's weight its table (the GPT's: its tied ``lm_head.weight``
is ``wte.weight``, one Keras variable, checked to be the same tensor). Every PyTorch tensor
must find its layer and every Keras weight its tensor (``num_batches_tracked`` aside), else the
copy refuses:
a twin that drifted from its model is a bug to see, not to train on.

The state is plain numpy arrays, so a TensorFlow process needs no torch to load one that a torch
process saved (:func:`dlscale.frameworks.torch.weights.torch_state`).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _keras_weights(layer: Any, state: dict[str, np.ndarray], used: set[str]) -> list[np.ndarray]:
    kind, name = type(layer).__name__, layer.name

    def take(suffix: str) -> np.ndarray:
        key = f"{name}.{suffix}"
        if key not in state:
            raise ValueError(f"Keras layer {name} ({kind}) has no PyTorch tensor {key}")
        used.add(key)
        return state[key]

    if kind == "Conv2D":
        weights = [take("weight").transpose(2, 3, 1, 0)]
        return weights + ([take("bias")] if layer.use_bias else [])
    if kind == "Dense":
        return [take("weight").T] + ([take("bias")] if layer.use_bias else [])
    if kind == "BatchNormalization":
        return [take("weight"), take("bias"), take("running_mean"), take("running_var")]
    if kind == "LayerNormalization":
        return [take("weight")] + ([take("bias")] if layer.center else [])
    if kind == "PositionEmbedding":
        return [take("weight")]
    if kind == "TokenEmbedding":  # the GPT's wte, and the head tied to it (one tensor)
        weight = take("weight")
        if layer.tied and "lm_head.weight" in state:
            used.add("lm_head.weight")
            if not np.array_equal(state["lm_head.weight"], weight):
                raise ValueError("PyTorch's lm_head.weight is not wte.weight: the head is not tied")
        return [weight]
    raise ValueError(f"Keras layer {name} ({kind}) has weights the transfer does not know")


def torch_values(keras_model: Any, state: dict[str, np.ndarray]) -> list[tuple[Any, np.ndarray]]:
    """Every weight variable of ``keras_model`` with its value from ``state``, PyTorch's names
    and layouts (:func:`dlscale.frameworks.torch.weights.torch_state`), checked both ways."""
    used: set[str] = set()
    pairs: list[tuple[Any, np.ndarray]] = []
    for layer in keras_model.layers:
        if not layer.weights:
            continue
        weights = _keras_weights(layer, state, used)
        shapes = [tuple(v.shape) for v in layer.weights]
        if [w.shape for w in weights] != shapes:
            raise ValueError(
                f"layer {layer.name}: PyTorch shapes {[w.shape for w in weights]} "
                f"do not fit Keras shapes {shapes}"
            )
        for variable, value in zip(layer.weights, weights, strict=True):
            pairs.append((variable, np.asarray(value, dtype=variable.dtype.as_numpy_dtype)))
    left = sorted(set(state) - used)
    if left:
        raise ValueError(f"PyTorch tensors with no Keras layer: {', '.join(left[:5])}")
    return pairs


def load_torch_weights(keras_model: Any, state: dict[str, np.ndarray]) -> None:
    """Set every weight of ``keras_model`` (eager) from ``state`` (:func:`torch_values`)."""
    for variable, value in torch_values(keras_model, state):
        variable.assign(value)


def keras_state(
    keras_model: Any, *, parameters_only: bool = False, read: Any = None
) -> dict[str, np.ndarray]:
    """The inverse of :func:`load_torch_weights`: the Keras twin's weights under the PyTorch
    state-dict keys and layouts, so a TensorFlow run's parameters compare with a PyTorch run's.
    ``parameters_only``: the trainable weights alone (PyTorch's ``named_parameters``), which
    also leaves BatchNorm's sync-on-read statistics unread (reading them outside a replica is
    an all-reduce under MultiWorkerMirroredStrategy). ``read``: how a layer's variables become
    arrays (a graph's session run); by default each is read eagerly."""
    state: dict[str, np.ndarray] = {}
    for layer in keras_model.layers:
        variables = layer.trainable_weights if parameters_only else layer.weights
        if not variables:
            continue
        weights = (
            [np.asarray(v) for v in read(variables)]
            if read
            else [np.asarray(v.numpy()) for v in variables]
        )
        kind, name = type(layer).__name__, layer.name
        if kind == "Conv2D":
            state[f"{name}.weight"] = weights[0].transpose(3, 2, 0, 1)
            if layer.use_bias:
                state[f"{name}.bias"] = weights[1]
        elif kind == "Dense":
            state[f"{name}.weight"] = weights[0].T
            if layer.use_bias:
                state[f"{name}.bias"] = weights[1]
        elif kind == "LayerNormalization":
            state[f"{name}.weight"] = weights[0]
            if layer.center:
                state[f"{name}.bias"] = weights[1]
        elif kind in ("PositionEmbedding", "TokenEmbedding"):
            state[f"{name}.weight"] = weights[0]
            if kind == "TokenEmbedding" and layer.tied and not parameters_only:
                state["lm_head.weight"] = weights[0]  # PyTorch's state dict holds both names
        elif kind == "BatchNormalization":
            names = ("weight", "bias", "running_mean", "running_var")
            state.update({f"{name}.{k}": w for k, w in zip(names, weights, strict=False)})
        else:
            raise ValueError(f"Keras layer {name} ({kind}) has weights the transfer does not know")
    return state
