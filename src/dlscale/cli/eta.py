"""How long a study has left, from the runs it already timed: each run still to come is
expected to take as long as the runs of its own point took (its mean), or, for a point not run
yet, as long as the runs of points with as many workers, or else any run. Shown in the progress
line of `dlscale run`."""

from __future__ import annotations

from collections import defaultdict
from statistics import fmean

from rich.progress import ProgressColumn, Task
from rich.text import Text


class StudyClock:
    """The seconds each run of a study took, by point, and the runs still planned."""

    def __init__(self, workers: list[int], runs_each: int) -> None:
        self.workers = workers
        """Workers of each point, by its index in the study."""
        self.left = dict.fromkeys(range(len(workers)), runs_each)
        """Runs still planned of each point."""
        self.took: dict[int, list[float]] = defaultdict(list)

    def plan(self, indices: list[int]) -> None:
        """One more run of each of ``indices`` (a round of the stopping rule)."""
        for index in indices:
            self.left[index] += 1

    def record(self, index: int, seconds: float) -> None:
        self.took[index].append(seconds)
        self.left[index] = max(0, self.left[index] - 1)

    def skip(self, index: int) -> None:
        """A planned run that will not happen (the time budget ran out)."""
        self.left[index] = max(0, self.left[index] - 1)

    def seconds_left(self) -> float | None:
        """The expected seconds of the runs still planned; None before any run was timed."""
        every = [s for runs in self.took.values() for s in runs]
        if not every:
            return None
        by_workers: dict[int, list[float]] = defaultdict(list)
        for index, runs in self.took.items():
            by_workers[self.workers[index]] += runs
        total = 0.0
        for index, count in self.left.items():
            if count:
                same = self.took.get(index) or by_workers.get(self.workers[index]) or every
                total += count * fmean(same)
        return total

    def words(self) -> str:
        """``about 2 min left``, for the progress line."""
        left = self.seconds_left()
        if left is None:
            return "time left: after the first run"
        if left <= 0:
            return ""
        if left < 90:
            return f"about {left:.0f} s left"
        if left < 5400:
            return f"about {left / 60:.0f} min left"
        return f"about {left / 3600:.1f} h left"


class TimeLeftColumn(ProgressColumn):
    """The progress line's ``about 2 min left`` (a task's ``left`` field; none: nothing)."""

    def render(self, task: Task) -> Text:
        return Text(str(task.fields.get("left", "")), style="progress.remaining")
