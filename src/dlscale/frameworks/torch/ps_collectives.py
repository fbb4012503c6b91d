"""torch-ps' own push and pull, for ``dlscale microbench --backend torch-ps``: the same sizes,
iterations, untimed preparation, check and records as :mod:`dlscale.frameworks.torch.collectives`
(the loop is :mod:`dlscale.microbench.timing`'s), on the messages torch-ps' synchronous step
sends (:mod:`dlscale.frameworks.torch.ps`):

* ps_pushpull: each worker splits its message of ``size`` bytes into ``k`` near-equal parts, one
  a server (as the training's shards are balanced by bytes; fewer parts where the message has
  fewer elements than there are servers), sends every part at once (``isend``) and then
  receives each server's reply; a server receives the part from all N workers (explicit
  sources), sums them and sends the sum back to every worker, as its ``dist_sync`` round does
  with the mean before its optimizer step (no optimizer here: the sum is exact, and checked). An
  all-reduce by its result, through the servers: recorded as ``ps_pushpull`` with the servers
  that held the message (``Collective.servers``), which the ``ps`` fit and ``predict
  --validate``'s ``ps_pushpull/<servers>`` read, never as ``all_reduce``.

Every process of the run runs this (:attr:`~dlscale.contract.backends.BackendSpec.
collectives_everywhere`): the servers serve exactly the rounds the workers time, in the same
order (:func:`rounds`), with no barrier of their own; the workers' barrier is a gloo group of
the workers alone. Messages go through gloo on CPU buffers, as torch-ps' do (a CUDA worker's
copies between its device and the host are not in these times). The servers' update (an SGD
step on their shard) is not either: it is compute, which the model prices from the point's
step.

Not offered: all_reduce, all_gather, reduce_scatter, broadcast and send_recv (torch-ps sends
none; torch-ddp's microbench measures torch.distributed's collectives on the same network).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import torch
import torch.distributed as dist

from dlscale.frameworks.torch.collectives import difference
from dlscale.frameworks.torch.loop import init_process_group
from dlscale.microbench import Settings, iterations
from dlscale.microbench.timing import (
    Operation,
    element_count,
    server_parts,
    time_offered,
    timed_in_order,
)
from dlscale.runtime.context import WorkerContext

OFFERED = ("ps_pushpull",)
"""torch-ps sends only its pushes and pulls."""
_CPU = torch.device("cpu")


def run(ctx: WorkerContext, settings: Settings) -> None:
    torch.set_num_threads(ctx.threads)
    init_process_group(ctx, _CPU)  # gloo, as torch-ps' training
    workers = ctx.layout.training_ranks
    servers = [p.rank for p in ctx.layout.of_role("server")]
    group = dist.new_group(workers)  # every rank makes it; only the workers wait in it
    try:
        if ctx.process.trains:
            _measure(ctx, settings, workers, servers, group)
        else:
            _serve(settings, workers, servers, servers.index(ctx.rank))
    finally:
        dist.destroy_process_group()


def rounds(settings: Settings, workers: int) -> Iterator[tuple[int, int]]:
    """(elements, calls) of every message size the workers time, warm-up calls included, in
    their order (:func:`~dlscale.microbench.timing.timed_in_order`): what a server serves."""
    for collective, size in timed_in_order(settings, OFFERED, workers):
        warmup, timed = iterations(size, settings.max_iterations)
        yield element_count(collective, size, workers), warmup + timed


def _measure(
    ctx: WorkerContext,
    settings: Settings,
    workers: list[int],
    servers: list[int],
    group: dist.ProcessGroup,
) -> None:
    p, rank = len(workers), workers.index(ctx.rank)
    for record in time_offered(
        settings, OFFERED, p, rank,
        lambda _collective, _size, count: _operation(count, p, rank, servers),
        lambda: dist.barrier(group=group),
    ):  # fmt: skip
        held = len(server_parts(record.bytes // 4, len(servers)))
        ctx.events.write(dataclasses.replace(record, servers=held))


def _operation(count: int, p: int, rank: int, servers: list[int]) -> Operation:
    """What to do before each call (untimed), the push and pull to time, and a check of its
    result after a call: each element's difference from the exact sum."""
    mine = float(rank + 1)
    total = p * (p + 1) / 2
    sizes = server_parts(count, len(servers))
    x = torch.full((count,), mine)
    out = torch.zeros(count)
    pushes, pulls = x.split(sizes), out.split(sizes)  # views: a pull lands in ``out``

    def pushpull() -> None:
        sent = [dist.isend(part, dst=servers[s]) for s, part in enumerate(pushes)]
        _wait([*sent, *(dist.irecv(part, src=servers[s]) for s, part in enumerate(pulls))])

    return out.zero_, pushpull, lambda: difference(out, total)


def _serve(settings: Settings, workers: list[int], servers: list[int], index: int) -> None:
    """Every call the workers time: their parts received, summed, the sum sent back to each
    (a server past the message's parts sits the size out); its buffers made once a size."""
    for count, calls in rounds(settings, len(workers)):
        sizes = server_parts(count, len(servers))
        if index >= len(sizes):
            continue
        buffers = [torch.empty(sizes[index]) for _ in workers]
        total = buffers[0]  # summed into in place: a server holds N parts, no more
        for _ in range(calls):
            _wait([dist.irecv(b, src=w) for w, b in zip(workers, buffers, strict=True)])
            for buffer in buffers[1:]:
                total.add_(buffer)
            _wait([dist.isend(total, dst=w) for w in workers])


def _wait(works: list[dist.Work | None]) -> None:
    for work in works:
        assert work is not None  # None only on a rank outside the group
        work.wait()
