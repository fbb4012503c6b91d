"""The bytes the deepspeed-zero* engines say they sent, held to the ring shares they claim.

:class:`~dlscale.frameworks.deepspeed.counting.CollectiveBytes` wraps torch.distributed's
collectives by attribute; each call's tensor bytes become what one rank of an N-ring sends.
Here a one-process gloo group runs the real collectives while the counter is told N = 2, so
each share is checked against its formula: an all-reduce 2(N-1)/N x its tensor, an all-gather
(N-1)/N x its gathered output (tensor or list), a broadcast (N-1)/N x its tensor, with
positional and keyword arguments alike. A call the collective refuses raises torch's own error
and counts nothing; uninstalling puts torch's functions back; ``take`` hands each byte once."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from dlscale.frameworks.deepspeed.counting import CollectiveBytes  # noqa: E402

# torch 2.13 calls all_gather_into_tensor deprecated; DeepSpeed 0.19 calls it all the same
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture
def one_rank(tmp_path):
    if dist.is_initialized():
        pytest.skip("a process group of another test is up")
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    originals = {name: getattr(dist, name) for name in ("all_reduce", "broadcast")}
    counter = CollectiveBytes(2)
    counter.install()
    try:
        yield counter
    finally:
        counter.uninstall()
        dist.destroy_process_group()
    assert all(getattr(dist, name) is fn for name, fn in originals.items())


def test_each_collective_counts_its_ring_share(one_rank):
    tensor = torch.ones(250)  # 1,000 bytes
    dist.all_reduce(tensor)  # 2(N-1)/N x 1,000
    assert one_rank.take() == 1000
    dist.all_reduce(tensor=torch.ones(100, dtype=torch.float64))  # keyword, 800 bytes
    assert one_rank.take() == 800
    dist.broadcast(torch.ones(50), src=0)  # (N-1)/N x 200
    assert one_rank.take() == 100
    out = torch.empty(500)
    dist.all_gather_into_tensor(out, torch.ones(500))  # (N-1)/N x the output's 2,000
    assert one_rank.take() == 1000
    gathered = [torch.empty(10)]
    dist.all_gather(gathered, torch.ones(10))  # (N-1)/N x the list's 40
    assert one_rank.take() == 20
    assert one_rank.take() == 0  # each byte taken once
    assert set(one_rank.sent) >= {"all_reduce", "broadcast", "all_gather_into_tensor"}


def test_a_call_torch_refuses_raises_torchs_error_and_counts_nothing(one_rank):
    with pytest.raises((TypeError, ValueError, RuntimeError)):
        dist.all_reduce("not a tensor")
    with pytest.raises(TypeError):
        dist.broadcast(torch.ones(4), src=0, no_such_argument=1)
    assert one_rank.take() == 0


def test_one_worker_sends_nothing():
    counter = CollectiveBytes(1)
    assert counter.take() == 0
    counter.sent["all_reduce"] = 0.0  # (N-1)/N = 0 at one worker, whatever the tensor
    assert counter.take() == 0


def test_an_evaluations_collectives_are_no_steps_and_a_gather_counts_once(one_rank):
    """Paused (and paused within paused: the evaluation's gather inside its copy), nothing is
    counted; torch 2.13's all_gather_into_tensor runs all_gather_single inside, counted once."""
    with one_rank.paused():
        with one_rank.paused():
            dist.all_reduce(torch.ones(250))
        dist.broadcast(torch.ones(50), src=0)  # still paused: the outer context holds
    assert one_rank.take() == 0
    out = torch.empty(500)
    dist.all_gather_into_tensor(out, torch.ones(500))
    assert one_rank.take() == 1000
    dist.all_gather_single(out, torch.ones(500))
    assert one_rank.take() == 1000
