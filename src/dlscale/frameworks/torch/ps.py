"""torch-ps: a parameter server on torch.distributed point-to-point messages (gloo).

The design is Li et al., "Scaling Distributed Machine Learning with the Parameter Server"
(OSDI 2014): workers compute gradients, servers hold the parameters and apply the updates. The
launcher starts ``workers + num_servers`` processes; ranks ``0..N-1`` are workers and ranks
``N..N+k-1`` servers. Parameters are sharded over the servers by bytes
(:mod:`dlscale.frameworks.torch.ps_shards`); each server keeps its shard in one flat buffer (fp32,
or fp64 under ``precision = float64``: the messages too) and
owns the optimizer for it, :func:`dlscale.frameworks.torch.loop.sgd` over the shard's tensors, so
momentum, weight decay and the learning rate act exactly as a worker-side optimizer's would.

Modes follow MXNet's KVStore:

* ``sync`` (``dist_sync``): every step each worker pushes gradient shard ``s`` to server ``s``;
  the server receives from all N workers (explicit source), averages (sum / N), takes one SGD
  step and sends the fresh shard back to every worker (pull). N workers of batch b are then one
  worker of batch N*b (the mean of per-worker mean losses is the global mean), to fp32
  rounding. Every gradient has staleness 0.
* ``async`` (``dist_async``): a server applies each gradient as soon as it arrives from any
  worker and replies with its parameters and version to that worker only. The staleness of a
  gradient is the server's version (updates applied) minus the version it was computed on.
  Each gradient is scaled by the run's ``async_update`` rule before the step, the same rule
  in every asynchronous engine (:mod:`dlscale.contract.algorithms`): by 1/N by default, so
  that N asynchronous updates move the parameters as far as one synchronous step and ``lr``
  means the same in both modes; ``sum`` applies it whole. Momentum and weight decay act per
  update, as they would for any optimizer stepping N times. Once a worker has trained it sends
  a ``trained`` marker and waits: every server replies to all workers once all of them have,
  so each holds the final trained parameters before they are saved (a worker's last pull may
  miss the others' last updates).

Every message is a shard's flat buffer plus one trailing element carrying the version (see
:mod:`~dlscale.frameworks.torch.ps_shards`); a worker that has finished sends a ``done`` marker to
every server, and a server leaves its loop once all N workers are done, then records the staleness
histogram and its counters (``staleness`` and ``server`` events). The histogram counts gradients: N
per update in sync mode (all 0), one per update in async mode. A server's byte counters cover
everything it moved, the initial parameters and the done markers included.

Bytes: a worker moves ``push + pull`` per step, the gradient and the parameters of every shard
with their framing; that is both the counted figure and the model (``describe``), exactly.

Devices: messages always go through gloo on CPU buffers (a CUDA worker copies its gradients to
the host and the parameters back); servers run on the CPU, as MXNet's servers do.

Failure: a rank that dies makes the launcher stop the others; a worker waiting on a dead server
fails on the closed connection (or at the process group's timeout), and a server waiting for
workers is stopped by the launcher.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist

from dlscale.contract.algorithms import PATTERN_FACT, async_gradient_scale
from dlscale.contract.records import Server, Staleness
from dlscale.contract.run_config import RunConfig
from dlscale.frameworks.torch import ps_shards
from dlscale.frameworks.torch.loop import (
    TorchStrategy,
    build_model,
    init_process_group,
    run_dtype,
    run_training,
    sgd,
)
from dlscale.frameworks.torch.options import PSOptions
from dlscale.frameworks.torch.ps_shards import DONE, FRAME, MAX_VERSION, TRAINED, Shard
from dlscale.runtime.context import WorkerContext

_CPU = torch.device("cpu")


def _isend(tensor: torch.Tensor, dst: int) -> dist.Work:
    work = dist.isend(tensor, dst=dst)
    assert work is not None  # None only on a rank outside the group
    return work


def _irecv(tensor: torch.Tensor, src: int) -> dist.Work:
    work = dist.irecv(tensor, src=src)
    assert work is not None
    return work


def _wait_all(works: Sequence[dist.Work]) -> None:
    for work in works:
        work.wait()


def plan(cfg: RunConfig, numels: Sequence[int], servers: int) -> list[Shard]:
    """The run's shards, their elements of its precision's size."""
    return ps_shards.plan(numels, servers, run_dtype(cfg).itemsize)


def trainable(model: torch.nn.Module) -> list[torch.Tensor]:
    """The parameters the servers hold: ``named_parameters`` order, those that need gradients."""
    return [p for _, p in model.named_parameters() if p.requires_grad]


class PSStrategy(TorchStrategy):
    """Worker side (push gradients, pull parameters) and server side (:meth:`serve`)."""

    def __init__(self) -> None:
        self.cfg: RunConfig | None = None
        self.params: list[torch.Tensor] = []
        self.shards: list[Shard] = []
        self.versions: list[int] = []
        self._push: list[torch.Tensor] = []
        self._pull: list[torch.Tensor] = []
        self._bytes = 0
        self._skip = False
        self.server_ranks: list[int] = []

    # -- worker ---------------------------------------------------------------------------

    def setup(self, ctx: WorkerContext, device: torch.device) -> None:
        self.cfg = ctx.config
        self.server_ranks = [p.rank for p in ctx.layout.of_role("server")]
        init_process_group(ctx, _CPU)  # gloo: point-to-point, receive from any source

    def _server_rank(self, server: int) -> int:
        return self.server_ranks[server]

    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """Lay out the shards and pull the servers' initial parameters (version 0)."""
        assert self.cfg is not None
        self.params = trainable(model)
        dtype = run_dtype(self.cfg)
        if any(p.dtype != dtype for p in self.params):
            raise TypeError(f"torch-ps holds {dtype} parameters only: a model of another dtype")
        servers = self.cfg.typed(PSOptions).num_servers
        self.shards = plan(self.cfg, [p.numel() for p in self.params], servers)
        self._push = [torch.zeros(s.numel + FRAME, dtype=dtype) for s in self.shards]
        self._pull = [torch.zeros(s.numel + FRAME, dtype=dtype) for s in self.shards]
        self.versions = [0] * len(self.shards)
        self._pull_all([])
        return model

    def make_optimizer(
        self, model: torch.nn.Module, cfg: RunConfig
    ) -> torch.optim.Optimizer | None:
        return None  # the servers apply the updates

    @torch.no_grad()
    def update(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
        """Push every gradient shard with its version, then wait for every fresh shard."""
        if self._skip:
            return
        sends = []
        for shard, buffer, version in zip(self.shards, self._push, self.versions, strict=True):
            for index, offset, numel in zip(shard.params, shard.offsets, shard.numels, strict=True):
                grad = self.params[index].grad
                if grad is None:
                    buffer[offset : offset + numel].zero_()
                else:
                    buffer[offset : offset + numel].copy_(grad.reshape(-1))
            buffer[-1] = version
            sends.append(_isend(buffer, dst=self._server_rank(shard.server)))
        self._pull_all(sends)
        self._bytes += ps_shards.bytes_per_step(self.shards)

    def _pull_all(self, pending: list[dist.Work]) -> None:
        receives = [
            _irecv(buffer, src=self._server_rank(shard.server))
            for shard, buffer in zip(self.shards, self._pull, strict=True)
        ]
        _wait_all([*pending, *receives])
        with torch.no_grad():
            for shard, buffer in zip(self.shards, self._pull, strict=True):
                for index, offset, numel in zip(
                    shard.params, shard.offsets, shard.numels, strict=True
                ):
                    param = self.params[index]
                    param.copy_(buffer[offset : offset + numel].view_as(param))
                self.versions[shard.server] = int(buffer[-1])

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any] | None:
        return self._no_communication()

    @contextlib.contextmanager
    def _no_communication(self) -> Iterator[None]:
        """Compute only: no push, no pull, no update (measures exposed communication)."""
        self._skip = True
        try:
            yield
        finally:
            self._skip = False

    def take_bytes_sent(self) -> int | None:
        """Bytes moved by this worker since the last call: pushes plus pulls."""
        moved, self._bytes = self._bytes, 0
        return moved

    def describe(self, ctx: WorkerContext, model: Any = None) -> dict[str, Any]:
        options = ctx.config.typed(PSOptions)
        facts = {
            "bytes_sent_per_step_model": ps_shards.bytes_per_step(self.shards),
            "algorithm": "parameter server: push gradient + pull parameters of every shard",
            "servers": len(self.shards),
            "mode": options.ps_mode,
            PATTERN_FACT: f"ps-{options.ps_mode}",
            "shard_bytes": [shard.nbytes for shard in self.shards],
        }
        if options.ps_mode == "async":
            facts["async_update"] = options.async_update
        return facts

    def settle(self) -> None:
        """async: tell every server this worker has trained and wait for its reply, which
        comes once every worker has: so each worker then holds the final trained parameters
        (its last pull may miss the others' last updates). sync: nothing (every worker holds
        them after the last round)."""
        assert self.cfg is not None
        if self.cfg.typed(PSOptions).ps_mode != "async":
            return
        for buffer in self._push:
            buffer[-1] = TRAINED
        self._pull_all(
            [
                _isend(buffer, dst=self._server_rank(shard.server))
                for shard, buffer in zip(self.shards, self._push, strict=True)
            ]
        )

    def finish(self) -> None:
        """Tell every server this worker is done, then wait until every rank is."""
        for buffer in self._push:
            buffer[-1] = DONE
        sends = [
            _isend(buffer, dst=self._server_rank(shard.server))
            for shard, buffer in zip(self.shards, self._push, strict=True)
        ]
        _wait_all(sends)
        dist.barrier()  # no rank closes its connections while a peer still reads from them

    def teardown(self, completed: bool = True) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    # -- server ---------------------------------------------------------------------------

    def serve(self, ctx: WorkerContext, device: torch.device) -> None:
        """A server's loop: initial parameters out, then updates until every worker is done."""
        cfg = ctx.config
        options = cfg.typed(PSOptions)
        index = ctx.process.index
        params = trainable(build_model(cfg).to(run_dtype(cfg)))
        shard = plan(cfg, [p.numel() for p in params], options.num_servers)[index]
        server = ShardServer(shard, [params[i] for i in shard.params], cfg)
        started = time.perf_counter()
        if options.ps_mode == "sync":
            server.run_sync()
        else:
            server.run_async()
        ctx.events.write(
            Staleness(
                server=index,
                histogram={str(k): v for k, v in sorted(server.staleness.items())},
            )
        )
        ctx.events.write(
            Server(
                server=index,
                counters={
                    "mode": options.ps_mode,
                    "params": len(shard.params),
                    "shard_bytes": shard.nbytes,
                    "updates": server.version,
                    "gradients": sum(server.staleness.values()),
                    "bytes_sent": server.bytes_sent,
                    "bytes_received": server.bytes_received,
                    "update_s": server.update_s,
                    "elapsed_s": time.perf_counter() - started,
                },
            )
        )
        dist.barrier()


class ShardServer:
    """One server's shard: parameters in a flat buffer (+ version), its SGD, its counters."""

    def __init__(self, shard: Shard, params: Sequence[torch.Tensor], cfg: RunConfig) -> None:
        self.shard, self.workers = shard, cfg.workers
        self.async_scale = async_gradient_scale(cfg.typed(PSOptions).async_update, cfg.workers)
        numel, self.dtype = shard.numel, run_dtype(cfg)
        self.flat = torch.zeros(numel + FRAME, dtype=self.dtype)  # parameters, then the version
        self.grad = torch.zeros(numel, dtype=self.dtype)
        self.tensors: list[torch.Tensor] = []
        for param, offset, size in zip(params, shard.offsets, shard.numels, strict=True):
            view = self.flat[offset : offset + size].view(param.shape)
            view.copy_(param.detach())
            view.grad = self.grad[offset : offset + size].view(param.shape)
            self.tensors.append(view)
        # torch.optim refuses an empty parameter list: a server may hold no parameters.
        self.optimizer = sgd(self.tensors, cfg) if self.tensors else None
        self.version = 0
        self.staleness: Counter[int] = Counter()
        self.bytes_sent = self.bytes_received = 0
        self.update_s = 0.0

    @property
    def message_bytes(self) -> int:
        return self.shard.message_bytes

    def _step(self) -> None:
        """Apply ``self.grad`` with the shard's SGD and advance the version."""
        started = time.perf_counter()
        if self.optimizer is not None:
            self.optimizer.step()
        self.version += 1
        if self.version >= MAX_VERSION:
            raise RuntimeError(f"torch-ps: more than {MAX_VERSION} updates overflow the version")
        self.flat[-1] = self.version
        self.update_s += time.perf_counter() - started

    def _send(self, worker: int) -> dist.Work:
        self.bytes_sent += self.message_bytes
        return _isend(self.flat, dst=worker)

    def _send_all(self) -> None:
        _wait_all([self._send(w) for w in range(self.workers)])

    def run_sync(self) -> None:
        """dist_sync: one update per round, from the mean of all N workers' gradients."""
        numel = self.shard.numel
        buffers = [torch.zeros(numel + FRAME, dtype=self.dtype) for _ in range(self.workers)]
        self._send_all()  # initial parameters, version 0
        while True:
            _wait_all([_irecv(b, src=w) for w, b in enumerate(buffers)])
            self.bytes_received += self.workers * self.message_bytes
            versions = [int(b[-1]) for b in buffers]
            done = [v == DONE for v in versions]
            if all(done):
                return
            if any(done):
                raise RuntimeError(
                    f"torch-ps sync: worker(s) {[w for w, d in enumerate(done) if d]} finished "
                    f"while others still pushed gradients (round {self.version})"
                )
            for version in versions:
                self.staleness[self.version - version] += 1
            self.grad.copy_(buffers[0][:numel])
            for buffer in buffers[1:]:
                self.grad.add_(buffer[:numel])
            self.grad.div_(self.workers)
            self._step()
            self._send_all()

    def run_async(self) -> None:
        """dist_async: apply each gradient as it arrives (scaled by the run's
        ``async_update``); reply to its sender. A worker that has trained waits for its reply
        until every worker has: then all of them get the final trained parameters."""
        numel = self.shard.numel
        buffer = torch.zeros(numel + FRAME, dtype=self.dtype)
        self._send_all()
        done: set[int] = set()
        trained: list[int] = []
        while len(done) < self.workers:
            worker = dist.recv(buffer)  # from any worker; returns the sender's rank
            self.bytes_received += self.message_bytes
            version = int(buffer[-1])
            if version == DONE:
                done.add(worker)
                continue
            if version == TRAINED:
                trained.append(worker)
                if len(trained) == self.workers:
                    _wait_all([self._send(w) for w in trained])
                continue
            self.staleness[self.version - version] += 1
            torch.mul(buffer[:numel], self.async_scale, out=self.grad)
            self._step()
            self._send(worker).wait()


def run(ctx: WorkerContext) -> None:
    run_training(ctx, PSStrategy())
