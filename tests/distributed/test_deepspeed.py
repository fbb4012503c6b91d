"""DeepSpeed's ZeRO stages take torch-ddp's steps and count what they send.

On ResNet-20 (BatchNorm: each rank normalizes its own batch in both engines) at 2 workers, SGD
with momentum and weight decay under a cosine schedule with warm-up: each rank's per-step
losses (to 1e-6, as torch-fsdp is held in test_fsdp.py), the final parameters and the
evaluation equal torch-ddp's, for ZeRO-1, -2 and -3; the bytes DeepSpeed handed to
torch.distributed equal the model, and the events' own. On the GPT of
test_gpt_torch.py, AdamW: each rank's losses and the parameters to 1e-6, for every stage.
float64 is refused before launch, naming DeepSpeed's limit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlscale.config import RunConfig
from dlscale.contract.errors import UnsupportedPoint
from dlscale.contract.events import read_events
from dlscale.store import RunStore
from tests.distributed.references import GPT_POINT
from tests.runs import final_params, per_rank_losses, run_completed

pytest.importorskip("deepspeed")
pytestmark = pytest.mark.dist
COMMON: dict[str, Any] = dict(
    model="resnet20",
    dataset="digits",
    workers=2,
    batch_size=8,
    steps=3,
    windows=1,
    # ZeRO-3's first step records the order its modules run in and gathers more than a step
    # does after it (twice the parameters, and again the whole ones): left out of the windows
    warmup_steps=1,
    comm_probe_steps=0,
    save_params=True,
    seed=3,
    lr=0.05,
    # the schedule sets the groups of the optimizer ZeRO steps: were it a copy's, ZeRO would
    # train at the constant rate and leave DDP's losses from the second step on
    lr_schedule="cosine",
    lr_warmup_steps=2,
)


@pytest.fixture(scope="module")
def ddp(tmp_path_factory) -> tuple[dict[str, Any], Path]:
    config = RunConfig.make(backend="torch-ddp", **COMMON)
    result, run_dir = run_completed(config, RunStore(tmp_path_factory.mktemp("ddp")))
    return result.metrics, run_dir


@pytest.mark.parametrize(
    ("stage", "extra"),
    [
        (1, {}),
        (2, {}),
        # every parameter sharded, and (DeepSpeed's default) none: ResNet-20's are all below
        # its threshold of 100,000 elements, so each stays whole and is all-gathered after
        # the update, as in ZeRO-1
        (3, {"stage3_param_persistence_threshold": 0}),
        (3, {}),
    ],
    ids=["zero1", "zero2", "zero3", "zero3-nothing-sharded"],
)
def test_each_zero_stage_takes_ddps_steps_and_counts_what_it_sends(
    tmp_path: Path, ddp, stage, extra
):
    reference, ddp_dir = ddp
    config = RunConfig.make(backend=f"deepspeed-zero{stage}", **COMMON, **extra)
    result, run_dir = run_completed(config, RunStore(tmp_path))
    losses, expected = per_rank_losses(run_dir), per_rank_losses(ddp_dir)
    assert [len(losses[0]), len(losses[1])] == [3, 3] and losses[0] != losses[1]
    for rank in (0, 1):
        assert losses[rank] == pytest.approx(expected[rank], rel=1e-6, abs=0)
    mine, theirs = final_params(run_dir), final_params(ddp_dir)
    assert mine.keys() == theirs.keys()
    for name, value in mine.items():
        np.testing.assert_allclose(value, theirs[name], rtol=1e-5, atol=1e-6, err_msg=name)
    m = result.metrics
    assert m["eval_accuracy"] == pytest.approx(reference["eval_accuracy"])
    assert m["gradient_bytes"] == reference["gradient_bytes"]  # the whole model, also sharded
    # N = 2. ZeRO-1/2: an all-reduce of the gradients (2(N-1)/N) and an all-gather of the
    # updated shards ((N-1)/N); ZeRO-3: one all-gather of the sharded parameters (kept from
    # forward to backward), a reduce-scatter of the gradients and an all-gather of the whole
    # ones after the update, (N-1)/N each: 2 halves either way here. DDP: 2(N-1)/N.
    halves = 3 if stage < 3 else 2
    assert m["bytes_sent_per_step_model"] == round(halves * m["gradient_bytes"] / 2)
    # counted: the same, with a few scalars (ZeRO's overflow and norm checks) and ZeRO-3's
    # padding of each parameter to whole shards, under 0.1% of the model
    surplus = m["bytes_sent_per_step_counted"] - m["bytes_sent_per_step_model"]
    assert 0 <= surplus < 1e-3 * m["gradient_bytes"]
    assert reference["bytes_sent_per_step_counted"] == m["gradient_bytes"]
    assert m["exposed_comm_fraction"] is None  # no ZeRO step without collectives exists
    # recomputed by hand from the raw events: each rank's bytes over its steps
    for rank in (0, 1):
        windows = [
            e
            for e in read_events(run_dir / f"events.rank{rank}.jsonl")
            if e["event"] == "window" and e["kind"] == "measure"
        ]
        by_hand = sum(w["bytes_sent"] for w in windows) / sum(w["steps"] for w in windows)
        assert by_hand == pytest.approx(m["bytes_sent_per_step_counted"])
    assert m["sync_pattern"] == ("fsdp" if stage < 3 else "fsdp-no-reshard")
    (strategy,) = [
        e for e in read_events(run_dir / "events.rank0.jsonl") if e["event"] == "strategy"
    ]
    sharded = strategy["facts"]["sharded_parameter_bytes"]
    assert sharded == (m["gradient_bytes"] if extra else 0)
    assert m["rss_peak_bytes"] > 0


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_takes_ddps_float32_gpt_steps_with_adamw(tmp_path: Path, shared_store, stage):
    ddp_config = RunConfig.make(backend="torch-ddp", **GPT_POINT)
    _, ddp_dir = run_completed(ddp_config, shared_store, study="gpt-reference")
    config = RunConfig.make(backend=f"deepspeed-zero{stage}", **GPT_POINT)
    _, run_dir = run_completed(config, RunStore(tmp_path))
    losses, expected = per_rank_losses(run_dir), per_rank_losses(ddp_dir)
    # no bit differed on Machine A (losses and parameters); 1e-6, the image proofs' bound,
    # leaves room for another machine's summation order
    for rank in (0, 1):
        assert losses[rank] == pytest.approx(expected[rank], abs=1e-6, rel=0)
        assert len(set(losses[rank])) == 3  # the steps moved the loss
    mine, theirs = final_params(run_dir), final_params(ddp_dir)
    assert mine.keys() == theirs.keys()
    for name, value in mine.items():
        np.testing.assert_allclose(value, theirs[name], rtol=0, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_float64_is_refused_naming_deepspeeds_limit(stage):
    with pytest.raises(UnsupportedPoint, match="float64") as refused:
        RunConfig.make(backend=f"deepspeed-zero{stage}", precision="float64")
    assert "communication_data_type" in str(refused.value)
