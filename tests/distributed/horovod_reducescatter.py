"""Run under ``horovodrun -np 2 --gloo``: ``hvd.reducescatter`` called CALLS times at each
size (MiB), every call's result checked element by element; prints one line per rank,
``wrong N of M calls``, the first wrong call's count and range of elements."""

import sys

import horovod.torch as hvd
import torch

hvd.init()
p, rank = hvd.size(), hvd.rank()
calls = int(sys.argv[1])
wrong, first = 0, ""
for mib in (int(size) for size in sys.argv[2:]):
    x = torch.full(((mib << 20) // 4,), float(rank + 1))
    total = p * (p + 1) / 2
    for _ in range(calls):
        hvd.barrier()
        out = hvd.reducescatter(x, name=f"check.{mib}", op=hvd.Sum)
        bad = torch.nonzero(out != total).flatten()
        if len(bad):
            wrong += 1
            first = first or f"{len(bad)} at {mib} MiB, elements {int(bad[0])}..{int(bad[-1])}"
print(f"rank {rank}: wrong {wrong} of {calls * (len(sys.argv) - 2)} calls {first}", flush=True)
hvd.shutdown()
