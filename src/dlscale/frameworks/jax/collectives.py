"""JAX's collectives over gloo, for ``dlscale microbench --backend jax-dp``: the same sizes,
iterations, untimed preparation, check and records as :mod:`dlscale.frameworks.torch.collectives`
(the loop is :mod:`dlscale.microbench.timing`'s), each call a compiled ``jax.shard_map`` over
the processes' devices (one CPU device per process, as jax-dp trains):

* all_reduce: ``lax.psum`` (what jax-dp's ``lax.pmean`` of the gradients runs, before the
  division);
* all_gather: ``lax.all_gather(..., tiled=True)``, each rank giving size/p;
* reduce_scatter: ``lax.psum_scatter(..., tiled=True)``, each rank keeping size/p.

Each function is compiled before its first call (the warm-up calls then time no compiler), and
every call waits for its result (``block_until_ready``). A call reduces up to 16 arrays of the
size at once (up to 4 MiB in all: :func:`messages`), one program, timed per array, as a
training step's gradient runs. The barrier is
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


BATCH_BYTES = 4 << 20
"""Bytes of arrays one timed call reduces (:func:`messages`): a training step's gradient is many
small arrays in one compiled program, run back to back without a dispatch between them."""
MOST_MESSAGES = 16


def messages(size: int) -> int:
    """The arrays of ``size`` bytes one timed call runs: as many as fit :data:`BATCH_BYTES`, 1 to
    :data:`MOST_MESSAGES`. Each call is one compiled program over them (one XLA all-reduce of
    that many operands, which XLA's CPU runtime runs as one gloo collective per operand, as it
    runs a step's gradient: :mod:`dlscale.frameworks.jax.hlo`), timed per message, so a
    message's time holds no dispatch of its own."""
    return max(1, min(MOST_MESSAGES, BATCH_BYTES // max(size, 1)))


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
            lambda collective, size, count: _operation(
                jax, mesh, collective, count, p, rank, messages(size)
            ),
            lambda: multihost_utils.sync_global_devices("dlscale-microbench"),
            messages=messages,
        ):  # fmt: skip
            ctx.events.write(record)
    finally:
        jax.distributed.shutdown()


def _operation(
    jax: Any, mesh: Any, collective: str, count: int, p: int, rank: int, arrays: int
) -> Operation:
    """The untimed preparation (nothing: JAX's arrays are not overwritten), the call (the
    collective of ``arrays`` arrays in one program), and the check: each element's difference
    from the exact result on this rank, the arrays' one after another (an element's index
    counts through them in order)."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    lax = jax.lax
    mine, total = float(rank + 1), p * (p + 1) / 2
    split = NamedSharding(mesh, P(AXIS))
    size = count
    if collective == "all_reduce":
        body, expected = (lambda *a: lax.psum(a, AXIS)), np.full(count, total)
    elif collective == "all_gather":
        body = lambda *a: tuple(lax.all_gather(x, AXIS, tiled=True) for x in a)  # noqa: E731
        expected = np.repeat(np.arange(1, p + 1, dtype=np.float32), count)
    elif collective == "reduce_scatter":
        body = lambda *a: tuple(lax.psum_scatter(x, AXIS, tiled=True) for x in a)  # noqa: E731
        size, expected = count * p, np.full(count, total)
    else:
        raise ValueError(f"JAX's collectives here offer no {collective}")
    inputs = [  # distinct arrays: the compiler cannot fold one operand's collective into another
        jax.make_array_from_process_local_data(split, np.full(size, mine, dtype=np.float32))
        for _ in range(arrays)
    ]
    specs = (P(AXIS),) * arrays
    mapped = jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=specs)
    compiled = jax.jit(mapped).lower(*inputs).compile()
    result: list[Any] = []

    def call() -> None:
        result[:] = jax.block_until_ready(compiled(*inputs))

    def check() -> np.ndarray:
        differences = []
        for r in result:  # each a float64 copy of this rank's shard, made absolute in place
            got = np.array(r.addressable_shards[0].data, np.float64)
            got -= expected
            differences.append(np.abs(got, out=got))
        return differences[0] if len(differences) == 1 else np.concatenate(differences)

    return (lambda: None), call, check
