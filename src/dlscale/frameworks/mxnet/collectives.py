"""MXNet's kvstore on ps-lite's parameter servers, for ``dlscale microbench --backend mxnet-kv``:
the same sizes, iterations, untimed preparation, check and records as
:mod:`dlscale.frameworks.torch.collectives` (the loop is :mod:`dlscale.microbench.timing`'s), with
the kvstore's calls on a ``dist_sync`` (or ``dist_device_sync``) kvstore, ``kv._barrier()`` (MXNet's
worker barrier, through the scheduler) before each:

* ps_pushpull: ``kv.pushpull(key, x, out=out)``, the call Gluon's Trainer makes for every
  gradient each step: each worker pushes its message to the servers, which sum the N workers'
  pushes (no optimizer is set, so the sum is what they store), then every worker pulls the sum.
  An all-reduce by its result, through the servers: recorded as ``ps_pushpull``, never as
  ``all_reduce``, whose rows fit the ring (docs/metrics.md). One key per size, initialised
  (``kv.init``, which waits for every worker) before the size's first call. On a CPU the
  kvstore pushes ``x`` itself and pulls the sum back into it before copying it into ``out``
  (seen here: after a call ``x`` holds the sum), so ``x`` is refilled before every call, as
  ``out`` is reset.
* broadcast: ``kv.broadcast(key, value, out=out)`` from worker 0, the call Gluon's Trainer
  makes once per parameter when it starts: MXNet's broadcast is ``init`` (worker 0 pushes its
  value to the servers, then every worker waits for the others) and a pull, and a key can be
  broadcast only once, so every call is on a new key (its time includes the servers storing a
  new key and init's worker barrier; the kvstore keeps every key to the end). Through the
  servers, it is no binomial tree: it fits no pattern
  (:attr:`~dlscale.perfmodel.costs.Collective.through_servers`).

MXNet runs its calls asynchronously: ``mx.nd.waitall()`` after the preparation (before the
barrier) and around the timed call. Each record carries the servers that held the message
(``Collective.servers``): the kvstore puts a message of fewer than
``MXNET_KVSTORE_BIGARRAY_BOUND`` elements (10^6 by default: 4 MB) on one server, picked by its
key, and splits a larger one over all ``num_servers``; the ``ps`` fit reads it.

Ranks are the kvstore's (``kv.rank``: ps-lite numbers its workers as they connect to the
scheduler, not as dlscale does), so worker 0 is the one ``init`` takes its value from. Only the
processes that train run this; ps-lite's scheduler and servers serve as they do in training
(:func:`dlscale.frameworks.mxnet.kv.serve`). At the end the kvstore is freed (a worker barrier,
then worker 0 stops the servers); after a failure it is left open (a barrier would wait for
ranks that will never come), and the launcher stops the other processes.

Not offered: all_reduce (the kvstore's all-reduce is ps_pushpull), all_gather, reduce_scatter
and send_recv (a kvstore has no such operation); ``dlscale microbench`` says they were not
measured.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import os
from collections.abc import Iterator
from typing import Any

from dlscale.frameworks.mxnet.declare import KVOptions, MXLoopOptions, check_kv_collectives
from dlscale.frameworks.mxnet.env import import_mxnet
from dlscale.microbench import Settings
from dlscale.microbench.timing import Operation, time_offered
from dlscale.runtime.context import WorkerContext

OFFERED = ("ps_pushpull", "broadcast")
BIGARRAY_BOUND = 1000 * 1000
"""MXNet's default ``MXNET_KVSTORE_BIGARRAY_BOUND`` (elements): a smaller message lives on one
server, a larger one is split over all of them."""
_LEFT_OPEN: list[Any] = []
"""Kvstores not freed after a failure: freeing one waits for every worker."""


def run(ctx: WorkerContext, settings: Settings) -> None:
    cfg = ctx.config
    check_kv_collectives(cfg)  # as dlscale microbench checked it before launch
    kind = cfg.typed(KVOptions).kvstore
    mx = import_mxnet(mkldnn=cfg.typed(MXLoopOptions).mkldnn, threads=ctx.threads)
    kv = mx.kv.create(kind)
    completed = False
    try:
        _measure(ctx, settings, mx, kv)
        completed = True
    finally:
        if completed:
            del kv  # its last reference: a worker barrier, then worker 0 stops the servers
            gc.collect()
        else:
            _LEFT_OPEN.append(kv)


def _measure(ctx: WorkerContext, settings: Settings, mx: Any, kv: Any) -> None:
    """Every offered collective at every size, one record each (nothing here outlives it that
    holds the kvstore)."""
    p, rank = kv.num_workers, kv.rank
    servers = int(os.environ.get("DMLC_NUM_SERVER", ctx.config.typed(KVOptions).num_servers))
    bound = int(os.environ.get("MXNET_KVSTORE_BIGARRAY_BOUND", BIGARRAY_BOUND))
    keys = itertools.count()  # the same keys in the same order on every worker
    for record in time_offered(
        settings, OFFERED, p, rank,
        lambda collective, _, count: _operation(mx, kv, collective, p, rank, keys, count),
        kv._barrier, mx.nd.waitall,
    ):  # fmt: skip
        held = servers if record.bytes // 4 >= bound else 1  # ps_pushpull, broadcast: n bytes
        ctx.events.write(dataclasses.replace(record, servers=held))


def _operation(
    mx: Any, kv: Any, collective: str, p: int, rank: int, keys: Iterator[int], count: int
) -> Operation:
    """What to do before each call (untimed, waited for), the call to time, and a check of its
    result after a call: each element's difference from the exact result."""
    nd = mx.nd
    out = nd.zeros((count,))

    def error(expected: float) -> Any:
        """``|out - expected|`` as a NumPy array: made into ``out`` itself (the next call's
        preparation zeroes it), then copied out: the difference and the copy, two buffers."""
        nd.abs(out - expected, out=out)
        return out.asnumpy()

    if collective == "ps_pushpull":
        mine = float(rank + 1)
        total = p * (p + 1) / 2
        key = next(keys)
        x = nd.full((count,), mine)
        kv.init(key, nd.zeros((count,)))

        def refill() -> None:
            x[:] = mine  # the last call pulled the sum into it
            out[:] = 0
            nd.waitall()

        return (
            refill,
            lambda: kv.pushpull(key, x, out=out),
            lambda: error(total),
        )
    if collective == "broadcast":
        value = nd.full((count,), 1.0 if rank == 0 else 0.0)  # init takes worker 0's

        def reset() -> None:
            out[:] = 0
            nd.waitall()

        return (
            reset,
            lambda: kv.broadcast(next(keys), value, out=out),  # a key is broadcast once
            lambda: error(1.0),
        )
    raise ValueError(f"MXNet's kvstore offers no {collective}")
