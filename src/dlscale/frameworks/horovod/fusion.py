"""The messages a Horovod step sends, from when its gradients became ready.

Horovod's background thread wakes every ``cycle_ms`` and all-reduces, as one fused message of
up to ``fusion_mb`` MB, the tensors every rank made ready since its last cycle. So the messages
of a step follow from when backward produced each gradient: :func:`cycle_messages` groups the
ready times one rank saw (the instants Horovod's hook handed each tensor to the all-reduce,
:class:`~dlscale.frameworks.horovod.counting.CountingCompression`) into windows of one cycle
from each message's first tensor, a message closing early where the next tensor would take it
past the fusion threshold. It leaves out what the rank cannot see: the other ranks' readiness
(a tensor goes when the last rank has it) and a cycle stretched by the work it did, both of
which fuse more. Checked against Horovod's own timeline of the same runs (docs/perfmodel.md).

Horovod's timeline shows the fused responses themselves
(:mod:`~dlscale.frameworks.horovod.timeline`), but recording it costs a core: with
``HOROVOD_TIMELINE`` set at all (a file, ``DYNAMIC``, even empty) its writer thread spins
(Horovod 0.28.1: a full core of CPU time while training sleeps). A run that asked for its
timeline takes its messages from it; every other run from its ready times.

:class:`StepMessages` keeps each synchronized step's ready times (the last :data:`KEPT`; a
step only appends them) and forms each one's messages after the run, with how long before
backward's end each was ready; a run lists a typical step's, the one with the median count
(:func:`typical_step`), and the model replays Horovod's cycle on them
(:func:`dlscale.perfmodel.replay.cycle_exposed_s`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

KEPT = 512
"""The synchronized steps whose messages are kept (a run's last ones)."""


def cycle_messages(
    ready: list[tuple[float, int]], cycle_s: float, threshold: int
) -> list[tuple[int, float]]:
    """Each message of one step whose tensors became ready at ``ready``'s ``(seconds, bytes)``,
    as ``(bytes, seconds its last tensor was ready)``: tensors fuse while they are ready within
    ``cycle_s`` of the message's first one and their sum stays within ``threshold`` bytes (0:
    Horovod fuses nothing)."""
    messages: list[tuple[int, float]] = []
    opened = 0.0
    for at, nbytes in sorted(ready):
        if messages and at - opened < cycle_s and 0 < messages[-1][0] + nbytes <= threshold:
            messages[-1] = (messages[-1][0] + nbytes, at)
        else:
            messages.append((nbytes, at))
            opened = at
    return messages


def typical_step(steps: list[list[int]]) -> list[int]:
    """The step with the median count of messages (of two middle counts, the higher); empty
    where there is none."""
    return steps[median_index(steps)] if steps else []


def median_index(steps: Sequence[list[int]]) -> int:
    """Which of ``steps`` has the median count of messages (of two middle ones, the higher)."""
    return sorted(range(len(steps)), key=lambda i: len(steps[i]))[len(steps) // 2]


class StepMessages:
    """The ready times of each synchronized step a rank took (the last :data:`KEPT`), kept as
    they were seen: a step only appends its list, the messages are formed after the run."""

    def __init__(self, cycle_s: float, threshold: int) -> None:
        self.cycle_s, self.threshold = cycle_s, threshold
        self._ready: deque[list[tuple[float, int]]] = deque(maxlen=KEPT)

    def add(self, ready: list[tuple[float, int]]) -> None:
        """One step's ready times (none: the step synchronized nothing, and is not kept)."""
        if ready:
            self._ready.append(ready)

    def steps(self) -> list[tuple[list[int], list[float]]]:
        """Each kept step's messages (:func:`cycle_messages`): their bytes, and how long before
        the step's last tensor (backward's end) each message's last tensor was ready, in ms."""
        out = []
        for ready in self._ready:
            messages = cycle_messages(ready, self.cycle_s, self.threshold)
            end = messages[-1][1]
            out.append(([n for n, _ in messages], [(end - at) * 1e3 for _, at in messages]))
        return out
