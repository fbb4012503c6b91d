"""JAX's collectives over gloo, for ``dlscale microbench --backend jax-dp``: the same sizes,
iterations, untimed preparation, check and records as :mod:`dlscale.frameworks.torch.collectives`
(the loop is :mod:`dlscale.microbench.timing`'s), each call a compiled ``jax.shard_map`` over
the processes' devices (one CPU device per process, as jax-dp trains):

* all_reduce: ``lax.psum`` (what jax-dp's ``lax.pmean`` of the gradients runs, before the
  division);
* all_gather: ``lax.all_gather(..., tiled=True)``, each rank giving size/p;
* reduce_scatter: ``lax.psum_scatter(..., tiled=True)``, each rank keeping size/p.

Each function is compiled before its first call (the warm-up calls then time no compiler), and
every call waits for its result (``block_until_ready``). The barrier is
``multihost_utils.sync_global_devices``, itself a small all-reduce. Not offered: broadcast
(``lax.pbroadcast``, XLA's CollectiveBroadcast, has no CPU lowering in jaxlib 0.10.2: "MLIR
translation rule for primitive 'pbroadcast' not found for platform cpu"; its documented
equivalent, a masked ``psum``, is an all-reduce, which would be timed as a broadcast), send_recv
(a ``ppermute`` moves every device's message at once, not one between two ranks) and
ps_pushpull (no parameter server); ``dlscale microbench`` says they were not measured.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlscale.frameworks.jax.env import import_jax, start_distributed
from dlscale.microbench import Settings
from dlscale.microbench.timing import Operation, time_offered
from dlscale.runtime.context import WorkerContext

OFFERED = ("all_reduce", "all_gather", "reduce_scatter")
AXIS = "dp"


def run(ctx: WorkerContext, settings: Settings) -> None:
    jax = import_jax(threads=ctx.threads, local_rank=ctx.local_rank, precision="float32")
    start_distributed(jax, ctx)
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh

    mesh = Mesh(np.array(jax.devices()), (AXIS,))
    p, rank = jax.process_count(), jax.process_index()
    try:
        for record in time_offered(
            settings, OFFERED, p, rank,
            lambda collective, _, count: _operation(jax, mesh, collective, count, p, rank),
            lambda: multihost_utils.sync_global_devices("dlscale-microbench"),
        ):  # fmt: skip
            ctx.events.write(record)
    finally:
        jax.distributed.shutdown()


def _operation(jax: Any, mesh: Any, collective: str, count: int, p: int, rank: int) -> Operation:
    """The untimed preparation (nothing: JAX's arrays are not overwritten), the call, and the
    largest error of its result on this rank."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    lax = jax.lax
    mine, total = float(rank + 1), p * (p + 1) / 2
    split = NamedSharding(mesh, P(AXIS))
    size = count
    if collective == "all_reduce":
        body, expected = (lambda a: lax.psum(a, AXIS)), np.full(count, total)
    elif collective == "all_gather":
        body = lambda a: lax.all_gather(a, AXIS, tiled=True)  # noqa: E731
        expected = np.repeat(np.arange(1, p + 1, dtype=np.float32), count)
    elif collective == "reduce_scatter":
        body, size = (lambda a: lax.psum_scatter(a, AXIS, tiled=True)), count * p
        expected = np.full(count, total)
    else:
        raise ValueError(f"JAX's collectives here offer no {collective}")
    local = np.full(size, mine, dtype=np.float32)
    x = jax.make_array_from_process_local_data(split, local)
    mapped = jax.shard_map(body, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS))
    compiled = jax.jit(mapped).lower(x).compile()
    result: list[Any] = []

    def call() -> None:
        result[:] = [compiled(x).block_until_ready()]

    def check() -> float:
        got = np.asarray(result[0].addressable_shards[0].data, dtype=np.float64)
        return float(np.abs(got - expected).max())

    return (lambda: None), call, check
