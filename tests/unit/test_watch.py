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
