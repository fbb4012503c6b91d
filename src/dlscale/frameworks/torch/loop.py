"""The PyTorch engine of the measurement kernel, shared by every torch.* backend.

A backend supplies a :class:`TorchStrategy` (how the model is wrapped and gradients are
synchronized); :class:`TorchEngine` turns it into the kernel's :class:`~dlscale.contract.
engine.Engine` (one training step, evaluation, the no-sync context), and the kernel
(:mod:`dlscale.runtime.schedule`) owns the timing, so every engine of every framework is
measured the same way. Data comes from the neutral data sets through the torch adapter.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import torch

from dlscale.contract.datasets import DATASETS
from dlscale.contract.engine import Engine, SyncStrategy
from dlscale.contract.errors import UserError
from dlscale.contract.models import MODELS
from dlscale.contract.optimizers import ADAMW_BETAS, ADAMW_EPS, lr_factor, training_steps
from dlscale.contract.records import Strategy
from dlscale.contract.run_config import RunConfig
from dlscale.contract.user_models import classes_from_output, refused_input
from dlscale.frameworks.torch.data import TorchDataset, loader_death_pending, loader_died, to_torch
from dlscale.frameworks.torch.env import torch_environment
from dlscale.frameworks.torch.measures import TorchMeasures, compute_dtype
from dlscale.frameworks.torch.options import TorchLoopOptions
from dlscale.frameworks.torch.tasks import task_of
from dlscale.runtime.context import WorkerContext
from dlscale.runtime.samples import load_samples, model_outputs
from dlscale.runtime.schedule import run_schedule

LossOf = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""The training loss of a batch (inputs, labels), with the engine's precision and layout."""


class TorchStrategy(SyncStrategy):
    """How gradients are synchronized in the torch loop (:class:`SyncStrategy`'s words, and the
    hooks below). The default is a plain model with a local optimizer and no synchronization
    (torch-single); distributed strategies override what differs."""

    synchronizes = True

    def setup(self, ctx: WorkerContext, device: torch.device) -> None:
        """Join the process group, if the strategy has one."""

    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        return model

    def make_optimizer(
        self, model: torch.nn.Module, cfg: RunConfig
    ) -> torch.optim.Optimizer | None:
        """The worker's optimizer; ``None`` when another rank applies updates (servers)."""
        return sgd(model.parameters(), cfg)

    def backward(self, loss_of: LossOf, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Forward and backward of one step's batch; the loss, detached. Horovod's
        ``backward_passes_per_step`` runs it as several micro-batches."""
        loss = loss_of(x, y)
        loss.backward()
        return loss.detach()

    def update(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
        """After backward: synchronize gradients (if needed) and update the parameters."""
        assert optimizer is not None
        optimizer.step()

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any] | None:
        """A context in which a step skips gradient synchronization; None if not measurable."""
        return None

    def eval_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model an evaluation runs, on every training rank (a sharded one: gathered)."""
        return model

    def saved_parameters(self, model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
        """The trained parameters ``save_params`` writes (on the first training rank only);
        ``None``: the strategy writes them itself, at :meth:`finish` (every rank is needed)."""
        unwrapped = getattr(model, "module", model)
        return {name: p.detach().cpu() for name, p in unwrapped.named_parameters()}

    def serve(self, ctx: WorkerContext, device: torch.device) -> None:
        """The loop of a non-worker rank (a parameter server); only strategies with such ranks."""
        raise NotImplementedError(f"{type(self).__name__} has no non-worker ranks")

    def settle(self) -> None:
        """:meth:`Engine.settle <dlscale.contract.engine.Engine.settle>`: by default nothing."""

    def finish(self) -> None:
        """After the worker's last step (e.g. tell the servers it is done)."""


def run_dtype(cfg: RunConfig) -> torch.dtype:
    """The run's ``precision`` as torch's dtype: the model's, its inputs', gradients' and
    messages' (float32 unless float64 is asked)."""
    return torch.float64 if cfg.precision == "float64" else torch.float32


def sgd(params: Any, cfg: RunConfig) -> torch.optim.Optimizer:
    """The optimizer of every backend, one definition: the run's ``optimizer``, SGD with
    momentum and weight decay or AdamW (:mod:`dlscale.contract.optimizers`)."""
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(
            params,
            lr=cfg.effective_lr,
            betas=ADAMW_BETAS,
            eps=ADAMW_EPS,
            weight_decay=cfg.weight_decay,
        )
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
        world_size=ctx.processes,
        timeout=timeout,
        device_id=device if device.type == "cuda" else None,
        store=_attempt_store(ctx, timeout),
    )


def _attempt_store(ctx: WorkerContext, timeout: timedelta) -> Any:
    """Under torchrun's agent store: that store with a prefix of its own for each restart,
    else ``None`` (``env://``). One agent keeps one store across restarts (torch 2.13), so a
    restarted rank could read a peer's address from the failed attempt and fail to connect
    ("Connection refused" from a dead port): seen once in a loaded test run. Several agents
    count their restarts each on its own, so there the launcher asks torchrun for a new store
    every round instead (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE``) and this returns ``None``."""
    import torch.distributed as dist

    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if (
        attempt is None
        or "MASTER_ADDR" not in os.environ
        or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
    ):
        return None
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        ctx.processes,
        is_master=False,
        timeout=timeout,
    )
    return dist.PrefixStore(f"dlscale/attempt{attempt}", store)


def build_model(cfg: RunConfig) -> torch.nn.Module:
    """The model every rank of every backend builds: same seed, so identical initial weights;
    the data set's classes (the model's default for synthetic data)."""
    spec = MODELS.get(cfg.model)
    torch.manual_seed(cfg.seed)
    model = spec.build(model_outputs(cfg), "torch", cfg.dropout, cfg.options)
    if not isinstance(model, torch.nn.Module):
        raise UserError(f"model {cfg.model} returned {type(model).__name__}, not a torch.nn.Module")
    return model


def output_classes(cfg: RunConfig, model: torch.nn.Module) -> int:
    """The classes a user's model predicts: the width of its output for one image of the
    run's size (eval mode, no gradient); the data set's classes must be as many."""
    size = cfg.image_size or MODELS.get(cfg.model).input_size
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(torch.zeros(2, 3, size, size))
    except Exception as error:
        raise refused_input(cfg.model, size, error) from None
    finally:
        model.train(was_training)
    shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
    return classes_from_output(cfg.model, shape, cfg.dataset, DATASETS.get(cfg.dataset).num_classes)


def gradient_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def run_training(ctx: WorkerContext, strategy: TorchStrategy) -> None:
    """A torch process: training roles run the kernel; other roles serve (e.g. servers).

    A ``DataLoader`` process that died is said in one line however its death arrives: torch's
    SIGCHLD handler raises wherever this process is (in a step, in the teardown, in the
    handling of a broken pipe), so the whole of it is under the one ``except``."""
    torch.set_num_threads(ctx.threads)
    device = _device(ctx.config.device, ctx.local_rank)
    try:
        _setup_run_teardown(ctx, strategy, device)
    except RuntimeError as error:
        fault = loader_died(error)
        if fault is None:
            raise
        raise fault from None


def _setup_run_teardown(ctx: WorkerContext, strategy: TorchStrategy, device: torch.device) -> None:
    strategy.setup(ctx, device)
    completed = False
    try:
        if ctx.process.trains:
            try:
                run_schedule(ctx, TorchEngine(ctx, strategy, device))
            except (ConnectionError, EOFError) as error:  # a loader's pipe, if one died
                fault = loader_death_pending()
                if fault is None:
                    raise
                raise fault from error
        else:
            strategy.serve(ctx, device)
        completed = True
    finally:
        strategy.teardown(completed)


def _device(name: str, local_rank: int) -> torch.device:
    if name == "cuda":
        if not torch.cuda.is_available():
            raise UserError("device cuda requested but torch sees no CUDA GPU; use --device cpu")
        from dlscale.runtime.gpus import gpu_index

        torch.cuda.set_device(gpu_index(local_rank, torch.cuda.device_count()))
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class TorchEngine(TorchMeasures, Engine):
    """One torch training process: model, optimizer and data on the device."""

    times_forward = True

    def __init__(self, ctx: WorkerContext, strategy: TorchStrategy, device: torch.device):
        cfg = ctx.config
        self.ctx, self.strategy, self.device = ctx, strategy, device
        self.synchronizes = strategy.synchronizes
        self.resumable = strategy.resumable
        model_spec = MODELS.get(cfg.model)
        dataset = DATASETS.get(cfg.dataset)
        built = None if model_spec.builtin else build_model(cfg)  # the user's: its classes
        classes = None if built is None else output_classes(cfg, built)
        loaded = load_samples(ctx, num_classes=classes)
        self.task = task_of(cfg)
        self.data_facts = dict(getattr(loaded, "facts", {}))
        self.dtype = run_dtype(cfg)
        self.data: TorchDataset = to_torch(loaded, device, self.dtype)
        self.steps_per_epoch = self.data.steps_per_epoch
        self.has_eval = dataset.has_eval and loaded.has_eval  # e.g. a folder without val/
        options = cfg.typed(TorchLoopOptions)
        self.memory_format = (
            torch.channels_last if options.channels_last else torch.contiguous_format
        )
        # precision = float64: the same initial weights (built in float32 from the seed), then
        # the model, each batch's images, and so its gradients and collectives in float64 (amp
        # beside it is refused where settings are checked: options.check_torch_loop)
        model = (built if built is not None else build_model(cfg)).to(device, self.dtype)
        # Module.to accepts memory_format at run time; its type stubs do not list it.
        model = model.to(memory_format=self.memory_format)  # type: ignore[call-overload]
        whole = gradient_bytes(model)  # before a wrap that shards (ZeRO-3 leaves 0 in place)
        self.model = strategy.wrap(model, device)
        self.optimizer = strategy.make_optimizer(self.model, cfg)
        self.schedule = (
            None
            if self.optimizer is None or cfg.lr_schedule == "constant"
            else torch.optim.lr_scheduler.LambdaLR(
                self.optimizer,
                partial(lr_factor, cfg, total=training_steps(cfg, self.steps_per_epoch)),
            )
        )
        # Listed once: Module.zero_grad walks every module at every step (ResNet-44: 134
        # modules, about 200 us a step more than clearing this list; docs/benchmarks.md).
        self.params = list(self.model.parameters())
        first = ctx.rank == ctx.layout.training_ranks[0]  # what aggregate reads the facts from
        if first and (facts := strategy.describe(ctx, self.model)):
            ctx.events.write(
                Strategy(
                    gradient_bytes=whole,
                    bytes_sent_per_step_model=facts.pop("bytes_sent_per_step_model", None),
                    traces=facts.pop("traces", []),
                    facts=facts,
                )
            )
        self.forward = torch.compile(self.model) if options.compile else self.model
        self.compute_dtype = compute_dtype(device, self.dtype, options.amp)  # MFU's peak
        self.autocast: contextlib.AbstractContextManager[Any] = (
            torch.autocast(device.type, dtype=torch.bfloat16)
            if options.amp == "bf16"
            else contextlib.nullcontext()
        )

    def batches(self, epoch: int) -> Iterator[Any]:
        return self.data.train_batches(epoch)

    def step(self, batch: Any) -> torch.Tensor:
        x, y = batch
        x = self.task.inputs(x, self.dtype, self.memory_format)  # as is when it fits already
        for param in self.params:
            param.grad = None
        loss = self.strategy.backward(self._loss, x, y)
        self.strategy.update(self.model, self.optimizer)
        if self.schedule is not None:
            self.schedule.step()
        return loss

    def forward_only(self, batch: Any) -> None:
        """The forward of :meth:`step` (the schedule runs it in :meth:`no_sync`, so DDP
        prepares no reduction), its graph dropped."""
        x, y = batch
        self._loss(self.task.inputs(x, self.dtype, self.memory_format), y)

    def _loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with self.autocast:
            return self.task.loss(self.forward(x), y)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def loss_values(self, losses: list[Any]) -> list[float]:
        return [float(loss) for loss in torch.stack(losses).double().tolist()]

    @torch.no_grad()
    def evaluate(self) -> tuple[int, int, float]:
        model = self.strategy.eval_model(self.model)
        model.eval()
        correct = total = 0
        loss_sum = 0.0
        for x, y in self.data.eval_batches():
            with self.autocast:
                output = model(self.task.inputs(x, self.dtype, self.memory_format))
            right, count, summed = self.task.counts(output, y)
            correct, total, loss_sum = correct + right, total + count, loss_sum + summed
        model.train()
        return correct, total, loss_sum

    def no_sync(self) -> contextlib.AbstractContextManager[Any] | None:
        return self.strategy.no_sync(self.model)

    def take_bytes_sent(self) -> float | None:
        return self.strategy.take_bytes_sent()

    def save_params(self) -> None:
        state = self.strategy.saved_parameters(self.model)
        if state is not None:
            torch.save(state, self.ctx.run_dir / "final_params.pt")

    def checkpoint(self, path: Path) -> None:
        unwrapped = getattr(self.model, "module", self.model)
        optimizer = self.optimizer.state_dict() if self.optimizer is not None else None
        state = {"model": unwrapped.state_dict(), "optimizer": optimizer}
        if self.schedule is not None:
            state["schedule"] = self.schedule.state_dict()
        temporary = path.with_name(f".{path.name}.tmp")
        torch.save(state, temporary)
        os.replace(temporary, path)

    def restore(self, path: Path) -> None:
        state = torch.load(path, map_location=self.device, weights_only=True)
        getattr(self.model, "module", self.model).load_state_dict(state["model"])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        if self.schedule is not None:
            self.schedule.load_state_dict(state["schedule"])

    def barrier(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.barrier()

    def settle(self) -> None:
        self.strategy.settle()

    def finish(self) -> None:
        self.strategy.finish()

    def framework_facts(self) -> dict[str, Any]:
        return torch_environment(self.device)

    def sample_facts(self) -> dict[str, Any]:
        return self.data_facts
