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
    assert outcome.state == "completed", outcome.result and outcome.result.error
    assert outcome.result.environment["gpu_names"]
    assert outcome.result.metrics["throughput_samples_s"] > 0


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_two_gpu_ddp_nccl(tmp_path: Path):
    cfg = RunConfig.make(
        backend="torch-ddp", model="resnet20", device="cuda", workers=2, steps=5, windows=2
    )
    outcome = run_point(cfg, RunStore(tmp_path), force=False, command=["t"], study="gpu")
    assert outcome.state == "completed", outcome.result and outcome.result.error
    assert outcome.result.metrics["exposed_comm_fraction"] is not None


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_two_gpu_ddp_bf16_hook_sends_half_the_gradient(tmp_path: Path):
    """torch's bf16 hook runs on NCCL only (refused on the CPU before launch)."""
    cfg = RunConfig.make(
        backend="torch-ddp", model="tiny", device="cuda", workers=2, steps=3, windows=1,
        compression="bf16",
    )  # fmt: skip
    outcome = run_point(cfg, RunStore(tmp_path), force=False, command=["t"], study="gpu")
    assert outcome.state == "completed", outcome.result and outcome.result.error
    m = outcome.result.metrics  # 2 workers: a ring sends 1 x the payload
    assert m["bytes_sent_per_step_counted"] == m["gradient_bytes"] / 2
    assert m["bytes_sent_per_step_counted"] == m["bytes_sent_per_step_model"]


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
    assert outcome.state == "completed", outcome.result and outcome.result.error
    assert outcome.result.metrics["eval_accuracy"] is not None


def test_jpeg_batches_come_pinned_to_the_gpu_and_equal_the_cpu_ones(tmp_path: Path):
    from dlscale.datasets import imagenet
    from dlscale.frameworks.torch.data import to_torch
    from tests.image_data import write_folder

    root = write_folder(tmp_path / "imagenet", classes=2, per_class=8)
    options = {"layout": "auto", "classes": 0, "images_per_class": 0, "loader_workers": 2,
               "verify": "headers", "bad_files": "fail"}  # fmt: skip
    train, held_out = imagenet.splits(root, options, checked=False)

    def data() -> imagenet.ImageFiles:
        return imagenet.ImageFiles(name="imagenet", train=train, eval=held_out, num_classes=1000,
                                   size=16, batch=4, seed=0, shard=0, shards=1)  # fmt: skip

    on_gpu = to_torch(data(), "cuda")
    assert on_gpu.loader.pin_memory
    for (x, y), (xc, yc) in zip(
        on_gpu.train_batches(0), to_torch(data(), "cpu").train_batches(0), strict=True
    ):
        assert x.is_cuda and y.is_cuda
        torch.testing.assert_close(x.cpu(), xc, rtol=1e-5, atol=1e-5)
        assert torch.equal(y.cpu(), yc)
