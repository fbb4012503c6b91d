"""Which rank a failed command is blamed on, and how the failure is worded."""

from dlscale.contract.events import EventWriter, events_path
from dlscale.contract.records import End, Start
from dlscale.launchers.base import PlanEntry
from dlscale.launchers.watch import failed_rank


def test_a_rank_that_dies_after_its_end_record_is_named_as_such(tmp_path):
    """A rank whose results are whole but whose process then died says so, so a crash at exit
    is told apart from one mid-run (and the silent rank is blamed before one that ended)."""
    for rank in (0, 1):
        writer = EventWriter(events_path(tmp_path, rank), rank)
        writer.write(Start(pid=1, world_size=2))
        if rank == 0:
            writer.write(End())
        writer.close()
    entry = PlanEntry(
        ranks=range(1), argv=("x",), env={}, stdout=tmp_path / "o", stderr=tmp_path / "e"
    )
    assert failed_rank(entry, -6, tmp_path, None) == (
        0,
        "rank 0 was killed by SIGABRT after recording the end of its run",
    )
    both = PlanEntry(
        ranks=range(2), argv=("x",), env={}, stdout=tmp_path / "o", stderr=tmp_path / "e"
    )
    assert failed_rank(both, 1, tmp_path, None) == (
        1,
        "rank 1 (command of ranks [0, 1]) exited with code 1",
    )


def test_of_several_dead_commands_the_first_to_record_its_error_is_the_cause(tmp_path):
    """Both ranks exited with code 1: rank 1's loader died (its error first), then rank 0 lost
    its connection to rank 1. Seen dead in the same poll, rank 1 is the cause; a rank killed by
    a signal, or one seen dead a poll earlier, comes before either (a CI run blamed rank 0's
    "Connection closed by peer" when rank 1's loader had been killed)."""
    import json
    from types import SimpleNamespace

    from dlscale.launchers.watch import _cause_order

    for rank, at in ((0, 1000.5), (1, 1000.0)):
        record = {"event": "error", "rank": rank, "time": at, "kind": "RuntimeError"}
        events_path(tmp_path, rank).write_text(json.dumps(record) + "\n")
    entries = tuple(
        PlanEntry(ranks=range(r, r + 1), argv=("x",), env={}, stdout=tmp_path / "o",
                  stderr=tmp_path / "e")
        for r in (0, 1)
    )  # fmt: skip
    plan = SimpleNamespace(entries=entries)

    def cause(codes: dict[int, int], first: set[int]) -> int:
        return min(codes, key=lambda i: _cause_order(i, codes[i], first, plan, tmp_path))

    assert cause({0: 1, 1: 1}, first={0, 1}) == 1  # the earlier error
    assert cause({0: 1, 1: 1}, first={0}) == 0  # seen dead a poll before the other
    assert cause({0: -9, 1: 1}, first={0, 1}) == 0  # killed by a signal
    events_path(tmp_path, 1).write_text("")  # no error recorded: the lowest index
    assert cause({0: 1, 1: 1}, first={0, 1}) == 0


def test_a_rank_that_only_lost_its_peer_is_not_blamed_for_the_silent_one(tmp_path):
    """mpirun across two hosts: rank 1 was killed on its host (no error, no end); rank 0 then
    failed on the closed connection and mpirun saw it exit first, so it reported rank 0 (a CI
    run blamed it). The silent rank is the cause; a rank whose own error is anything else is
    still blamed as reported."""
    from dlscale.contract.records import Error

    def record(message: str) -> None:
        for rank, host in ((0, "dlsnode1"), (1, "dlsnode2")):
            events_path(tmp_path, rank).unlink(missing_ok=True)
            writer = EventWriter(events_path(tmp_path, rank), rank)
            writer.host = host
            writer.write(Start(pid=1, world_size=2))
            if rank == 0:
                writer.write(Error(kind="RuntimeError", message=message))
            writer.close()

    entry = PlanEntry(
        ranks=range(2), argv=("x",), env={}, stdout=tmp_path / "o", stderr=tmp_path / "e"
    )
    record("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.98.0.102]:54437")
    assert failed_rank(entry, 1, tmp_path, 0) == (
        1,
        "rank 1 (command of ranks [0, 1]) exited with code 1 (role worker, on host dlsnode2)",
    )
    record("KeyError: 'label'")  # its own failure: the rank mpirun names
    assert failed_rank(entry, 1, tmp_path, 0)[0] == 0
