"""Copy a PyTorch model's state into its Gluon twin (:mod:`dlscale.frameworks.mxnet.models`), and
back.

The twin's parameters carry the PyTorch keys as structural names, BatchNorm's ``gamma`` and
``beta`` standing for ``weight`` and ``bias``; layouts are the same (NCHW, (out, in)). Every
PyTorch tensor must find its parameter and every parameter its tensor (``num_batches_tracked``
aside), else the copy refuses: a twin that drifted from its model is a bug to see, not to
train on. The state is numpy arrays (:func:`dlscale.frameworks.torch.weights.torch_state`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

GLUON_NAMES = {"gamma": "weight", "beta": "bias"}
"""Gluon's BatchNorm parameter names -> PyTorch's."""
STATISTICS = ("running_mean", "running_var")
"""Buffers, not parameters (left out of a run's saved parameters, as ``named_parameters``)."""


def torch_key(gluon_name: str) -> str:
    head, _, leaf = gluon_name.rpartition(".")
    return f"{head}.{GLUON_NAMES.get(leaf, leaf)}"


def gluon_params(net: Any) -> dict[str, Any]:
    """The twin's parameters by PyTorch key."""
    return {torch_key(name): p for name, p in net._collect_params_with_prefix().items()}


def load_torch_weights(net: Any, state: dict[str, np.ndarray]) -> None:
    """Set every parameter of the initialized ``net`` from ``state`` (PyTorch's keys)."""
    params = gluon_params(net)
    missing = sorted(set(params) - set(state))
    if missing:
        raise ValueError(f"Gluon parameters with no PyTorch tensor: {', '.join(missing[:5])}")
    left = sorted(set(state) - set(params))
    if left:
        raise ValueError(f"PyTorch tensors with no Gluon parameter: {', '.join(left[:5])}")
    for key, param in params.items():
        if tuple(param.shape) != state[key].shape:
            raise ValueError(
                f"{key}: PyTorch shape {state[key].shape} does not fit Gluon {tuple(param.shape)}"
            )
        param.set_data(state[key])


def gluon_state(net: Any, *, parameters_only: bool = False) -> dict[str, np.ndarray]:
    """The twin's parameters (and BatchNorm statistics unless ``parameters_only``) as numpy
    arrays under PyTorch's keys."""
    return {
        key: param.data().asnumpy()
        for key, param in gluon_params(net).items()
        if not (parameters_only and key.rpartition(".")[2] in STATISTICS)
    }
