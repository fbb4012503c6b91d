"""Each Gluon twin is its PyTorch model: the same parameters under the same keys, the same
output, the same losses over 3 SGD steps and the same parameters after them (float64; the
reason is in tests/mxnet_env/twins.py, which runs in MXNet's environment, `make mxnet`)."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import dlscale
from dlscale.contract.models import MODELS
from dlscale.frameworks.mxnet.declare import mxnet_python

pytestmark = pytest.mark.twins  # minutes of TensorFlow or MXNet: make test runs them

SCRIPT = Path(__file__).parents[1] / "mxnet_env" / "twins.py"
GLUON_MODELS = sorted(name for name, spec in MODELS if "mxnet" in spec.builders)


@pytest.fixture(scope="module")
def checks() -> dict[str, dict]:
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(dlscale.__file__).parents[1]),
        "MXNET_STORAGE_FALLBACK_LOG_VERBOSE": "0",
    }
    done = subprocess.run(
        [mxnet_python(), str(SCRIPT), *GLUON_MODELS],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {row["model"]: row for row in rows}


def test_every_image_model_has_a_gluon_twin():
    """Every model of images; the GPTs have none (MXNet has no next-token task: refused)."""
    assert set(GLUON_MODELS) == {name for name, spec in MODELS if spec.sample == "image"}


@pytest.mark.parametrize("model", GLUON_MODELS)
def test_the_gluon_twin_computes_what_the_pytorch_model_computes(checks, model):
    row = checks[model]
    assert row["same_keys"]
    assert row["gluon_params"] == row["torch_params"]
    assert row["forward_max_abs"] < 1e-12
    np.testing.assert_allclose(row["gluon_losses"], row["torch_losses"], rtol=1e-9)
    assert row["torch_losses"][0] != row["torch_losses"][-1]  # the steps moved the model
    assert row["params_max_rel"] < 1e-8
