"""A learning-rate schedule reaches the optimizer ZeRO steps, and the bytes a run reports are
the ones its events hold.

The torch loop builds its schedule on the run's own optimizer, which DeepSpeed wraps: were the
schedule to set the groups of a copy, ZeRO would train at the constant rate. With a cosine
schedule and 2 warm-up steps (the first step at half the rate) every rank's loss at every step
of ZeRO-2 and ZeRO-3 equals torch-ddp's on the tiny CNN at 2 workers (3 real runs, a few
seconds each). Each run's ``bytes_sent_per_step_counted`` is recomputed by hand from its
``window`` events (bytes_sent over steps, every rank the same) and is within 1% of the model
(some scalars and padding, on a model of 15.8 KB) where ZeRO-3 shards every parameter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dlscale.config import RunConfig
from dlscale.store import RunStore
from tests.runs import per_rank_losses, run_completed

pytest.importorskip("deepspeed")
pytestmark = [pytest.mark.e2e, pytest.mark.dist]

POINT: dict[str, Any] = dict(
    model="tiny",
    dataset="digits",
    workers=2,
    batch_size=8,
    steps=4,
    windows=1,
    warmup_steps=1,  # ZeRO-3's first step gathers twice (it records the modules' order)
    comm_probe_steps=0,
    lr_schedule="cosine",
    lr_warmup_steps=2,
    seed=4,
)


@pytest.fixture(scope="module")
def ddp(tmp_path_factory) -> Path:
    config = RunConfig.make(backend="torch-ddp", **POINT)
    return run_completed(config, RunStore(tmp_path_factory.mktemp("ddp")))[1]


def _bytes_by_hand(run_dir: Path) -> dict[int, float]:
    out = {}
    for rank in (0, 1):
        sent = steps = 0
        for line in (run_dir / f"events.rank{rank}.jsonl").open():
            event = json.loads(line)
            if event["event"] == "window" and event.get("kind") == "measure":
                sent, steps = sent + event["bytes_sent"], steps + event["steps"]
        out[rank] = sent / steps
    return out


@pytest.mark.parametrize("stage", [2, 3])
def test_a_cosine_schedule_steps_zero_as_it_steps_ddp(tmp_path: Path, ddp: Path, stage: int):
    extra = {"stage3_param_persistence_threshold": 0} if stage == 3 else {}
    config = RunConfig.make(backend=f"deepspeed-zero{stage}", **POINT, **extra)
    result, run_dir = run_completed(config, RunStore(tmp_path))
    losses, expected = per_rank_losses(run_dir), per_rank_losses(ddp)
    for rank in (0, 1):
        assert len(losses[rank]) == 4
        assert losses[rank] == pytest.approx(expected[rank], rel=1e-6, abs=0)
    m = result.metrics
    by_hand = _bytes_by_hand(run_dir)
    assert by_hand[0] == by_hand[1] == pytest.approx(m["bytes_sent_per_step_counted"])
    model = m["bytes_sent_per_step_model"]
    assert model == round((3 if stage < 3 else 2) * m["gradient_bytes"] / 2)
    # beside the model: a few scalars (ZeRO's norm and overflow checks, ZeRO-3's broadcast of
    # its trace in the second step) and ZeRO-3's padding to whole shards, some hundred bytes,
    # which on the tiny CNN's 15.8 KB is under 1%
    assert 0 <= m["bytes_sent_per_step_counted"] - model < 1e-2 * m["gradient_bytes"]
