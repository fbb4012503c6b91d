"""CUDA paths (NCCL, bf16 autocast, channels_last). Skipped on machines without a GPU."""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dlscale.config import RunConfig  # noqa: E402
from dlscale.runner import run_point  # noqa: E402
from dlscale.store import RunStore  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_single_gpu_bf16_channels_last(tmp_path: Path):
    cfg = RunConfig.make(
        backend="torch-single",
        model="resnet20",
        device="cuda",
        amp="bf16",
        channels_last=True,
        steps=5,
        windows=2,
    )
    outcome = run_point(cfg, RunStore(tmp_path), force=False, command=["t"], study="gpu")
    assert outcome.state == "completed", outcome.result and outcome.result["error"]
    assert outcome.result["environment"]["gpu_names"]
    assert outcome.result["metrics"]["throughput_img_s"] > 0


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_two_gpu_ddp_nccl(tmp_path: Path):
    cfg = RunConfig.make(
        backend="torch-ddp", model="resnet20", device="cuda", workers=2, steps=5, windows=2
    )
    outcome = run_point(cfg, RunStore(tmp_path), force=False, command=["t"], study="gpu")
    assert outcome.state == "completed", outcome.result and outcome.result["error"]
    assert outcome.result["metrics"]["exposed_comm_fraction"] is not None


def test_ddp_one_gpu_nccl(tmp_path: Path):
    cfg = RunConfig.make(
        backend="torch-ddp",
        model="resnet20",
        device="cuda",
        workers=1,
        steps=5,
        windows=2,
        dataset="digits",
        epochs=1,
        batch_size=32,
    )
    outcome = run_point(cfg, RunStore(tmp_path), force=False, command=["t"], study="gpu")
    assert outcome.state == "completed", outcome.result and outcome.result["error"]
    assert outcome.result["metrics"]["eval_accuracy"] is not None
