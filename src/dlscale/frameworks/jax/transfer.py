"""Copy a PyTorch model's state into its Flax twin (:mod:`dlscale.frameworks.jax.models`), and
back.

A twin's variables are two trees, ``params`` (weights and biases, BatchNorm's ``weight`` and
``bias``) and ``batch_stats`` (``running_mean``, ``running_var``), whose paths are PyTorch's keys
with ``_`` for ``.`` before an index (but :data:`LITERAL`'s names). Every PyTorch tensor must
find its variable and every variable its tensor (``num_batches_tracked`` aside, and a tied
tensor's second name), with the same shape, else the copy refuses: a twin that drifted from its
model is a bug to see, not to train on. The state is numpy arrays
(:func:`dlscale.frameworks.torch.weights.torch_state`, or the weights cache).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

_INDEX = re.compile(r"_(\d+)$")
LITERAL = frozenset({"ln_1", "ln_2"})
"""PyTorch names whose ``_<digits>`` is part of the name, not an index (the GPT's LayerNorms):
kept as they are."""
COLLECTIONS = ("params", "batch_stats")
SKIPPED = ("num_batches_tracked",)
"""PyTorch buffers no twin has (BatchNorm's step counter: its momentum is fixed)."""


def torch_key(path: tuple[str, ...]) -> str:
    """``("layer1_0", "conv1", "weight")`` -> ``"layer1.0.conv1.weight"``; a name of
    :data:`LITERAL` stays (``("h_0", "ln_1")`` -> ``"h.0.ln_1"``)."""
    return ".".join(name if name in LITERAL else _INDEX.sub(r".\1", name) for name in path)


def flatten(tree: dict[str, Any], path: tuple[str, ...] = ()) -> dict[str, Any]:
    """A nested dict's leaves by PyTorch key."""
    out: dict[str, Any] = {}
    for name, value in tree.items():
        if isinstance(value, dict):
            out.update(flatten(value, (*path, name)))
        else:
            out[torch_key((*path, name))] = value
    return out


def _rebuild(tree: dict[str, Any], values: dict[str, Any], path: tuple[str, ...] = ()) -> Any:
    return {
        name: _rebuild(value, values, (*path, name))
        if isinstance(value, dict)
        else values[torch_key((*path, name))]
        for name, value in tree.items()
    }


def load_torch_state(
    variables: dict[str, Any],
    state: dict[str, np.ndarray],
    dtype: str,
    tied: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The twin's ``variables`` (as ``init`` made them: the tree to fill) set from ``state``
    (PyTorch's keys), as numpy arrays of ``dtype``. ``tied``: PyTorch keys that name the
    tensor of another key (a GPT's tied head, ``lm_head.weight`` -> ``wte.weight``), which
    the twin holds once: each must equal its twin's tensor, and is then left out."""
    ours = {collection: flatten(dict(variables.get(collection, {}))) for collection in COLLECTIONS}
    keys = {key for leaves in ours.values() for key in leaves}
    theirs = {key: value for key, value in state.items() if key.rpartition(".")[2] not in SKIPPED}
    for alias, key in (tied or {}).items():
        if alias in theirs and key in theirs:
            if not np.array_equal(theirs[alias], theirs[key]):
                raise ValueError(f"{alias} is not {key}: the PyTorch model's are not tied")
            del theirs[alias]
    missing = sorted(keys - set(theirs))
    if missing:
        raise ValueError(f"Flax variables with no PyTorch tensor: {', '.join(missing[:5])}")
    left = sorted(set(theirs) - keys)
    if left:
        raise ValueError(f"PyTorch tensors with no Flax variable: {', '.join(left[:5])}")
    out: dict[str, Any] = {}
    for collection, leaves in ours.items():
        for key, leaf in leaves.items():
            if tuple(leaf.shape) != theirs[key].shape:
                raise ValueError(
                    f"{key}: PyTorch shape {theirs[key].shape} does not fit Flax {leaf.shape}"
                )
        values = {key: np.asarray(theirs[key], dtype=dtype) for key in leaves}
        if leaves:
            out[collection] = _rebuild(dict(variables[collection]), values)
    return out


def torch_state(params: dict[str, Any]) -> dict[str, np.ndarray]:
    """The twin's parameters as numpy arrays under PyTorch's keys (what ``save_params``
    writes: BatchNorm's statistics left out, as PyTorch's ``named_parameters``)."""
    return {key: np.asarray(value) for key, value in flatten(dict(params)).items()}


def state_arrays(trees: dict[str, dict[str, Any]]) -> dict[str, np.ndarray]:
    """Named trees of arrays (a checkpoint's ``params``, ``momentum``, ...) as one flat dict of
    numpy arrays, ``"<tree>/<PyTorch key>"``."""
    return {
        f"{name}/{key}": np.asarray(value)
        for name, tree in trees.items()
        for key, value in flatten(dict(tree)).items()
    }


def state_trees(
    arrays: dict[str, np.ndarray], like: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """:func:`state_arrays` undone: each tree of ``like`` (its structure) filled from
    ``arrays``; a missing array or one of another shape refuses (a state of another model)."""
    out: dict[str, dict[str, Any]] = {}
    for name, tree in like.items():
        prefix = f"{name}/"
        values = {k.removeprefix(prefix): v for k, v in arrays.items() if k.startswith(prefix)}
        expected = {key: np.shape(leaf) for key, leaf in flatten(dict(tree)).items()}
        found = {key: value.shape for key, value in values.items()}
        if expected != found:
            raise ValueError(f"the saved {name} do not fit this model's")
        out[name] = _rebuild(dict(tree), values)
    return out
