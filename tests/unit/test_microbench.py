"""The micro-benchmark's settings, its iteration schedule and the aggregation of per-rank
records into time, algorithm and bus bandwidth (the real collectives run in
tests/distributed/test_microbench.py)."""

import pytest

from dlscale.errors import UserError
from dlscale.metrics.records import Collective
from dlscale.microbench import Settings, iterations, parse_sizes
from dlscale.microbench.aggregate import collective_rows


def test_sizes_read_as_nccl_tests_steps_or_a_list():
    assert parse_sizes("4..256M") == tuple(4 * 4**k for k in range(14))
    assert parse_sizes("4..256M")[-1] == 256 << 20
    assert parse_sizes("1k,16M,8") == (1024, 16 << 20, 8)
    for bad in ("0..4", "1M..4", "four", "4..x", "-4"):
        with pytest.raises(UserError):
            Settings(sizes=parse_sizes(bad))
    with pytest.raises(UserError, match="4 B to 1 GiB"):
        Settings(sizes=(2 << 30,))
    with pytest.raises(UserError, match="unknown collective"):
        Settings(collectives=("all_reduce", "<script>"))


def test_every_rank_plans_the_same_iterations_fewer_for_large_messages():
    assert iterations(4, 20) == (2, 20)
    assert iterations(4 << 20, 20) == (2, 16)  # 64 MiB moved
    assert iterations(256 << 20, 20) == (1, 3)
    assert iterations(4, 1) == (2, 1)


def test_rows_take_the_slowest_rank_per_iteration_then_the_median():
    per_rank = {
        0: [Collective(collective="all_reduce", bytes=1_000_000, times_s=[1e-3, 4e-3, 2e-3])],
        1: [Collective(collective="all_reduce", bytes=1_000_000, times_s=[3e-3, 1e-3, 1e-3])],
    }
    (row,) = collective_rows(per_rank, processes=2)
    # per iteration: max(1, 3) = 3, max(4, 1) = 4, max(2, 1) = 2 ms; median 3 ms
    assert row["time_s"] == pytest.approx(3e-3) and row["time_min_s"] == pytest.approx(2e-3)
    assert row["algbw_bytes_s"] == pytest.approx(1e6 / 3e-3)
    assert row["busbw_bytes_s"] == pytest.approx(1e6 / 3e-3 * 2 * 1 / 2)  # 2(p-1)/p = 1
    assert row["correct"] and row["ranks_reporting"] == 2


def test_a_wrong_result_on_any_rank_marks_the_row_and_idle_ranks_are_not_timed():
    per_rank = {
        0: [
            Collective(
                collective="send_recv", bytes=8, times_s=[1e-5], correct=False, max_error=1.0
            )
        ],
        1: [Collective(collective="send_recv", bytes=8, times_s=[2e-5])],
        2: [Collective(collective="send_recv", bytes=8, times_s=[])],  # sat it out
    }
    (row,) = collective_rows(per_rank, processes=3)
    assert not row["correct"] and row["max_error"] == 1.0 and row["time_s"] == pytest.approx(2e-5)
