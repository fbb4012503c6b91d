"""The toy engine: numpy softmax regression, alone or with a parameter server over TCP.

Messages are a header ``(kind, payload bytes, version)`` and a float32 payload. A worker says
HELLO with its index, receives the initial parameters, then per step pushes GRAD (tagged with
the version it was computed on) and receives PARAMS; at the end it sends DONE. The server
averages the N gradients of a round (sync) or applies each on arrival, scaled by 1/N (async),
with SGD (momentum, weight decay) on the server, as torch-ps does.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import struct
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np

from dlscale.contract.datasets import DATASETS
from dlscale.contract.engine import Engine
from dlscale.contract.models import MODELS
from dlscale.contract.records import Server, Staleness, Strategy
from dlscale.runtime.context import WorkerContext
from dlscale.runtime.schedule import run_schedule
from dlscale_toy import ToyPsOptions

HEADER = struct.Struct("!BQq")
HELLO, PARAMS, GRAD, DONE = 1, 2, 3, 4
CONNECT_TIMEOUT_S = 60.0


class Softmax:
    """Weights ``(features, classes)`` and bias, flat in one float32 vector."""

    def __init__(self, num_classes: int) -> None:
        self.classes = num_classes
        self.features = 0
        self.params = np.zeros(0, dtype=np.float32)

    def init(self, features: int, seed: int) -> None:
        self.features = features
        rng = np.random.default_rng(seed)
        weights = rng.normal(0.0, 0.01, size=features * self.classes)
        self.params = np.concatenate([weights, np.zeros(self.classes)]).astype(np.float32)

    def _split(self) -> tuple[np.ndarray, np.ndarray]:
        cut = self.features * self.classes
        return self.params[:cut].reshape(self.features, self.classes), self.params[cut:]

    def logits(self, x: np.ndarray) -> np.ndarray:
        weights, bias = self._split()
        return x.reshape(len(x), -1) @ weights + bias

    def loss_and_grad(self, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        flat = x.reshape(len(x), -1)
        probs = _softmax(self.logits(x))
        loss = float(-np.log(probs[np.arange(len(y)), y] + 1e-12).mean())
        probs[np.arange(len(y)), y] -= 1.0
        probs /= len(y)
        grad = np.concatenate([(flat.T @ probs).ravel(), probs.sum(axis=0)])
        return loss, grad.astype(np.float32)


def softmax(num_classes: int) -> Softmax:
    """The ``numpy`` builder of model ``softmax``."""
    return Softmax(num_classes)


ZOO = {"softmax": softmax}
"""Library ``toyzoo``'s models (``--model toyzoo:softmax``): a model library is a plug-in too."""


def zoo_model(name: str, num_classes: int) -> Softmax:
    return ZOO[name](num_classes)


def zoo_unknown(model: str) -> str:
    """The library's probe, run under the workers' interpreter before launch."""
    name = model.partition(":")[2]
    return "" if name in ZOO else f"toyzoo has no model {name!r}; it has: {', '.join(ZOO)}"


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


class Sgd:
    """SGD with momentum and weight decay, as torch.optim.SGD applies them."""

    def __init__(self, cfg: Any, size: int) -> None:
        self.lr, self.momentum, self.decay = cfg.effective_lr, cfg.momentum, cfg.weight_decay
        self.velocity = np.zeros(size, dtype=np.float32)
        self.started = False

    def step(self, params: np.ndarray, grad: np.ndarray) -> None:
        grad = grad + self.decay * params
        self.velocity = self.momentum * self.velocity + grad if self.started else grad
        self.started = True
        params -= self.lr * self.velocity


def build(ctx: WorkerContext) -> Softmax:
    cfg = ctx.config
    model: Softmax = MODELS.get(cfg.model).build(10, "numpy")
    model.init(3 * 8 * 8, cfg.seed)
    return model


def _send(sock: socket.socket, kind: int, version: int, payload: np.ndarray | None = None) -> int:
    data = b"" if payload is None else payload.astype(np.float32).tobytes()
    sock.sendall(HEADER.pack(kind, len(data), version) + data)
    return HEADER.size + len(data)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("peer closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _recv(sock: socket.socket) -> tuple[int, int, np.ndarray]:
    kind, size, version = HEADER.unpack(_recv_exact(sock, HEADER.size))
    payload = np.frombuffer(_recv_exact(sock, size), dtype=np.float32).copy()
    return kind, version, payload


class ToyEngine(Engine):
    """A worker (or the single process) of the toy backends."""

    def __init__(self, ctx: WorkerContext, *, server: bool) -> None:
        cfg = ctx.config
        self.ctx = ctx
        data = DATASETS.get(cfg.dataset).load(
            cfg,
            shard=ctx.layout.first_replica(ctx.rank),
            shards=cfg.workers,
            replicas=ctx.process.replicas,
            input_size=8,
            num_classes=10,
        )
        self.data = data
        self.steps_per_epoch = data.steps_per_epoch
        self.has_eval = DATASETS.get(cfg.dataset).has_eval
        self.model = build(ctx)
        self.times_steps = cfg.backend != "toy-ps" or cfg.typed(ToyPsOptions).toy_timing == "step"
        self.sock: socket.socket | None = None
        self.optimizer: Sgd | None = None
        self.version = 0
        self.syncing = True
        self.sent = 0
        self.synchronizes = server  # toy-single synchronizes nothing
        if server:
            self.sock = _connect(os.environ["TOY_SERVER"])
            _send(self.sock, HELLO, ctx.process.index)
            kind, self.version, self.model.params = _recv(self.sock)
            assert kind == PARAMS
        else:
            self.optimizer = Sgd(cfg, self.model.params.size)
        if ctx.rank == ctx.layout.training_ranks[0]:
            size = self.model.params.nbytes + HEADER.size
            ctx.events.write(
                Strategy(
                    gradient_bytes=self.model.params.nbytes,
                    bytes_sent_per_step_model=2 * size if server else None,
                    facts={"algorithm": "push gradient, pull parameters over TCP"},
                )
            )

    def batches(self, epoch: int) -> Iterator[Any]:
        return iter(self.data.train_batches(epoch))

    def step(self, batch: Any) -> float:
        x, y = batch
        loss, grad = self.model.loss_and_grad(x, y)
        if self.optimizer is not None:
            self.optimizer.step(self.model.params, grad)
        elif self.syncing:
            assert self.sock is not None
            self.sent += _send(self.sock, GRAD, self.version, grad)
            kind, self.version, params = _recv(self.sock)
            assert kind == PARAMS
            self.sent += HEADER.size + params.nbytes  # pulled: counted as moved, like torch-ps
            self.model.params = params
        return loss

    def evaluate(self) -> tuple[int, int, float]:
        correct = total = 0
        loss_sum = 0.0
        for x, y in self.data.eval_batches():
            probs = _softmax(self.model.logits(x))
            correct += int((probs.argmax(axis=1) == y).sum())
            total += len(y)
            loss_sum += float(-np.log(probs[np.arange(len(y)), y] + 1e-12).sum())
        return correct, total, loss_sum

    def no_sync(self) -> contextlib.AbstractContextManager[Any] | None:
        return self._local_only() if self.sock is not None else None

    @contextlib.contextmanager
    def _local_only(self) -> Iterator[None]:
        self.syncing = False
        try:
            yield
        finally:
            self.syncing = True

    def take_bytes_sent(self) -> float | None:
        if self.sock is None:
            return None
        sent, self.sent = self.sent, 0
        return float(sent)

    def save_params(self) -> None:
        np.save(self.ctx.run_dir / "final_params.npy", self.model.params)

    def finish(self) -> None:
        if self.sock is not None:
            _send(self.sock, DONE, self.version)
            self.sock.close()

    def framework_facts(self) -> dict[str, Any]:
        return {"numpy_version": np.__version__, "numpy_file": np.__file__}


def _connect(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        try:
            return socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def run_single(ctx: WorkerContext) -> None:
    run_schedule(ctx, ToyEngine(ctx, server=False))


def run_ps(ctx: WorkerContext) -> None:
    if ctx.process.trains:
        run_schedule(ctx, ToyEngine(ctx, server=True))
    else:
        serve(ctx)


def serve(ctx: WorkerContext) -> None:
    """The server: one shard of everything; then, like a TF ps task, it never exits."""
    cfg = ctx.config
    workers = cfg.workers
    model = build(ctx)
    optimizer = Sgd(cfg, model.params.size)
    host, _, port = os.environ["TOY_SERVER"].rpartition(":")
    listener = socket.create_server((host, int(port)), backlog=workers)
    conns: dict[int, socket.socket] = {}
    while len(conns) < workers:
        sock, _ = listener.accept()
        kind, index, _ = _recv(sock)
        assert kind == HELLO
        conns[index] = sock
    version = 0
    for sock in conns.values():
        _send(sock, PARAMS, version, model.params)
    staleness: Counter[int] = Counter()
    if cfg.typed(ToyPsOptions).toy_mode == "sync":
        live = set(conns)
        while live:
            grads = []
            for index in sorted(live):
                kind, grad_version, grad = _recv(conns[index])
                if kind == DONE:
                    live.discard(index)
                    continue
                staleness[version - grad_version] += 1
                grads.append(grad)
            if grads:
                optimizer.step(model.params, np.mean(grads, axis=0))
                version += 1
                for index in sorted(live):
                    _send(conns[index], PARAMS, version, model.params)
    else:
        selector = selectors.DefaultSelector()
        for index, sock in conns.items():
            selector.register(sock, selectors.EVENT_READ, index)
        live = set(conns)
        while live:
            for key, _ in selector.select():
                index = key.data
                kind, grad_version, grad = _recv(conns[index])
                if kind == DONE:
                    live.discard(index)
                    selector.unregister(conns[index])
                    continue
                staleness[version - grad_version] += 1
                optimizer.step(model.params, grad / workers)
                version += 1
                _send(conns[index], PARAMS, version, model.params)
    ctx.events.write(Staleness(server=0, histogram={str(k): v for k, v in staleness.items()}))
    ctx.events.write(Server(server=0, counters={"updates": version}))
    while True:  # a ps task waits to be stopped (the role declares exits=False)
        time.sleep(1.0)
