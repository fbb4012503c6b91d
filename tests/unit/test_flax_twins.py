"""The Flax twins compute what their PyTorch models compute (issue 47: like for like, proven).

For every model family of the registry (ResNet-20 for the CIFAR ResNets, whose depths only
repeat its block), as tests/unit/test_keras_twins.py holds the Keras twins: the same parameter
names and shapes, and with the PyTorch initial weights copied in, the same eval output (float32,
rtol 1e-4) and, in float64, the same losses over 3 of the JAX engines' steps (training-mode
BatchNorm, PyTorch's SGD with momentum and weight decay: ``steps.torch_sgd``) to 1e-9. Dropout
off on both sides (its masks cannot match across frameworks). The ImageNet nets at 10 classes
and small images (their layers depend on neither beyond the shapes); GoogLeNet at 64 px takes
``ceil_mode`` where it differs from the floor (32 -> 16, not 15), AlexNet at 64 px a
non-dividing adaptive average pool (1x1 -> 6x6).

The computations run in tests/jax_env/twins.py, a process of its own: JAX beside TensorFlow
(which the Keras twin tests import into the runner's workers) took a pytest-xdist worker down.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dlscale
from dlscale.contract.models import MODELS
from dlscale.frameworks.jax.transfer import load_torch_state, state_arrays, state_trees
from dlscale.frameworks.torch.weights import torch_state

pytestmark = pytest.mark.twins

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "jax_env" / "twins.py"
CASES = {  # name -> (image size, batch)
    "tiny": (32, 4),
    "resnet20": (32, 4),
    "resnet50": (64, 4),
    "alexnet": (64, 2),
    "googlenet": (64, 4),
}


def _run(*args: str) -> dict[str, dict]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{Path(dlscale.__file__).parents[1]}"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {row["model"]: row for row in rows}


@pytest.fixture(scope="module")
def checks() -> dict[str, dict]:
    return _run(*(f"{name}:{size}:{batch}" for name, (size, batch) in CASES.items()))


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_flax_twin_computes_what_the_pytorch_model_computes(checks, name: str) -> None:
    row = checks[name]
    assert row["names"]  # PyTorch's parameter names and shapes
    assert row["eval_error"] <= 1.0, row["eval_error"]  # within rtol 1e-4, atol 1e-5
    np.testing.assert_allclose(row["ours"], row["theirs"], rtol=1e-9)
    assert len(set(row["theirs"])) == 3  # the steps moved the loss


def test_every_registered_model_has_a_flax_twin_with_its_parameters() -> None:
    """Through the registry's ``jax`` builder (what the runs call), at each model's default
    classes and native size: PyTorch's names and shapes."""
    rows = _run("--shapes", *MODELS.names())
    assert set(rows) == set(MODELS.names())
    assert all(row["names"] for row in rows.values()), rows


def test_transfer_refuses_a_twin_that_drifted() -> None:
    """By name and shape, before any weight is copied (the tree stands in for a twin's)."""
    state = torch_state(MODELS.get("tiny").build(10))
    tree = {"params": {"fc": {"weight": np.zeros((10, 256)), "bias": np.zeros(10)}}}
    fc = {k: v for k, v in state.items() if k.startswith("fc.")}
    assert load_torch_state(tree, fc, "float64")["params"]["fc"]["bias"].dtype == np.float64
    with pytest.raises(ValueError, match=r"extra\.weight"):
        load_torch_state(tree, {**fc, "extra.weight": np.zeros(3, np.float32)}, "float32")
    with pytest.raises(ValueError, match=r"fc\.bias"):
        load_torch_state(tree, {"fc.weight": fc["fc.weight"]}, "float32")
    with pytest.raises(ValueError, match="does not fit"):
        seven = torch_state(MODELS.get("tiny").build(7))
        load_torch_state(tree, {k: v for k, v in seven.items() if k.startswith("fc.")}, "float32")


def test_a_checkpoints_arrays_come_back_as_the_same_trees_or_are_refused() -> None:
    """What jax-dp's checkpoint writes and a restarted run reads: the trees' leaves under
    ``<tree>/<PyTorch key>``, back in the model's structure; a state of another shape refuses."""
    params = {
        "layer1_0": {"conv1": {"weight": np.arange(6.0).reshape(2, 3)}},
        "fc": {"bias": np.ones(2)},
    }
    trees = {"params": params, "momentum": params, "batch_stats": {}}
    arrays = state_arrays(trees)
    assert sorted(arrays) == [
        "momentum/fc.bias", "momentum/layer1.0.conv1.weight", "params/fc.bias",
        "params/layer1.0.conv1.weight",
    ]  # fmt: skip
    back = state_trees(arrays, trees)
    assert back["batch_stats"] == {}
    np.testing.assert_array_equal(
        back["momentum"]["layer1_0"]["conv1"]["weight"], np.arange(6.0).reshape(2, 3)
    )
    arrays["params/fc.bias"] = np.ones(3)
    with pytest.raises(ValueError, match="the saved params do not fit"):
        state_trees(arrays, trees)
