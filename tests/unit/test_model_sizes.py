"""``dlscale ls models`` lists the models from what they declare, importing no framework
(issue 71: it imported PyTorch to count them, 11-17 s), and what they declare is what PyTorch
counts."""

import os
import subprocess
import sys

import pytest

from dlscale.contract.models import BUILT_IN, MODELS

FRAMEWORKS = ("torch", "tensorflow", "tf_keras", "keras", "mxnet", "jax", "flax")

LIST_AND_CHECK = """
import sys
from dlscale.start import entry

sys.argv = ["dlscale", "ls", "models", *sys.argv[1:]]
try:
    entry()
finally:
    imported = sorted({m.split(".")[0] for m in sys.modules} & set(FRAMEWORKS))
    print("imported:", ",".join(imported), file=sys.stderr)
"""


def _ls_models(*argv: str) -> subprocess.CompletedProcess[str]:
    code = f"FRAMEWORKS = {FRAMEWORKS!r}\n{LIST_AND_CHECK}"
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "120", "PYTHONPATH": os.pathsep.join(sys.path)},
    )


@pytest.mark.parametrize("argv", [(), ("resnet44",)])
def test_ls_models_imports_no_framework(argv):
    done = _ls_models(*argv)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == "imported: ", done.stderr
    if argv:  # in full: its size as declared
        assert "0.66 M" in done.stdout and "0.194 G per image" in done.stdout, done.stdout
    else:
        (row,) = [line for line in done.stdout.splitlines() if "│ resnet44 " in line]
        assert "0.66" in row and "0.194" in row and "3x32x32" in row, done.stdout


def test_every_built_in_model_declares_its_size():
    for name in BUILT_IN:
        spec = MODELS.get(name)
        assert spec.params and spec.forward_flops_per_sample, name


def test_the_declared_sizes_are_what_pytorch_counts():
    """Counted on PyTorch's meta device: no memory, nothing computed (about a second)."""
    pytest.importorskip("torch")
    from dlscale.contract.plugins import load_plugins

    load_plugins()
    from dlscale.frameworks.torch.profile import profile

    for name in BUILT_IN:
        spec, counted = MODELS.get(name), profile(name)
        declared = (spec.params, spec.forward_flops_per_sample)
        assert declared == (counted.params, counted.forward_flops_per_sample), name
        assert counted.input_shape == (3, spec.input_size, spec.input_size), name
        assert counted.num_classes == spec.default_classes, name
