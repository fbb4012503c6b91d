"""torch-ps: sharding, sync equivalence, async staleness, and a server that dies."""

from pathlib import Path

import pytest
import torch

from dlscale.config import RunConfig
from dlscale.contract.events import read_events
from dlscale.frameworks.torch import ps_shards
from dlscale.runner import run_point
from dlscale.store import RunStore
from tests.distributed.processes import kill_rank_and_check_the_run_fails

pytestmark = pytest.mark.dist

SMALL = dict(model="tiny", steps=4, windows=2, warmup_steps=1, comm_probe_steps=2)


def _run(tmp_path: Path, **settings) -> tuple[dict, Path]:
    outcome = run_point(
        RunConfig.make(**settings), RunStore(tmp_path), force=False, command=["t"], study="t"
    )
    assert outcome.state == "completed", outcome.result and outcome.result.error
    return outcome.result, tmp_path / outcome.run_id


def _server_events(run_dir: Path, rank: int, kind: str) -> list[dict]:
    return [e for e in read_events(run_dir / f"events.rank{rank}.jsonl") if e["event"] == kind]


def test_sharding_is_balanced_by_bytes_and_deterministic():
    sizes = [10, 400, 30, 400, 5, 200, 200]
    owned = ps_shards.assign(sizes, 3)
    # largest first (ties: lower index) onto the least-loaded server (ties: lower server)
    assert owned == [[1, 2], [0, 3], [4, 5, 6]]  # loads 430, 410, 405
    assert owned == ps_shards.assign(sizes, 3)
    assert sorted(i for o in owned for i in o) == list(range(len(sizes)))
    loads = [sum(sizes[i] for i in o) for o in owned]
    assert max(loads) - min(loads) <= max(sizes)
    assert ps_shards.assign([7, 7], 4) == [[0], [1], [], []]  # more servers than parameters
    shards = ps_shards.plan([3, 5, 2], 2)
    assert [s.params for s in shards] == [(1,), (0, 2)]
    assert shards[1].offsets == (0, 3) and shards[1].nbytes == 20
    assert ps_shards.bytes_per_step(shards) == 2 * 4 * (10 + 2)  # push + pull, one framing each


@pytest.fixture(scope="module")
def reference_params(tmp_path_factory) -> dict[str, torch.Tensor]:
    """One worker of batch 16 on the digits: what 2 sync workers of batch 8 must reproduce."""
    tmp = tmp_path_factory.mktemp("single")
    _, run_dir = _run(
        tmp,
        backend="torch-single",
        dataset="digits",
        workers=1,
        batch_size=16,
        save_params=True,
        **SMALL,
    )
    return torch.load(run_dir / "final_params.pt")


@pytest.mark.parametrize("servers", [1, 2])
def test_sync_ps_equals_one_worker_of_the_global_batch(tmp_path, reference_params, servers):
    result, run_dir = _run(
        tmp_path,
        backend="torch-ps",
        dataset="digits",
        workers=2,
        batch_size=8,
        num_servers=servers,
        ps_mode="sync",
        save_params=True,
        **SMALL,
    )
    params = torch.load(run_dir / "final_params.pt")
    assert params.keys() == reference_params.keys()
    for name, value in params.items():
        torch.testing.assert_close(value, reference_params[name], rtol=1e-4, atol=1e-5)
    m = result.metrics
    assert m["bytes_sent_per_step_counted"] == m["bytes_sent_per_step_model"] > 0
    assert m["bytes_sent_per_step_model"] == 2 * (m["gradient_bytes"] + 4 * servers)
    assert m["staleness_max"] == 0 and m["exposed_comm_fraction"] is not None
    updates = [
        _server_events(run_dir, 2 + s, "server")[0]["counters"]["updates"] for s in range(servers)
    ]
    # warm-up + measured steps + the probe's synchronized steps (a warm-up pair, then 2 pairs);
    # its unsynchronized steps send nothing
    assert updates == [1 + 4 * 2 + (1 + 2)] * servers


def test_async_ps_records_staleness(tmp_path):
    result, run_dir = _run(
        tmp_path, backend="torch-ps", workers=2, batch_size=16, ps_mode="async", **SMALL
    )
    m = result.metrics
    # both workers' first gradients are computed on version 0: whichever arrives second is
    # applied to version 1, so some gradient is stale however the pushes interleave
    assert m["staleness_max"] >= 1 and m["staleness_histogram"]
    (server,) = _server_events(run_dir, 2, "server")
    assert (
        sum(m["staleness_histogram"].values())
        == server["counters"]["updates"]
        == 2 * (1 + 4 * 2 + (1 + 2))  # warm-up, measured, the probe's synchronized steps
    )
    assert m["bytes_sent_per_step_counted"] == m["bytes_sent_per_step_model"]


def test_a_killed_server_fails_the_run_and_stops_the_workers(tmp_path):
    kill_rank_and_check_the_run_fails(
        tmp_path, "torch-ps", ranks=3, rank=2, role="server", settle_s=1.0
    )
