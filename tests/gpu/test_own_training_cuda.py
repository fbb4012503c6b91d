"""A user's own training on a GPU: an unmodified DDP script measured on CUDA (its windows
timed after the device's queue is drained), and models from torchvision and timm in dlscale's
loop. Skipped without a CUDA GPU; the library cases also without torchvision or timm, which
the CPU build of torch pinned for CI has no matching build of (docs/own-training.md,
"Models from torchvision and timm")."""

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import dlscale_cli

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
SHORT = ("--warmup-steps", "2", "--steps", "5", "--windows", "2", "--repeats", "1")


def _points(stdout: str) -> list[dict]:
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return [row for row in rows if row["kind"] == "point"]


def test_an_unmodified_ddp_script_on_cuda(tmp_path: Path):
    shutil.copy(SCRIPTS / "ddp_train.py", tmp_path / "ddp_train.py")
    run = dlscale_cli(
        "run", "--script", "ddp_train.py", "--device", "cuda", "--workers", "1", *SHORT,
        "--json", "--", "--epochs", "2", "--batch-size", "64", "--device", "cuda",
        cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    [row] = _points(run.stdout)
    assert row["status"] == "completed" and row["backend"] == "torch-script"
    assert row["throughput_samples_s"] > 0
    result = json.loads(next((tmp_path / "dlscale-results").glob("*/result.json")).read_text())
    assert result["environment"]["gpu_names"] and result["environment"]["device"] == "cuda"


@pytest.mark.parametrize("model", ["torchvision:resnet18", "timm:resnet18"])
def test_a_library_model_trains_on_cuda(tmp_path: Path, model: str):
    pytest.importorskip("torchvision")
    pytest.importorskip("timm")
    run = dlscale_cli(
        "run", "--model", model, "--backend", "torch-single,torch-ddp", "--device", "cuda",
        "--workers", "1", "--dataset", "digits", "--epochs", "1", "--batch-size", "32",
        "--set", "image_size=32", "--repeats", "1", "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = {row["backend"]: row for row in _points(run.stdout)}
    assert set(rows) == {"torch-single", "torch-ddp"}
    for row in rows.values():
        assert row["status"] == "completed" and row["model"] == model
        assert row["eval_accuracy"] is not None  # the digits' 10 classes, from its output
    result = json.loads(next((tmp_path / "dlscale-results").glob("*/result.json")).read_text())
    library = model.partition(":")[0]
    assert result["environment"][f"{library}_version"]


def test_a_name_the_library_lacks_is_refused_before_launch(tmp_path: Path):
    pytest.importorskip("timm")
    run = dlscale_cli("run", "--model", "timm:resnet1800", "--device", "cuda", cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "timm has no classification model 'resnet1800'; did you mean" in run.stderr, run.stderr
    assert not (tmp_path / "dlscale-results").exists() or not any(
        (tmp_path / "dlscale-results").glob("*/result.json")
    )
