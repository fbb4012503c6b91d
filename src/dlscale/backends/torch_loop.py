"""The measured PyTorch training loop, shared by every torch.* backend.

A backend supplies a :class:`TorchStrategy` (how the model is wrapped and gradients are
synchronized); this module owns the timing, so every strategy is measured the same way:

* warm-up steps are run first and never timed;
* the device is synchronized before every clock read (a no-op on CPU, where ops are eager);
* each step's time covers fetching the batch (input time) and forward, backward and the
  optimizer update; per-step times and per-window wall times go to this rank's events;
* the parent takes the maximum over ranks (see dlscale.metrics.aggregate).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.nn.functional as F

from dlscale.config.run_config import RunConfig
from dlscale.datasets import DATASETS
from dlscale.datasets.base import Batch, TorchDataset
from dlscale.models import MODELS
from dlscale.runtime.context import WorkerContext
from dlscale.runtime.torch_env import torch_environment


class TorchStrategy:
    """How gradients are synchronized. The default is a plain model with a local optimizer and no
    synchronization (torch-single); distributed strategies override what differs."""

    def setup(self, ctx: WorkerContext, device: torch.device) -> None:
        """Join the process group, if the strategy has one."""

    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        return model

    def make_optimizer(
        self, model: torch.nn.Module, cfg: RunConfig
    ) -> torch.optim.Optimizer | None:
        """The worker's optimizer; ``None`` when another rank applies updates (servers)."""
        return sgd(model.parameters(), cfg)

    def update(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
        """After backward: synchronize gradients (if needed) and update the parameters."""
        assert optimizer is not None
        optimizer.step()

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any] | None:
        """A context in which a step skips gradient synchronization; None if not measurable."""
        return None

    def take_bytes_sent(self) -> int | None:
        """Bytes this rank sent for gradient synchronization since the last call, if counted."""
        return None

    def describe(self, model: torch.nn.Module, cfg: RunConfig) -> dict[str, Any]:
        """Facts for the run's ``strategy`` event, e.g. ``bytes_sent_per_step_model``."""
        return {}

    def serve(self, ctx: WorkerContext, device: torch.device) -> None:
        """The loop of a non-worker rank (a parameter server); only strategies with such ranks."""
        raise NotImplementedError(f"{type(self).__name__} has no non-worker ranks")

    def finish(self) -> None:
        """After the worker's last step (e.g. tell the servers it is done)."""

    def teardown(self) -> None:
        """Leave the process group."""


def sgd(params: Any, cfg: RunConfig) -> torch.optim.Optimizer:
    """The optimizer of every backend: SGD with momentum and weight decay, one definition."""
    return torch.optim.SGD(
        params, lr=cfg.effective_lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
    )


def init_process_group(ctx: WorkerContext, device: torch.device) -> None:
    """gloo on CPU, NCCL on CUDA: how every torch.* strategy joins its process group."""
    import torch.distributed as dist

    backend = "nccl" if device.type == "cuda" else "gloo"
    # A peer that died makes collectives fail rather than wait forever; the launcher's run
    # timeout is the outer bound.
    timeout = timedelta(seconds=max(60.0, min(ctx.config.timeout_s, 1800.0)))
    dist.init_process_group(
        backend,
        rank=ctx.rank,
        world_size=ctx.world_size,
        timeout=timeout,
        device_id=device if device.type == "cuda" else None,
    )


def build_model(cfg: RunConfig) -> torch.nn.Module:
    """The model every rank of every backend builds: same seed, so identical initial weights;
    the data set's classes (the model's default for synthetic data)."""
    spec = MODELS.get(cfg.model)
    torch.manual_seed(cfg.seed)
    model: torch.nn.Module = spec.build(
        DATASETS.get(cfg.dataset).num_classes or spec.default_classes
    )
    return model


def gradient_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def run_training(ctx: WorkerContext, strategy: TorchStrategy) -> None:
    cfg = ctx.config
    torch.set_num_threads(ctx.threads)
    device = _device(cfg.device, ctx.local_rank)
    strategy.setup(ctx, device)
    try:
        if ctx.rank >= cfg.workers:
            strategy.serve(ctx, device)
        else:
            _train(ctx, strategy, device)
    finally:
        strategy.teardown()


def _device(name: str, local_rank: int) -> torch.device:
    if name == "cuda":
        from dlscale.errors import UserError

        if not torch.cuda.is_available():
            raise UserError("device cuda requested but torch sees no CUDA GPU; use --device cpu")
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _train(ctx: WorkerContext, strategy: TorchStrategy, device: torch.device) -> None:
    cfg = ctx.config
    events = ctx.events
    if ctx.rank == 0:
        events.write("environment", **torch_environment(device))
    model_spec = MODELS.get(cfg.model)
    input_size = cfg.image_size or model_spec.input_size
    data: TorchDataset = DATASETS.get(cfg.dataset).load(
        cfg,
        device=device,
        rank=ctx.rank,
        world=cfg.workers,  # servers hold no data
        input_size=input_size,
        num_classes=model_spec.default_classes,
    )
    model = build_model(cfg).to(device)
    memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
    # Module.to accepts memory_format at run time; its type stubs do not list it.
    model = model.to(memory_format=memory_format)  # type: ignore[call-overload]
    model = strategy.wrap(model, device)
    optimizer = strategy.make_optimizer(model, cfg)
    if ctx.rank == 0 and (facts := strategy.describe(model, cfg)):
        events.write("strategy", gradient_bytes=gradient_bytes(model), **facts)
    forward = torch.compile(model) if cfg.compile else model
    autocast = (
        torch.autocast(device.type, dtype=torch.bfloat16)
        if cfg.amp == "bf16"
        else contextlib.nullcontext()
    )
    sync = torch.cuda.synchronize if device.type == "cuda" else _no_op

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        with autocast:
            loss = F.cross_entropy(forward(x.to(memory_format=memory_format)), y)
        loss.backward()
        strategy.update(model, optimizer)
        return loss.detach()

    timer = _WindowTimer(ctx, step, sync, cfg.batch_per_worker, strategy)
    has_eval = DATASETS.get(cfg.dataset).has_eval
    started = time.perf_counter()
    if cfg.epochs is None:
        batches = _cycle(data)
        timer.untimed(batches, cfg.warmup_steps)
        for window in range(cfg.repeats):
            timer.window(batches, cfg.steps, kind="measure", index=window)
        if has_eval:
            _evaluate(ctx, model, data, epoch=0, started=started, sync=sync, autocast=autocast)
    else:
        for epoch in range(cfg.epochs):
            batches = data.train_batches(epoch)
            steps = data.steps_per_epoch
            if epoch == 0:
                warm = min(cfg.warmup_steps, steps - 1)
                timer.untimed(batches, warm)
                steps -= warm
            timer.window(batches, steps, kind="measure", index=epoch, epoch=epoch)
            if has_eval:
                _evaluate(
                    ctx, model, data, epoch=epoch + 1, started=started, sync=sync, autocast=autocast
                )
    if cfg.save_params and ctx.rank == 0:
        unwrapped = getattr(model, "module", model)
        state = {name: p.detach().cpu() for name, p in unwrapped.named_parameters()}
        torch.save(state, ctx.run_dir / "final_params.pt")
    no_sync = strategy.no_sync(model)
    if no_sync is not None and cfg.comm_probe_steps > 0:
        # Same work without gradient synchronization, after every measured step (the replicas
        # may drift apart here, which no longer matters). Its first step is a warm-up.
        batches = _cycle(data)
        with no_sync:
            timer.untimed(batches, 1)
            timer.window(batches, cfg.comm_probe_steps, kind="nosync", index=0)
    strategy.finish()


class _WindowTimer:
    def __init__(
        self,
        ctx: WorkerContext,
        step: Callable[..., torch.Tensor],
        sync: Callable[[], None],
        batch: int,
        strategy: TorchStrategy,
    ) -> None:
        self.ctx, self.step, self.sync, self.batch = ctx, step, sync, batch
        self.strategy = strategy

    def untimed(self, batches: Iterator[Batch], steps: int) -> None:
        for x, y in itertools.islice(batches, steps):
            self.step(x, y)
        self.sync()

    def window(self, batches: Iterator[Batch], steps: int, **fields: Any) -> None:
        step_ms: list[float] = []
        data_ms: list[float] = []
        losses: list[torch.Tensor] = []
        clock = time.perf_counter
        self.sync()
        self.strategy.take_bytes_sent()  # reset: count only this window's traffic
        window_start = clock()
        for _ in range(steps):
            t0 = clock()
            x, y = next(batches)
            self.sync()
            t1 = clock()
            loss = self.step(x, y)
            self.sync()
            t2 = clock()
            data_ms.append((t1 - t0) * 1e3)
            step_ms.append((t2 - t0) * 1e3)
            losses.append(loss)
        duration = clock() - window_start
        loss_sum: float | None = float(torch.stack(losses).double().sum()) if losses else 0.0
        finite = loss_sum is not None and math.isfinite(loss_sum)
        if not finite:
            loss_sum = None  # training diverged; JSON has no NaN, and the timing still holds
        self.ctx.events.write(
            "window",
            steps=steps,
            samples=steps * self.batch,
            duration_s=duration,
            step_ms=step_ms,
            data_ms=data_ms,
            loss_sum=loss_sum,
            loss_count=steps,
            bytes_sent=self.strategy.take_bytes_sent(),
            loss_nonfinite=not finite,
            **fields,
        )


def _cycle(data: TorchDataset) -> Iterator[Batch]:
    for epoch in itertools.count():
        yield from data.train_batches(epoch)


@torch.no_grad()
def _evaluate(
    ctx: WorkerContext,
    model: torch.nn.Module,
    data: TorchDataset,
    *,
    epoch: int,
    started: float,
    sync: Callable[[], None],
    autocast: Any,
) -> None:
    model.eval()
    correct = total = 0
    loss_sum = 0.0
    for x, y in data.eval_batches():
        with autocast:
            logits = model(x)
        loss_sum += float(F.cross_entropy(logits.float(), y, reduction="sum"))
        correct += int((logits.argmax(1) == y).sum())
        total += int(y.numel())
    sync()
    model.train()
    ctx.events.write(
        "eval",
        epoch=epoch,
        correct=correct,
        total=total,
        loss_sum=loss_sum,
        elapsed_s=time.perf_counter() - started,
    )


def _no_op() -> None:
    return None
