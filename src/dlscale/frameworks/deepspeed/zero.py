"""deepspeed-zero1, -zero2, -zero3: DeepSpeed's ZeRO on dlscale's torch loop.

The torch loop builds the model from the seed and hands it here; ``deepspeed.initialize``
wraps it in DeepSpeed's engine with the run's own optimizer (:func:`~dlscale.frameworks.torch.
loop.sgd`: SGD with momentum, or torch's AdamW), so the weights, data per rank, update rule and
hyperparameters are torch-ddp's and only the synchronization differs (Rajbhandari et al., SC
2020): ZeRO-1 shards the optimizer state over the workers, ZeRO-2 the gradients too, ZeRO-3 the
parameters too, gathering each module's just before it runs. A step is DeepSpeed's
``engine.backward(loss)`` then ``engine.step()``; the learning-rate schedule sets the groups of
the optimizer ZeRO steps. dlscale's process group (gloo on CPU, NCCL on CUDA) is the one
DeepSpeed uses, so every launcher that runs torch-ddp runs these, without DeepSpeed's launcher.

Bytes: counted per collective from what DeepSpeed hands to torch.distributed (:mod:`.counting`)
and modelled from the parameter bytes (:func:`modelled_bytes`).

Not measured: exposed communication (each ZeRO step all-gathers the updated shards, which the
next forward needs, and DeepSpeed refuses ``no_sync`` for stages 2 and 3: no step without
collectives exists to time); checkpoints (DeepSpeed saves a state per rank, and dlscale's
restarts keep one state written by one rank)."""

from __future__ import annotations

import logging
import os
import warnings
from argparse import Namespace
from typing import Any

import torch
import torch.distributed as dist

from dlscale.contract.algorithms import PATTERN_FACT
from dlscale.contract.errors import UserError
from dlscale.contract.text import excerpt
from dlscale.frameworks.deepspeed.counting import CollectiveBytes
from dlscale.frameworks.deepspeed.options import Zero3Options, backend_name, deepspeed_config
from dlscale.frameworks.torch.gathered import plain_copy, save_gathered
from dlscale.frameworks.torch.loop import (
    LossOf,
    TorchStrategy,
    gradient_bytes,
    init_process_group,
    run_training,
    sgd,
)
from dlscale.runtime.context import WorkerContext


class ZeroStrategy(TorchStrategy):
    def __init__(self, stage: int) -> None:
        self.stage = stage
        self.world = 1
        self.ctx: WorkerContext | None = None
        self.device = torch.device("cpu")
        self.engine: Any = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.counted = CollectiveBytes(1)

    def setup(self, ctx: WorkerContext, device: torch.device) -> None:
        self.world, self.ctx, self.device = ctx.processes, ctx, device
        # DeepSpeed picks its accelerator when imported: the run's device, not the machine's
        os.environ["DS_ACCELERATOR"] = "cuda" if device.type == "cuda" else "cpu"
        init_process_group(ctx, device)
        # before DeepSpeed's communication layer starts: it keeps some collectives it finds
        self.counted = CollectiveBytes(self.world)
        self.counted.install()
        import deepspeed

        logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
        # ZeRO-3 calls torch's all_gather_into_tensor and reduce_scatter_tensor, which torch
        # 2.13 calls deprecated: one FutureWarning each per call, lines every step in stderr
        warnings.filterwarnings(
            "ignore", message=r"`torch\.distributed\.\w+` is deprecated", category=FutureWarning
        )
        # DeepSpeed's communication layer JIT-builds a shared-memory all-reduce on CPUs (27 s
        # with g++; without a compiler it fails the run), used only by inference_all_reduce,
        # which training never calls: marked unbuildable, as DeepSpeed's probe would mark it
        deepspeed.ops.__compatible_ops__[SHM_OP] = False
        # joins the process group above: torch.distributed is initialized already
        deepspeed.init_distributed(
            dist_backend=dist.get_backend(), auto_mpi_discovery=False, verbose=False
        )

    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        import deepspeed

        assert self.ctx is not None
        cfg = self.ctx.config
        if not any(p.requires_grad for p in model.parameters()):
            raise UserError(
                f"model {excerpt(cfg.model)} has no parameter that trains (requires_grad is "
                "false for all): ZeRO has nothing to shard; unfreeze some of its parameters"
            )
        self.optimizer = sgd(model.parameters(), cfg)
        self.full_bytes = gradient_bytes(model)
        self.sharded_bytes = _sharded_bytes(model, cfg, self.stage)
        # on CUDA the device the loop chose (DeepSpeed would take LOCAL_RANK, which is not the
        # device index where a launcher binds one GPU to each task)
        args = Namespace(device_rank=device.index) if device.type == "cuda" else None
        try:
            engine, _, _, _ = deepspeed.initialize(
                args=args,
                model=model,
                optimizer=self.optimizer,
                config=deepspeed_config(cfg, self.stage, self.world),
                dist_init_required=False,
            )
        except (AssertionError, ValueError, TypeError, IndexError, NotImplementedError) as error:
            said = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise UserError(
                f"{backend_name(self.stage)} cannot wrap model {excerpt(cfg.model)}: DeepSpeed "
                f"said {type(error).__name__}: {excerpt(said, 300)}; check the model and the "
                f"options (dlscale ls backends {backend_name(self.stage)}), or run it on "
                "torch-ddp or torch-fsdp"
            ) from None
        except RuntimeError as error:
            raise self._unallocated(error) from None
        self.engine = engine
        return engine

    def make_optimizer(self, model: torch.nn.Module, cfg: Any) -> torch.optim.Optimizer | None:
        """The torch optimizer ZeRO steps on its shards: the schedule sets its groups' lr."""
        return self.optimizer

    def backward(self, loss_of: LossOf, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = loss_of(x, y)
        try:
            self.engine.backward(loss)  # ZeRO-1 and -2 allocate their buckets in the first
        except RuntimeError as error:
            raise self._unallocated(error) from None
        return loss.detach()

    def _unallocated(self, error: RuntimeError) -> Exception:
        """A buffer DeepSpeed could not allocate as one line naming the options that size
        them; any other error as it was."""
        if "allocate" not in str(error):
            return error
        return UserError(
            f"{backend_name(self.stage)} could not allocate its buffers "
            f"({excerpt(str(error).splitlines()[0], 200)}): lower reduce_bucket_size or "
            "allgather_bucket_size (elements, 5e8 by default; dlscale ls backends "
            f"{backend_name(self.stage)})"
        )

    def update(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
        self.engine.step()

    def take_bytes_sent(self) -> int | None:
        return self.counted.take()

    def describe(self, ctx: WorkerContext, model: Any = None) -> dict[str, Any]:
        import deepspeed

        modelled = modelled_bytes(
            self.stage, self.world, self.full_bytes, self.sharded_bytes, ctx.config
        )
        return {
            "bytes_sent_per_step_model": modelled,
            "zero_stage": self.stage,
            "deepspeed_version": deepspeed.__version__,
            "deepspeed_config": deepspeed_config(ctx.config, self.stage, self.world),
            "sharded_parameter_bytes": self.sharded_bytes,
            "algorithm": ALGORITHMS[self.stage],
            PATTERN_FACT: pattern(self.stage, self.full_bytes, ctx.config),
        }

    def eval_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """A plain copy with every parameter gathered (ZeRO-3: one gather on every rank, so
        ranks with different numbers of held-out batches cannot wait on each other) and the
        first rank's buffers, its collectives no step's bytes."""
        assert self.ctx is not None
        buffers = [name for name, _ in self.engine.module.named_buffers()]
        with self.counted.paused():
            return plain_copy(self.ctx, self.device, self.full_state(), buffers)

    def full_state(self) -> dict[str, torch.Tensor]:
        """Every parameter and buffer whole, detached (ZeRO-3: gathered, a collective)."""
        import deepspeed

        module = self.engine.module
        with (
            self.counted.paused(),
            deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=None),
        ):
            return {name: value.detach().clone() for name, value in module.state_dict().items()}

    def saved_parameters(self, model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
        return None  # gathered on every rank at finish (save_params runs on one rank only)

    def finish(self) -> None:
        """Write the gathered parameters (every rank takes part; the first training rank
        writes), then let every rank finish its collectives before any leaves."""
        ctx = self.ctx
        assert ctx is not None
        if ctx.config.save_params:
            names = {name for name, _ in self.engine.module.named_parameters()}
            save_gathered(ctx, self.full_state(), names)
        if dist.is_initialized():
            dist.barrier()

    def teardown(self, completed: bool = True) -> None:
        self.counted.uninstall()
        if dist.is_initialized():
            dist.destroy_process_group()


SHM_OP = "deepspeed_shm_comm"
"""DeepSpeed's CPU shared-memory all-reduce op (``ShareMemCommBuilder.NAME``)."""

ALGORITHMS = {
    1: "ZeRO-1: optimizer state sharded; the gradients all-reduced bucket by bucket and the "
    "updated shards all-gathered, modelled as rings: 3(N-1)/N x the parameter bytes",
    2: "ZeRO-2: optimizer state and gradients sharded; the gradients all-reduced bucket by "
    "bucket and the updated shards all-gathered, modelled as rings: 3(N-1)/N x the bytes",
    3: "ZeRO-3: parameters, gradients and optimizer state sharded; the sharded parameters "
    "all-gathered before use (again for backward where not kept), the gradients "
    "reduce-scattered, the parameters kept whole all-gathered after the update, modelled as "
    "rings: (N-1)/N x each payload",
}


def _sharded_bytes(model: torch.nn.Module, cfg: Any, stage: int) -> int:
    """The bytes of the parameters ZeRO-3 shards: those above its persistence threshold
    (smaller ones stay whole on every rank); every parameter's optimizer state is sharded."""
    if stage < 3:
        return 0
    threshold = cfg.typed(Zero3Options).stage3_param_persistence_threshold
    return sum(
        p.numel() * p.element_size()
        for p in model.parameters()
        if p.requires_grad and p.numel() > threshold
    )


def _gathers(cfg: Any, full_bytes: int, element: int = 4) -> int:
    """All-gathers of the sharded parameters a ZeRO-3 step: one before forward, and one
    again before backward unless the whole model fits ``stage3_max_reuse_distance``."""
    distance = cfg.typed(Zero3Options).stage3_max_reuse_distance
    return 1 if full_bytes // element <= distance else 2


def pattern(stage: int, full: int, cfg: Any) -> str:
    """The performance model's pattern with the same ring phases a step: ZeRO-1 and -2's
    all-reduce and all-gather are FSDP's reduce-scatter and two all-gathers; ZeRO-3 is FSDP
    with one or two all-gathers of the parameters."""
    if stage < 3 or _gathers(cfg, full) == 2:
        return "fsdp"
    return "fsdp-no-reshard"


def modelled_bytes(stage: int, world: int, full: int, sharded: int, cfg: Any) -> int:
    """Bytes a rank sends a step by the model of each stage, as rings: ZeRO-1 and -2 an
    all-reduce of the gradients and an all-gather of the updated parameters; ZeRO-3 the
    gathers of its sharded parameters, a reduce-scatter of every gradient, and an all-gather
    after the update of the parameters it keeps whole (those under the persistence threshold,
    updated shard by shard as in ZeRO-1)."""
    share = (world - 1) / world
    if stage < 3:
        return round(3 * share * full)
    return round(share * (_gathers(cfg, full) * sharded + full + (full - sharded)))


def stage_runner(stage: int) -> Any:
    def run(ctx: WorkerContext) -> None:
        run_training(ctx, ZeroStrategy(stage))

    return run


run_zero1 = stage_runner(1)
run_zero2 = stage_runner(2)
run_zero3 = stage_runner(3)
