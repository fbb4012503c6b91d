"""``dlscale microbench --backend torch-ps``: torch-ps' own push and pull through its server
ranks (frameworks/torch/ps_collectives.py), 2 workers on gloo: exact at every size, a message
split over 2 servers (a 4-byte one held by one), the servers serving every round and recording
nothing, the figures recomputed from the workers' own records, the ps fit, every process gone;
then with 1 server a prediction's whole loop for torch-ps, its push and pull priced on these rows
(tests/distributed/whole_loop.py)."""

import pytest

from tests.distributed.microbench_events import check_push_and_pull
from tests.distributed.processes import alive
from tests.distributed.whole_loop import check_the_whole_loop

pytestmark = pytest.mark.dist

SIZES = (4, 64 << 10, 1 << 20, 4 << 20)


def test_torch_ps_push_and_pull_through_two_servers_are_exact_and_fit_the_ps_pattern(cli, tmp_path):
    run = cli("microbench", "--backend", "torch-ps", "--workers", "2", "--set", "num_servers=2",
              "--sizes", "4,64k,1M,4M", "--results", str(tmp_path))  # fmt: skip
    # the 1 MiB figure by hand, from both workers' own times
    events = check_push_and_pull(run, tmp_path, "torch-ps", SIZES, [1, 2, 2, 2],
                                 ["worker", "worker", "server", "server"], 1 << 20)  # fmt: skip
    assert all(ev[-1]["event"] == "end" for ev in events.values())  # the servers too
    pids = [next(e["pid"] for e in ev if e["event"] == "start") for ev in events.values()]
    assert not [pid for pid in pids if alive(pid)]


def test_a_torch_ps_point_is_priced_on_its_own_push_and_pull(cli, tmp_path):
    # two sizes past the latency's floor: with one (4k,64k,1M) a busy CI machine's 1 MiB row
    # could be taken by the fit's robust loss for an outlier, leaving no bandwidth term
    run = cli("microbench", "--backend", "torch-ps", "--workers", "2",
              "--sizes", "4k,16k,1M,4M", "--results", str(tmp_path))  # fmt: skip
    assert run.returncode == 0, run.stderr
    row = check_the_whole_loop(cli, tmp_path, "torch-ps", "ps-sync")
    assert row["servers"] == 1
