"""The JAX backends on real processes (jax and Flax installed in .venv by `make test`):
jax-single and jax-dp end where PyTorch ends on the tiny model, jax-dp takes torch-ddp's steps
on ResNet-20 (float32 to 1e-3 over 3 steps, float64 rank by rank to 1e-9), its probe and byte
model run, and a killed worker fails the run and leaves nothing behind.

Like for like, as test_tensorflow.py and test_mxnet.py: from the PyTorch twin's initial weights
on the same shards in the same order, N jax-dp workers at batch b end with the parameters
torch-single reaches at batch N*b (the tiny model has no BatchNorm)."""

import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from dlscale.config import RunConfig
from dlscale.contract.events import events_path, read_events
from dlscale.store import RunStore
from tests.distributed.elastic import RESTARTABLE, elastic_run
from tests.distributed.microbench_events import ran_this_checkout, slowest_per_iteration
from tests.distributed.processes import (
    kill_rank_and_check_the_run_fails,
    processes_naming,
    wait_gone,
)
from tests.distributed.references import (
    PAPER_MODELS,
    Reference,
    follows_torch_ddp,
    run_and_compare,
    step_losses,
)
from tests.distributed.whole_loop import check_the_whole_loop
from tests.runs import per_rank_losses, run_completed

pytestmark = pytest.mark.dist


@pytest.mark.parametrize(("backend", "workers"), [("jax-single", 1), ("jax-dp", 2)])
def test_jax_workers_end_where_pytorch_ends(tmp_path: Path, reference: Reference, backend, workers):
    result, run_dir = run_and_compare(tmp_path, reference, backend, workers, {})
    np.testing.assert_allclose(step_losses(result), reference.losses, rtol=0, atol=1e-4)
    metrics = result.metrics
    assert metrics["throughput_samples_s"] > 0 and metrics["eval_accuracy"] is not None
    assert result.environment["packages"]["jax"] and result.environment["packages"]["flax"]
    strategy = next(
        e for e in read_events(run_dir / "events.rank0.jsonl") if e["event"] == "strategy"
    )
    compiled = strategy["facts"]["compile_s"]
    assert compiled["step"] > 0  # compiled before the first window, and said
    if workers == 1:
        assert metrics["step_time_nosync_p50_ms"] is None and "step_without_sync" not in compiled
        assert "forward" not in compiled  # no probe, nothing to time it in
        return
    assert compiled["step_without_sync"] > 0 and compiled["forward"] > 0
    assert metrics["step_time_nosync_p50_ms"] > 0  # the probe ran its step without pmean
    assert metrics["forward_time_p50_ms"] > 0  # and the step's forward alone
    # a ring all-reduce of 2 sends the gradient's bytes once: 2 (N - 1) / N
    assert metrics["bytes_sent_per_step_model"] == metrics["gradient_bytes"]


def test_jax_dp_takes_torch_ddps_steps_on_resnet20(tmp_path: Path, shared_store: RunStore):
    """BatchNorm per replica, as DDP's: a jit of the global batch would normalize over both
    workers' images and miss torch-ddp's step 1 by far more than 1e-3."""
    follows_torch_ddp(tmp_path, shared_store, "jax-dp", "resnet20")


def test_jax_dp_takes_torch_ddps_float64_steps_rank_by_rank(tmp_path: Path, shared_store: RunStore):
    point = dict(PAPER_MODELS["resnet20"], workers=2, precision="float64", save_params=True)
    _, ddp_dir = run_completed(RunConfig.make(backend="torch-ddp", **point), shared_store)
    _, jax_dir = run_completed(RunConfig.make(backend="jax-dp", **point), RunStore(tmp_path))
    ddp, ours = per_rank_losses(ddp_dir), per_rank_losses(jax_dir)
    assert ours[0] != ours[1] and len(ours[0]) == 3  # each rank its own batch
    for rank in (0, 1):
        assert ours[rank] == pytest.approx(ddp[rank], abs=1e-9, rel=0), rank


def test_a_killed_jax_worker_fails_the_run_and_leaves_nothing_running(tmp_path: Path):
    """A peer of XLA's gloo all-reduce gone: the launcher stops the other and names the dead."""
    kill_rank_and_check_the_run_fails(
        tmp_path, "jax-dp", rank=1, reason="rank 1 was killed by SIGKILL"
    )


def test_a_killed_jax_worker_restarted_by_torchrun_resumes_to_the_same_steps(tmp_path: Path, cli):
    """torchrun restarts both ranks after a kill -9 of rank 1; they join a new coordinator on
    the same port, restore the parameters and momentum rank 0 saved after its last window, skip
    the data those windows took, and end with the uninterrupted run's losses to the bit."""
    flags = ("--backend", "jax-dp")
    code, err, stored, victims = elastic_run(tmp_path / "elastic", 1, flags, "max_restarts=1")
    assert code == 0 and stored.status == "completed", (err, stored.error)
    assert stored.metrics["restarts"] == 1 and stored.metrics["windows_recorded"] == 4
    run_dir = tmp_path / "elastic" / stored.run_id
    (resume,) = [e for e in read_events(run_dir / "events.rank0.jsonl") if e["event"] == "resume"]
    assert resume["restart"] == 1 and 0 <= resume["windows_done"] <= 3
    assert not (run_dir / "checkpoint").exists()
    run = cli("run", *RESTARTABLE, *flags, "--results", str(tmp_path / "whole"))
    assert run.returncode == 0, run.stderr
    (uninterrupted,) = RunStore(tmp_path / "whole").results()
    whole = uninterrupted.metrics
    assert stored.metrics["train_loss_by_window"] == whole["train_loss_by_window"]
    assert stored.metrics["final_train_loss"] == whole["final_train_loss"]
    assert not wait_gone(victims, 5.0) and not processes_naming(tmp_path)


def test_jaxs_collectives_are_exact_and_the_others_are_said_not_measured(cli, tmp_path):
    """``dlscale microbench --backend jax-dp``: psum, all_gather and psum_scatter in compiled
    shard_maps over gloo, exact; broadcast (no CPU lowering of pbroadcast), send_recv and
    ps_pushpull said not measured; one figure recomputed from the ranks' own records; then a
    prediction's whole loop for jax-dp (tests/distributed/whole_loop.py). 4 MiB: with 4 B and
    64 KiB only, a loaded machine once timed the 4 B slower, and the fit had no bandwidth."""
    run = cli("microbench", "--backend", "jax-dp", "--workers", "2",
              "--sizes", "4,64k,4M", "--results", str(tmp_path))  # fmt: skip
    assert run.returncode == 0, run.stderr
    not_offered = "jax-dp's library offers no such collective"
    said = f"dlscale: not measured: broadcast, send_recv, ps_pushpull ({not_offered})"
    assert said in run.stderr and "Traceback" not in run.stderr
    (path,) = tmp_path.glob("microbench-jax-dp-w2-local-*/microbench.json")
    stored = json.loads(path.read_text())
    rows = stored["rows"]
    assert {r["collective"] for r in rows} == {"all_reduce", "all_gather", "reduce_scatter"}
    assert len(rows) == 3 * 3 and all(r["correct"] and r["max_error"] == 0 for r in rows), rows
    # up to 16 arrays a call (4 MiB in all), as a step's gradient, timed per array
    assert {(r["bytes"], r["messages_per_call"]) for r in rows} == {
        (4, 16),
        (8, 16),
        (64 << 10, 16),
        (4 << 20, 1),
    }  # fmt: skip  (all_gather's smallest output holds one element per rank: 8 B)
    run_dir = path.parent
    assert ran_this_checkout(run_dir)
    events = {rank: read_events(events_path(run_dir, rank)) for rank in (0, 1)}
    row = next(r for r in rows if r["collective"] == "all_reduce" and r["bytes"] == 64 << 10)
    slowest = slowest_per_iteration([events[0], events[1]], "all_reduce", 64 << 10)
    assert row["time_s"] == statistics.median(slowest)
    assert stored["fit"]["pattern"] == "ring" and stored["fit"]["collective"] == "all_reduce"
    pids = [next(e["pid"] for e in events[rank] if e["event"] == "start") for rank in (0, 1)]
    assert not wait_gone(pids, 5.0) and not processes_naming(tmp_path)
    check_the_whole_loop(cli, tmp_path, "jax-dp", "ring")


def test_a_users_own_model_is_refused_before_launch(tmp_path, cli):
    """The JAX engines train the Flax twins only: a user's own model is one line, exit 2, and
    nothing runs."""
    own = tmp_path / "flax_models.py"
    own.write_text(
        "import flax.linen as nn\n\ndef build(num_classes):\n    return nn.Dense(num_classes)\n"
    )
    refused = cli("run", "--model", f"{own}:build", "--backend", "jax-dp", "--workers", "2",
                  "--results", str(tmp_path / "r"))  # fmt: skip
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "which jax's backends cannot train: choose --backend from" in refused.stderr
    assert not list((tmp_path / "r").glob("*/result.json"))
