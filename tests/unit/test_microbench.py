"""The micro-benchmark's settings, its iteration schedule and the aggregation of per-rank
records into time, algorithm and bus bandwidth (the real collectives run in
tests/distributed/test_microbench.py)."""

import dataclasses
import json

import numpy as np
import pytest

from dlscale.cli.microbench import _say_not_measured, fit_patterns
from dlscale.contract.errors import UserError
from dlscale.contract.records import Collective
from dlscale.microbench import Settings, iterations, not_measured, parse_sizes
from dlscale.microbench.aggregate import collective_rows, wrong_results
from dlscale.microbench.timing import element_count, time_collective


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


def test_the_shared_loop_prepares_then_waits_then_times_and_checks_the_first_timed_call():
    """The order every kernel gets from timing.time_collective (torch's and Horovod's)."""
    calls: list[str] = []

    def operation(count: int):
        calls.append(f"built {count}")
        return (
            lambda: calls.append("prepare"),
            lambda: calls.append("op"),
            lambda: calls.append("check") or 0.0,
        )

    record = time_collective(
        "all_gather", 64, 2, 0, operation, lambda: calls.append("barrier"), most=3,
        synchronize=lambda: calls.append("sync"),
    )  # fmt: skip
    warmup, timed = iterations(64, 3)
    one = ["prepare", "barrier", "sync", "op", "sync"]
    assert calls == ["built 8"] + one * (warmup + 1) + ["check"] + one * (timed - 1)
    assert record.bytes == 64 and len(record.times_s) == timed and record.correct  # 8 x 4 x 2
    assert element_count("reduce_scatter", 4, 2) == 1 and element_count("broadcast", 6, 4) == 1


def test_a_wrong_check_and_an_idle_send_recv_rank_are_recorded():
    fail = (lambda: None, lambda: None, lambda: 2.0)
    wrong = time_collective("all_reduce", 4, 2, 1, lambda count: fail, lambda: None, most=1)
    assert not wrong.correct and wrong.max_error == 2.0 and len(wrong.times_s) == 1
    ok = (lambda: None, lambda: None, lambda: 0.0)
    idle = time_collective("send_recv", 4, 3, 2, lambda count: ok, lambda: None, most=1)
    assert idle.times_s == [] and idle.correct


def test_a_check_says_how_many_elements_differ_and_the_first():
    """A check gives each element's difference; the loop records the largest, how many differ
    and the first (a NaN is wrong, and kept out of max_error, which JSON could not hold)."""

    def checked(difference):
        ops = (lambda: None, lambda: None, lambda: difference)
        return time_collective("all_reduce", 24, 2, 0, lambda count: ops, lambda: None, most=1)

    wrong = checked(np.array([0.0, 0.0, 1.0, 0.0, 3.0, 0.0]))
    assert not wrong.correct and wrong.max_error == 3.0
    assert (wrong.wrong_elements, wrong.first_wrong, wrong.checked_elements) == (2, 2, 6)
    exact = checked(np.zeros(6, dtype=np.float32))
    assert exact.correct and exact.max_error == 0.0
    assert (exact.wrong_elements, exact.first_wrong, exact.checked_elements) == (0, None, 6)
    nan = checked(np.array([0.0, np.nan, 2.0, np.inf]))
    assert not nan.correct and nan.max_error == 2.0 and nan.wrong_elements == 3
    assert nan.first_wrong == 1
    assert checked(np.array([np.nan])).max_error == 0.0  # wrong, with no finite difference
    idle = checked(np.empty(0))  # a rank with nothing to check (send_recv's others)
    assert idle.correct and idle.checked_elements == 0


def test_a_wrong_result_names_the_ranks_and_elements_that_differ(tmp_path):
    """The run's error says which rank's result was wrong, how many of its elements, the first
    and by how much, read back from the ranks' own records; a record of an older dlscale (no
    counts) or a damaged count still says the rank was wrong, without the words it lacks."""
    from dlscale.contract.events import EventWriter, events_path, read_records

    def record(correct=True, **facts):
        return Collective(collective="reduce_scatter", bytes=64 << 20, times_s=[0.3],
                          correct=correct, **facts)  # fmt: skip

    off = {"max_error": 1.0, "wrong_elements": 841704, "first_wrong": 7546904,
           "checked_elements": 8388608}  # fmt: skip
    for rank, written in enumerate([record(False, **off), record()]):
        writer = EventWriter(events_path(tmp_path, rank), rank)
        writer.write(written)
        writer.close()
    older_line = {
        "schema": 3,
        "event": "collective",
        "rank": 2,
        "host": "h",
        "time": 1.0,
        "collective": "reduce_scatter",
        "bytes": 64 << 20,
        "times_s": [0.3],
        "max_error": 1.0,
        "correct": False,
        "servers": 0,
    }  # before the counts
    events_path(tmp_path, 2).write_text(json.dumps(older_line) + "\n")
    per_rank = {rank: read_records(events_path(tmp_path, rank)) for rank in (0, 1, 2)}
    (read,) = per_rank[0]
    assert {name: getattr(read, name) for name in off} == off and not read.correct
    assert per_rank[2][0].wrong_elements == 0 and per_rank[2][0].first_wrong is None
    (row,) = collective_rows(per_rank, processes=3)
    assert row["wrong_ranks"][0] == (
        {"rank": 0, "elements": 841704, "of": 8388608, "first": 7546904, "max_error": 1.0}
    )
    assert wrong_results([row]) == (
        "wrong results: reduce_scatter 67108864 B (rank 0: 841704 of 8388608 elements wrong, "
        "the first at element 7546904, off by up to 1; rank 2: wrong, off by up to 1)"
    )
    one = {"max_error": 0.5, "wrong_elements": 1, "first_wrong": 0, "checked_elements": 1}
    older = Collective(collective="all_gather", bytes=8, times_s=[1e-3], correct=False)
    damaged = dataclasses.replace(older, wrong_elements=-3, first_wrong=True, max_error=2.5)
    rows = collective_rows(
        {0: [older, record()], 1: [damaged, record(False, **one)], 2: [record(False)]}, 3
    )
    assert wrong_results(rows) == (
        "wrong results: all_gather 8 B (rank 0: wrong; rank 1: wrong, off by up to 2.5), "
        "reduce_scatter 67108864 B (rank 1: 1 of 1 element wrong, the first at element 0, "
        "off by up to 0.5; rank 2: wrong)"
    )
    assert wrong_results(collective_rows({0: [record()], 1: [record()]}, 2)) is None
    assert wrong_results([{"collective": "broadcast", "bytes": 4, "correct": False}]) == (
        "wrong results: broadcast 4 B"  # a row of a microbench.json from before wrong_ranks
    )


def test_collectives_without_rows_are_named_with_why():
    requested = ("all_reduce", "broadcast", "send_recv")
    assert not_measured(requested, {"all_reduce", "broadcast", "send_recv"}, 2, "x") == {}
    assert not_measured(requested, {"all_reduce", "broadcast"}, 2, "horovod-torch") == {
        "send_recv": "horovod-torch's library offers no such collective"
    }
    assert not_measured(requested, {"all_reduce"}, 1, "torch-ddp") == {
        "broadcast": "torch-ddp's library offers no such collective",
        "send_recv": "it needs 2 processes",
    }


def test_the_not_measured_line_is_one_per_reason_on_stderr(capsys):
    stored = {"not_measured": {"send_recv": "b's library offers no such collective",
                               "all_gather": "b's library offers no such collective"}}  # fmt: skip
    _say_not_measured(stored)
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "dlscale: not measured: send_recv, all_gather (b's library offers no such collective)\n"
    )
    _say_not_measured({"not_measured": {}})
    _say_not_measured({})  # a microbench.json from before the key
    assert capsys.readouterr() == ("", "")


def test_a_fit_with_no_bandwidth_term_is_stored_without_an_infinity():
    """Small messages as slow as large ones (a library's fixed per-call cost, e.g. Horovod's
    cycle): beta is 0, and the stored fit says no bandwidth rather than inf (which JSON
    cannot hold)."""
    rows = [
        {"collective": "all_reduce", "bytes": 4, "time_s": 8e-3},
        {"collective": "all_reduce", "bytes": 1 << 20, "time_s": 4e-3},
        {"collective": "broadcast", "bytes": 4, "time_s": 1.0},
    ]
    fits = fit_patterns(rows, 2)
    assert set(fits) == {"ring"}  # one broadcast size: no tree fit
    fit = fits["ring"]
    assert fit["beta_s_per_byte"] == 0 and fit["bandwidth_bit_s"] is None
    json.dumps(fits, allow_nan=False)
    assert fit_patterns(rows, 1) == {} and fit_patterns(rows[:1], 2) == {}
    rows[0]["time_s"] = 1e-4
    fitted = fit_patterns(rows, 2)["ring"]
    assert fitted["bandwidth_bit_s"] == 8 / fitted["beta_s_per_byte"]


def test_messages_through_parameter_servers_fit_only_the_ps_pattern():
    """MXNet's push and pull (ps_pushpull) fit ``ps`` with the servers that held each message;
    its broadcast, through the servers too, is no binomial tree: no tree fit from it."""
    from dlscale.perfmodel.costs import Network, collective_s

    net = Network(2e-4, 1e-9)
    held = [(4, 1), (1 << 16, 1), (1 << 20, 1), (16 << 20, 2)]  # 4M floats: split over 2
    rows = [
        {"collective": "ps_pushpull", "bytes": n, "servers": k,
         "time_s": collective_s("ps_pushpull", n, 2, net, k)}
        for n, k in held
    ] + [
        {"collective": "broadcast", "bytes": n, "servers": 1, "time_s": 1e-3 + n * 1e-9}
        for n in (4, 1 << 20)
    ]  # fmt: skip
    fits = fit_patterns(rows, 2)
    assert set(fits) == {"ps"} and fits["ps"]["collective"] == "ps_pushpull"
    assert fits["ps"]["alpha_s"] == pytest.approx(2e-4) and fits["ps"]["max_error"] < 1e-9
    assert fits["ps"]["beta_s_per_byte"] == pytest.approx(1e-9)
    for row in rows:  # the same broadcast without servers (torch's) fits the tree
        row["servers"] = 0
    assert set(fit_patterns(rows, 2)) == {"tree"}
    rows[-1]["servers"] = True  # a hand-edited count that is no count: no servers
    assert set(fit_patterns(rows, 2)) == {"tree"}
    # one worker alone: its push and pull are the ps pattern's cost at p = 1 (an asynchronous
    # worker's own), fitted; a tree of one process moves nothing, so never fitted
    alone = [{"collective": "ps_pushpull", "bytes": n, "servers": 1,
              "time_s": 2 * 2e-4 + 2 * n * 1e-9} for n in (4, 1 << 16, 1 << 20)]  # fmt: skip
    assert set(fit_patterns(alone + rows, 1)) == {"ps"}
    assert fit_patterns(alone, 1)["ps"]["alpha_s"] == pytest.approx(2e-4)
    assert fit_patterns(alone, 1)["ps"]["beta_s_per_byte"] == pytest.approx(1e-9)


def test_rows_carry_the_servers_that_held_the_message():
    per_rank = {
        rank: [Collective(collective="ps_pushpull", bytes=4, times_s=[1e-3], servers=1),
               Collective(collective="broadcast", bytes=4, times_s=[1e-3])]
        for rank in (0, 1)
    }  # fmt: skip
    rows = {r["collective"]: r for r in collective_rows(per_rank, processes=2)}
    assert rows["ps_pushpull"]["servers"] == 1 and rows["broadcast"]["servers"] == 0
    # an all-reduce by its result: nccl-tests' all-reduce factor 2(p-1)/p, 3/2 on 4 workers
    assert collective_rows(
        {0: [Collective(collective="ps_pushpull", bytes=1000, times_s=[1e-3])]}, 4
    )[0]["busbw_bytes_s"] == pytest.approx(1e6 * 1.5)


def test_a_call_of_many_messages_is_timed_per_message():
    """JAX's kernel reduces up to 16 arrays of a size in one compiled program, as a training
    step's gradient runs; each message's time is the call's over the messages, and the record
    and its row say how many one call ran."""
    from dlscale.frameworks.jax.collectives import messages

    ticks = iter(range(100))
    clock = lambda: float(next(ticks))  # noqa: E731  each call takes 1 s
    ok = (lambda: None, lambda: None, lambda: 0.0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("dlscale.microbench.timing.time.perf_counter", clock)
        record = time_collective(
            "all_reduce", 64, 2, 0, lambda count: ok, lambda: None, most=2, messages=4
        )
    assert record.times_s and all(t == 0.25 for t in record.times_s)
    assert record.messages_per_call == 4
    (row,) = collective_rows({0: [record], 1: [record]}, processes=2)
    assert row["messages_per_call"] == 4 and row["time_s"] == 0.25
    assert [messages(s) for s in (4, 256 << 10, 1 << 20, 4 << 20, 16 << 20)] == [16, 16, 4, 1, 1]


def test_an_emulated_links_burst_is_left_out_of_the_fit():
    """Under an emulated link's token bucket burst (4 ms of its rate: 50,000 B at 100 Mbit/s) a
    message passes at the loopback's speed; fitted with them, a 100 Mbit/s link came out at
    3.95 Gbit/s (measured: torch gloo, 2 nodes). The fit takes the sizes from the burst up and
    says so; the rows themselves are all kept (validation interpolates them)."""
    from dlscale.cli.microbench import _fitted_from, unshaped_below

    config = {"launcher": "torchrun", "options": {"launcher": {"network": "100mbit", "nnodes": 2}}}
    assert unshaped_below(config) == 50_000
    assert unshaped_below({"launcher": "local", "options": {}}) == 0
    assert unshaped_below({**config, "options": {"launcher": {"network": "unshaped:1ms"}}}) == 0
    rate = 100e6 / 8  # bytes a second
    times = {4: 115e-6, 4096: 197e-6, 16384: 222e-6}  # under the burst: the loopback's speed
    times |= {n: 1e-4 + n / rate for n in (65536, 262144, 1 << 20, 4 << 20)}
    rows = [{"collective": "all_reduce", "bytes": n, "time_s": t} for n, t in times.items()]
    whole, shaped = fit_patterns(rows, 2)["ring"], fit_patterns(rows, 2, 50_000)["ring"]
    assert whole["bandwidth_bit_s"] > 3 * 100e6  # pulled off by the unshaped small messages
    assert shaped["bandwidth_bit_s"] == pytest.approx(100e6, rel=0.02)
    assert shaped["fitted_from_bytes"] == 50_000 and whole["fitted_from_bytes"] == 0
    assert _fitted_from(shaped).startswith("; from 48.8281 KiB up")
    assert _fitted_from(whole) == "" and _fitted_from({"fitted_from_bytes": True}) == ""
    assert fit_patterns(rows[:4], 2, 50_000) == {}  # one size above the burst: no fit


def test_emulated_hosts_links_burst_is_left_out_of_the_fit(tmp_path, monkeypatch):
    """mpirun across ``dlscale hosts start --link 100mbit``'s hosts: the run names no network,
    the test bed's record does. Fitted with the sizes under the burst, a send_recv across 3 such
    hosts came out at 0.23 Gbit/s (4 MiB took 347 ms: 0.097), which put torch-ps' push and pull
    at half their time (+60% predicted). Hosts that are not the test bed's are real: no burst."""
    from dlscale.cli.microbench import unshaped_below
    from dlscale.launchers import testbed_record
    from dlscale.launchers.testbed_record import Testbed

    record = tmp_path / "record.json"
    monkeypatch.setattr(testbed_record, "RECORD", record)
    bed = Testbed(dir=str(tmp_path), hosts=("dlsnode1", "dlsnode2", "dlsnode3"), slots=1,
                  link="100mbit")  # fmt: skip
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("dlsnode1 slots=1\ndlsnode3 slots=1\n")

    def below(**launcher: str) -> int:
        return unshaped_below({"launcher": "mpirun", "options": {"launcher": launcher}})

    assert below(hosts="dlsnode1:1,dlsnode2:1") == 0  # no test bed runs
    record.write_text(bed.to_json())
    assert below(hosts="dlsnode1:1,dlsnode2:1") == 50_000
    assert below(hosts="", hostfile=str(hostfile)) == 50_000
    assert below(hosts="dlsnode1:1,gpu07:4") == 0  # a host that is not the test bed's
    assert below(hosts="dlsnode1:x") == 0  # a list the run itself refuses
    assert below(hostfile=str(tmp_path / "missing")) == 0
    record.write_text(bed.to_json().replace('"100mbit"', '""'))  # hosts without a link
    assert below(hosts="dlsnode1:1") == 0
    for damaged in ("[1, 2]", '{"hosts": "dlsnode1", "slots": 1}', "{", "\x00" * 8):
        record.write_text(damaged)
        assert below(hosts="dlsnode1:1") == 0


def test_torch_ps_servers_serve_every_round_its_workers_time_in_their_order():
    """torch-ps' servers time nothing: they serve as many pushes and pulls of each size as the
    workers' shared loop runs (warm-up calls included), or a run would hang or mismatch; a
    message is split over the servers in near-equal parts, never an empty one."""
    from dlscale.frameworks.torch.ps_collectives import OFFERED, rounds
    from dlscale.microbench.timing import server_parts as parts
    from dlscale.microbench.timing import time_offered

    settings = Settings(collectives=("all_reduce", "ps_pushpull", "broadcast"),
                        sizes=(4, 6, 1 << 20, 64 << 20), max_iterations=5)  # fmt: skip
    timed: list[int] = []
    for _ in time_offered(
        settings, OFFERED, 3, 0,
        lambda _c, _s, count: (lambda: None, lambda: timed.append(count), lambda: 0.0),
        lambda: None,
    ):  # fmt: skip
        pass
    assert [count for count, calls in rounds(settings, 3) for _ in range(calls)] == timed
    assert len(timed) == 3 * (2 + 5) + (1 + 3)  # 4 B, 6 B, 1 MiB; 64 MiB: 3 timed at least
    assert parts(1, 2) == [1] and parts(6, 3) == [2, 2, 2] and parts(7, 3) == [3, 2, 2]
    assert sum(parts(10**6 + 1, 4)) == 10**6 + 1 and parts(5, 1) == [5]
