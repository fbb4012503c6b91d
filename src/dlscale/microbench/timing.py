"""The timing loop every library's kernel shares: the message's element count, warm-up and timed
calls, each after an untimed ``prepare`` and the library's own barrier, the first timed result
checked; one :class:`~dlscale.contract.records.Collective` per collective and size. The kernels
(torch, torch-ring, Horovod, TensorFlow, MXNet) give only their library's calls and barrier to
:func:`time_offered`.

Framework-free: a device wait (CUDA) comes in as ``synchronize``."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from dlscale.contract.records import Collective
from dlscale.microbench import MIN_PROCESSES, Settings, iterations

Operation = tuple[Callable[[], object], Callable[[], object], Callable[[], ArrayLike]]
"""What to do before each call (untimed: reset the output, refill the inputs), the call to
time, and a check of its result after a call: the absolute difference of each element of
this rank's result from the exact one, in the result's order, as anything ``numpy.asarray``
takes without a copy (a NumPy array; a CPU tensor's ``.numpy()``), all zeros when exact; an
empty one where the rank has no result to check (send_recv's idle ranks). A result missing
or of the wrong shape is compared as zeros (every exact value is at least 1: all wrong).
:func:`check_summary` reads it."""


@dataclass(frozen=True)
class Checked:
    """What a check found on one rank (:func:`check_summary`)."""

    max_error: float
    """The largest finite difference (0.0: exact or none finite)."""
    wrong: int
    """Elements that differ (a difference other than 0: NaN counts)."""
    first: int | None
    """The index of the first of them; ``None`` when none differs."""
    elements: int
    """Elements compared."""


def check_summary(difference: ArrayLike) -> Checked:
    """The largest difference, how many elements differ and the first of them, from a check's
    absolute differences (:data:`Operation`). Holds at most a bool per element beyond them (the
    first index, only where some element differs), so a check of one buffer the size of the
    result keeps :data:`~dlscale.preflight.COLLECTIVE_BUFFERS`' two for the check."""
    values = np.asarray(difference).reshape(-1)
    if values.size == 0:
        return Checked(0.0, 0, None, 0)
    wrong = int(np.count_nonzero(values))
    if not wrong:
        return Checked(0.0, 0, None, int(values.size))
    largest = float(values.max())
    if not math.isfinite(largest):  # NaN or an infinity: wrong, but no number JSON can hold
        finite = values[np.isfinite(values)]
        largest = float(finite.max()) if finite.size else 0.0
    return Checked(largest, wrong, int(np.argmax(values != 0)), int(values.size))


PER_RANK = ("all_gather", "reduce_scatter")
"""Collectives whose ``size`` is the whole (gathered output, scattered input), each rank's part
size/p (nccl-tests' convention); the others move ``size`` bytes."""


def element_count(collective: str, size: int, processes: int) -> int:
    """float32 elements of the tensor each rank gives: ``size`` bytes, or size/p of them."""
    if collective in PER_RANK:
        return max(1, size // 4 // processes)
    return max(1, size // 4)


def time_collective(
    collective: str,
    size: int,
    processes: int,
    rank: int,
    operation: Callable[[int], Operation],
    barrier: Callable[[], object],
    most: int,
    synchronize: Callable[[], object] | None = None,
    messages: int = 1,
) -> Collective:
    """Time ``collective`` at ``size`` bytes: ``operation(count)`` builds the calls on
    :func:`element_count` elements; every call (warm-up and timed, :func:`iterations`) runs
    after ``prepare`` and ``barrier``, between two ``synchronize`` when given. send_recv's time
    is half the round trip, on ranks 0 and 1 only; a call that runs ``messages`` of that size
    back to back is timed per message (its time / ``messages``)."""
    count = element_count(collective, size, processes)
    prepare, op, check = operation(count)
    warmup, timed = iterations(size, most)
    times: list[float] = []
    checked = Checked(0.0, 0, None, 0)
    for index in range(warmup + timed):
        prepare()
        barrier()
        if synchronize is not None:
            synchronize()
        started = time.perf_counter()
        op()
        if synchronize is not None:
            synchronize()
        elapsed = time.perf_counter() - started
        if index == warmup:
            checked = check_summary(check())
        if index >= warmup:
            times.append(elapsed / 2 if collective == "send_recv" else elapsed / messages)
    moved = count * 4 * (processes if collective in PER_RANK else 1)
    active = collective != "send_recv" or rank < 2
    return Collective(
        collective=collective,
        bytes=moved,
        times_s=times if active else [],
        max_error=checked.max_error,
        correct=checked.wrong == 0,
        wrong_elements=checked.wrong,
        first_wrong=checked.first,
        checked_elements=checked.elements,
        messages_per_call=messages,
    )


def time_offered(
    settings: Settings,
    offered: tuple[str, ...],
    processes: int,
    rank: int,
    operation: Callable[[str, int, int], Operation],
    barrier: Callable[[], object],
    synchronize: Callable[[], object] | None = None,
    messages: Callable[[int], int] | None = None,
) -> Iterator[Collective]:
    """:func:`time_collective` of every requested collective the library ``offers`` (and has
    the processes for: :data:`~dlscale.microbench.MIN_PROCESSES`) at every size, in the
    settings' order, the same on every rank; ``operation(collective, size, count)`` builds the
    calls, each running ``messages(size)`` messages of the size where given. What is skipped
    the command names as not measured."""
    for collective, size in timed_in_order(settings, offered, processes):
        yield time_collective(
            collective, size, processes, rank,
            functools.partial(operation, collective, size),
            barrier, settings.max_iterations, synchronize,
            messages(size) if messages is not None else 1,
        )  # fmt: skip


def timed_in_order(
    settings: Settings, offered: tuple[str, ...], processes: int
) -> Iterator[tuple[str, int]]:
    """Every (collective, size) :func:`time_offered` times, in its order: the requested
    collectives the library offers and has the processes for, each at every size; what a
    process that serves the calls without timing them (torch-ps' servers) follows."""
    for collective in settings.collectives:
        if collective in offered and processes >= MIN_PROCESSES.get(collective, 1):
            for size in settings.sizes:
                yield collective, size


def server_parts(count: int, servers: int) -> list[int]:
    """The elements each parameter server holds of a message of ``count`` in a push and pull
    kernel (torch-ps', tf-ps'): near-equal, the larger parts first, as a model's variables are
    spread over its servers by bytes; no empty part (a message of fewer elements than servers
    is held by fewer)."""
    held = max(1, min(servers, count))
    return [count // held + (1 if s < count % held else 0) for s in range(held)]
