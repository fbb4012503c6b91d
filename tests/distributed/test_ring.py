"""torch-ring: the send/recv ring all-reduce (Patarasuk & Yuan 2009) and Horovod-style tensor
fusion checked against gloo's own all_reduce in real processes, and runs through the runner
(its byte count at 2 workers: test_equivalence.py)."""

from __future__ import annotations

import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from dlscale.config import RunConfig
from dlscale.contract.events import read_events
from dlscale.contract.models import MODELS
from dlscale.frameworks.torch.ring_allreduce import (
    Fusion,
    ring_allreduce_,
    ring_bytes_mean,
    ring_bytes_per_rank,
    ring_chunk_sizes,
)
from dlscale.runner import run_point
from dlscale.store import RunStore

pytestmark = pytest.mark.dist

LENGTHS = (1, 2, 5, 1000, 1001, 1003)
TINY_BUCKET_MB = 0.0005  # 524 bytes: 131 float32 values per bucket


def _model() -> nn.Module:
    torch.manual_seed(0)
    # 600-value weight: larger than a bucket, so it is a bucket of its own
    return nn.Sequential(nn.Linear(7, 13), nn.Linear(13, 5), nn.Conv2d(3, 4, 3), nn.Linear(20, 30))


def _set_grads(model: nn.Module, rank: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + rank)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen)
    return [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]


def _reference_mean(grads: list[torch.Tensor], world: int) -> list[torch.Tensor]:
    out = []
    for g in grads:
        g = g.clone()
        dist.all_reduce(g)
        out.append(g / world)
    return out


def _worker(rank: int, world: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=60),
    )
    try:
        results: dict[str, Any] = {}
        for n in LENGTHS:
            x = torch.randn(n, generator=torch.Generator().manual_seed(1000 * n + rank))
            reference = x.clone()
            dist.all_reduce(reference)
            sent = ring_allreduce_(x, rank=rank, world=world)
            results[f"len{n}"] = {"ring": x, "reference": reference, "sent": sent}
        for compression in ("none", "fp16", "bf16"):
            model = _model()
            reference = _reference_mean(_set_grads(model, rank), world)
            fusion = Fusion(list(model.parameters()), TINY_BUCKET_MB, compression=compression)
            sent = fusion.allreduce_(rank=rank, world=world)
            results[f"fusion-{compression}"] = {
                "ring": [p.grad for p in model.parameters()],
                "reference": reference,
                "sent": sent,
                "model": fusion.bytes_per_rank(rank, world),
                "buckets": len(fusion.buckets),
            }
        torch.save(results, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module", params=[2, 3], ids=lambda w: f"world{w}")
def ring_results(request, tmp_path_factory) -> tuple[int, list[dict[str, Any]]]:
    """Every check's tensors from every rank of one real gloo group of ``world`` processes."""
    world = request.param
    out = tmp_path_factory.mktemp(f"ring{world}")
    mp.start_processes(
        _worker, args=(world, _free_port(), str(out)), nprocs=world, start_method="spawn"
    )
    return world, [torch.load(out / f"rank{r}.pt") for r in range(world)]


def test_ring_allreduce_equals_all_reduce_and_counts_its_bytes(ring_results):
    world, ranks = ring_results
    for n in LENGTHS:
        nbytes = 4 * n
        sent = []
        for rank, results in enumerate(ranks):
            case = results[f"len{n}"]
            torch.testing.assert_close(case["ring"], case["reference"], rtol=1e-6, atol=1e-6)
            # every rank ends with the very same values (each chunk is summed once, then copied)
            assert torch.equal(case["ring"], ranks[0][f"len{n}"]["ring"])
            assert case["sent"] == ring_bytes_per_rank(nbytes, world, rank=rank, itemsize=4)
            sent.append(case["sent"])
        assert sum(sent) / world == ring_bytes_mean(nbytes, world)
        assert ring_bytes_mean(nbytes, world) == pytest.approx(2 * (world - 1) / world * nbytes)
        assert max(sent) - min(sent) <= 2 * 4


def test_fusion_with_small_buckets_averages_like_per_parameter_all_reduce(ring_results):
    _, ranks = ring_results
    for results in ranks:
        case = results["fusion-none"]
        assert case["buckets"] >= 4
        for got, want, same in zip(
            case["ring"], case["reference"], ranks[0]["fusion-none"]["ring"], strict=True
        ):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
            assert torch.equal(got, same)
        assert case["sent"] == case["model"]


@pytest.mark.parametrize("compression", ["fp16", "bf16"])
def test_compression_sums_in_half_precision_and_halves_the_bytes(ring_results, compression):
    _, ranks = ring_results
    tolerance = {"fp16": 5e-3, "bf16": 4e-2}[compression]
    for results in ranks:
        case, full = results[f"fusion-{compression}"], results["fusion-none"]
        for got, want in zip(case["ring"], case["reference"], strict=True):
            torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance)
        assert case["buckets"] == full["buckets"]  # buckets are sized before compression
        assert case["sent"] == case["model"] == full["sent"] // 2


def test_byte_model_and_buckets_without_processes():
    for numel in (0, 1, 5, 1001):
        for world in (1, 2, 3, 4):
            sizes = [len(c) for c in torch.tensor_split(torch.empty(numel), world)]
            assert ring_chunk_sizes(numel, world) == sizes
            total = sum(
                ring_bytes_per_rank(4 * numel, world, rank=r, itemsize=4) for r in range(world)
            )
            assert total / world == ring_bytes_mean(4 * numel, world)
    x = torch.arange(5.0)
    assert ring_allreduce_(x, rank=0, world=1) == 0 and torch.equal(x, torch.arange(5.0))
    model = _model()
    fusion = Fusion(list(model.parameters()), TINY_BUCKET_MB)
    ids = [[id(p) for p in bucket] for bucket in fusion.buckets]
    assert [i for bucket in ids for i in bucket] == [
        id(p) for p in reversed(list(model.parameters()))
    ]
    big = model[3].weight
    assert [id(big)] in ids  # larger than a bucket: alone
    for bucket in fusion.buckets:
        assert bucket[0] is big or sum(p.numel() for p in bucket) * 4 <= TINY_BUCKET_MB * 2**20


def test_three_workers_fp16_uneven_chunks_still_match_exactly(tmp_path: Path):
    cfg = RunConfig.make(
        backend="torch-ring",
        model="tiny",
        workers=3,
        steps=2,
        windows=1,
        warmup_steps=1,
        comm_probe_steps=0,
        bucket_mb=0.004,
        compression="fp16",
    )
    outcome = run_point(cfg, RunStore(tmp_path), force=False, command=["t"], study="t")
    assert outcome.state == "completed", outcome.result and outcome.result.error
    m = outcome.result.metrics
    assert m["bytes_sent_per_step_counted"] == m["bytes_sent_per_step_model"]
    assert m["bytes_sent_per_step_model"] == 2 * 2 * (m["gradient_bytes"] // 2) / 3
    torch.manual_seed(0)
    fusion = Fusion(list(MODELS.get("tiny").build(10).parameters()), 0.004, compression="fp16")
    run_dir = tmp_path / outcome.run_id
    for rank in range(3):
        events = read_events(run_dir / f"events.rank{rank}.jsonl")
        (window,) = [e for e in events if e["event"] == "window"]
        assert window["bytes_sent"] == 2 * fusion.bytes_per_rank(rank, 3)
    strategy = next(
        e for e in read_events(run_dir / "events.rank0.jsonl") if e["event"] == "strategy"
    )
    assert strategy["facts"]["buckets"] == len(fusion.buckets) > 1
