"""torch-fsdp (FSDP2, ``fully_shard``) takes DDP's steps and counts its own bytes.

On ResNet-20 (with BatchNorm: each rank normalizes its own batch in both engines) at 2 workers,
the per-step losses of both ranks (to 1e-6, as the other torch engines are held to DDP's in
test_equivalence.py), the final parameters and the evaluation equal DDP's; the
bytes handed to FSDP2's all-gathers and reduce-scatters (its custom-collective hooks) equal the
model: 3(N-1)/N x the gradient with ``reshard_after_forward`` (two all-gathers and a
reduce-scatter a step), 2(N-1)/N without (one all-gather)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from dlscale.config import RunConfig
from dlscale.contract.events import read_events
from dlscale.contract.models import MODELS
from dlscale.runner import run_point
from dlscale.store import RunStore

pytestmark = pytest.mark.dist
COMMON: dict[str, Any] = dict(
    model="resnet20",
    dataset="digits",
    workers=2,
    batch_size=8,
    steps=1,  # one step a window: each window's loss is one step's
    windows=3,
    warmup_steps=0,
    save_params=True,
    seed=3,
    lr=0.05,
)


def _run(tmp_path: Path, **extra: Any) -> tuple[dict[str, Any], Path]:
    store = RunStore(tmp_path)
    outcome = run_point(
        RunConfig.make(**COMMON, **extra), store, force=False, command=["t"], study="fsdp"
    )
    assert outcome.state == "completed", outcome.result and outcome.result.error
    return outcome.result, store.run_dir(outcome.run_id)


def _step_losses(run_dir: Path) -> list[list[float]]:
    return [
        [
            e["loss_sum"]
            for e in read_events(run_dir / f"events.rank{rank}.jsonl")
            if e["event"] == "window" and e["kind"] == "measure"
        ]
        for rank in (0, 1)
    ]


@pytest.fixture(scope="module")
def ddp(tmp_path_factory) -> tuple[dict[str, Any], Path]:
    return _run(tmp_path_factory.mktemp("ddp"), backend="torch-ddp")


@pytest.mark.parametrize("reshard", [True, False], ids=["zero3", "zero2"])
def test_fsdp_takes_ddps_steps_and_counts_what_it_sends(tmp_path: Path, ddp, reshard):
    ddp_result, ddp_dir = ddp
    result, run_dir = _run(tmp_path, backend="torch-fsdp", reshard_after_forward=reshard)
    losses, expected = _step_losses(run_dir), _step_losses(ddp_dir)
    assert [len(rank) for rank in losses] == [3, 3]
    for rank in (0, 1):
        assert losses[rank] == pytest.approx(expected[rank], rel=1e-6, abs=0)
    assert losses[0] != losses[1]  # each rank its own batches: not one loss copied twice
    mine = torch.load(run_dir / "final_params.pt")
    theirs = torch.load(ddp_dir / "final_params.pt")
    assert mine.keys() == theirs.keys()
    for name, value in mine.items():
        torch.testing.assert_close(value, theirs[name], rtol=1e-5, atol=1e-6)
    torch.manual_seed(COMMON["seed"])  # the initial weights every rank builds
    start = dict(MODELS.get("resnet20").build(10).named_parameters())
    assert max(float((mine[n] - start[n].detach()).abs().max()) for n in mine) > 1e-3  # trained
    m, reference = result.metrics, ddp_result.metrics
    assert m["eval_accuracy"] == pytest.approx(reference["eval_accuracy"])
    assert m["gradient_bytes"] == reference["gradient_bytes"]
    gathers = 2 if reshard else 1
    # N = 2: (N-1)/N x (all-gathers + 1) x the gradient; DDP's ring is 2(N-1)/N x the gradient
    assert m["bytes_sent_per_step_model"] == (gathers + 1) * m["gradient_bytes"] // 2
    assert m["bytes_sent_per_step_counted"] == m["bytes_sent_per_step_model"]
    assert reference["bytes_sent_per_step_counted"] == m["gradient_bytes"]
    assert m["exposed_comm_fraction"] is None  # no step without the all-gathers exists
    # the messages: each of the 12 units' own parameters (conv1, bn1, fc, the nine blocks),
    # DDP's: its buckets, every parameter in one of them
    assert len(m["sync_message_bytes"]) == 12
    assert sum(m["sync_message_bytes"]) == m["gradient_bytes"]
    assert sum(reference["sync_message_bytes"]) == reference["gradient_bytes"]


def test_every_block_is_a_unit_of_its_own():
    model = MODELS.get("resnet20").build(10)
    from dlscale.frameworks.torch.fsdp import shard_units  # torch's FSDP: 1 s to import

    units = list(shard_units(model))
    assert len(units) == 3 + 9  # conv1, bn1, fc and the nine residual blocks
    assert sum(p.numel() for u in units for p in u.parameters()) == sum(
        p.numel() for p in model.parameters()
    )
