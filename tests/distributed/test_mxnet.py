"""The MXNet backends on real processes, in MXNet's own environment (`make test` runs
`make mxnet`'s steps: .venv-mxnet with numpy 1.23.5 and mxnet 1.9.1, Horovod built there):
every backend ends where PyTorch ends, asynchronous ps-lite records its staleness, a killed
server or scheduler fails the run and leaves no ps-lite process behind (dist_async learning to
a target: test_equivalence.py).

Like for like, as test_tensorflow.py: from the PyTorch twin's initial weights on the same
shards in the same order, N MXNet workers at batch b end with the parameters torch-single
reaches at batch N*b (the model has no BatchNorm). dist_async with one worker is sequential SGD
through a real scheduler and server, so it is held to the same standard.
"""

from pathlib import Path

import numpy as np
import pytest

from dlscale.config import RunConfig
from dlscale.contract.events import read_events
from dlscale.store import RunStore
from tests.distributed.processes import kill_rank_and_check_the_run_fails
from tests.distributed.references import (
    COMMON,
    Reference,
    follows_torch_ddp,
    run_and_compare,
    step_losses,
)
from tests.runs import final_params, run_completed

WIDE = {"COLUMNS": "400"}
"""A width at which ls backends NAME keeps each value on one line."""
pytestmark = pytest.mark.dist

CASES = {
    "mxnet-single": ("mxnet-single", 1, {}),
    "mxnet-kv-local": ("mxnet-kv", 1, {"kvstore": "local"}),
    "mxnet-kv-dist_sync": ("mxnet-kv", 2, {}),
    "mxnet-kv-dist_device_sync-2-servers": (
        "mxnet-kv",
        2,
        {"kvstore": "dist_device_sync", "num_servers": 2},
    ),
    "mxnet-kv-dist_async-1-worker": ("mxnet-kv", 1, {"kvstore": "dist_async"}),
    "horovod-mxnet": ("horovod-mxnet", 2, {}),
    "horovod-mxnet-mpirun": ("horovod-mxnet", 2, {"launcher": "mpirun"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_mxnet_workers_end_where_pytorch_ends(tmp_path: Path, reference: Reference, case):
    backend, workers, extra = CASES[case]
    result, run_dir = run_and_compare(tmp_path, reference, backend, workers, extra)
    metrics = result.metrics
    # step by step: the mean of the ranks' losses is the loss of PyTorch's batch of 16
    ours, theirs = step_losses(result), reference.losses
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
    packages = result.environment["packages"]
    assert packages["mxnet"] == "1.9.1" and packages["numpy"] == "1.23.5"  # its own venv
    assert result.environment["worker"]["python"].endswith(".venv-mxnet/bin/python")
    assert metrics["throughput_samples_s"] > 0 and metrics["eval_accuracy"] is not None
    strategy = next(
        e for e in read_events(run_dir / "events.rank0.jsonl") if e["event"] == "strategy"
    )
    assert strategy["facts"]["weights"] == "torch"
    synchronizes = backend != "mxnet-single" and extra.get("kvstore") != "local"
    if synchronizes:
        assert metrics["step_time_nosync_p50_ms"] > 0 and metrics["input_time_p50_ms"] > 0
    else:  # one process: its plain step timed beside a forward alone (runtime/schedule.py)
        assert metrics["step_time_nosync_p50_ms"] > 0 and metrics["forward_time_p50_ms"] > 0
        assert metrics["exposed_comm_fraction"] == 0.0  # nothing synchronized
    if backend == "mxnet-kv" and synchronizes:  # a push and a pull of every gradient
        assert metrics["bytes_sent_per_step_model"] == 2 * metrics["gradient_bytes"]
        servers = [
            e
            for rank in range(workers + 1, workers + 1 + extra.get("num_servers", 1))
            for e in read_events(run_dir / f"events.rank{rank}.jsonl")
            if e["event"] == "server"
        ]
        assert len(servers) == extra.get("num_servers", 1)  # every server ended and reported
    if backend == "horovod-mxnet":  # a ring of 2: each sends the payload once
        assert metrics["bytes_sent_per_step_model"] == metrics["gradient_bytes"]
        assert result.environment["mkldnn_enabled"] is False


@pytest.mark.parametrize("model", ["resnet20", "alexnet"])
def test_mxnet_kv_takes_torch_ddps_steps_on_the_papers_models(tmp_path: Path, shared_store, model):
    """A paper's model with BatchNorm, weight decay and momentum, from the PyTorch twin's
    weights: each step's loss within 1e-3 of torch-ddp's (dist_sync through a real server,
    which holds float32 only). horovod-mxnet takes torch-ddp's steps on both models to 1e-9
    in float64 (test_float64.py)."""
    follows_torch_ddp(tmp_path, shared_store, "mxnet-kv", model)


def test_horovod_fp16_compression_halves_the_payload_and_stays_close(
    tmp_path: Path, reference: Reference
):
    """fp16 all-reduce rounds the gradients (to ~1e-3 relative), so the run is close to
    PyTorch's, not equal; the bytes on the wire are half."""
    config = RunConfig.make(
        backend="horovod-mxnet", workers=2, batch_size=8, compression="fp16", **COMMON
    )
    result, run_dir = run_completed(config, RunStore(tmp_path))
    for name, value in final_params(run_dir).items():
        np.testing.assert_allclose(
            value, reference.params[name], rtol=1e-2, atol=1e-3, err_msg=name
        )
    m = result.metrics  # counted from the fp16 arrays the compressor hands to the all-reduce
    assert m["bytes_sent_per_step_counted"] == m["bytes_sent_per_step_model"]
    assert m["bytes_sent_per_step_model"] == m["gradient_bytes"] / 2


def test_gluon_initial_weights_are_another_start(tmp_path: Path, reference: Reference):
    config = RunConfig.make(
        backend="mxnet-single", workers=1, batch_size=16, weights="gluon", **COMMON
    )
    params = final_params(run_completed(config, RunStore(tmp_path))[1])
    assert max(float(np.abs(params[n] - reference.params[n]).max()) for n in params) > 1e-2


def test_dist_async_records_the_staleness_of_every_push(tmp_path: Path):
    """2 asynchronous workers: the server's version counter sees every push once; a push
    computed from parameters that another worker has updated since is stale. ResNet-20: the
    counter's key must miss BatchNorm's statistics, which Gluon's Trainer numbers too."""
    config = RunConfig.make(  # a model with BatchNorm: Gluon's keys count its statistics too
        backend="mxnet-kv",
        workers=2,
        batch_size=8,
        kvstore="dist_async",
        **{**COMMON, "model": "resnet20"},
    )
    result, run_dir = run_completed(config, RunStore(tmp_path))
    m = result.metrics
    # per worker: warm-up 1 + measured 3 + the probe's synchronized steps (a warm-up pair,
    # then 1 pair: 1 + 1); its unsynchronized steps push nothing
    pushes = 2 * (1 + 3 + 2)
    assert sum(m["staleness_histogram"].values()) == pushes, m["staleness_histogram"]
    # both workers' first pushes carry version 0: the second applied is stale (>= 1)
    assert m["staleness_max"] >= 1
    (server,) = [e for e in read_events(run_dir / "events.rank3.jsonl") if e["event"] == "server"]
    assert server["counters"]["async_pushes"] == pushes


@pytest.mark.parametrize("victim", ["server", "scheduler"])
def test_a_killed_ps_lite_process_fails_the_run_and_leaves_nothing_running(
    tmp_path: Path, victim: str
):
    """Ranks: workers 0-1, scheduler 2, server 3. Killed, either ends the run as failed, named,
    and the launcher stops every other process."""
    rank = {"scheduler": 2, "server": 3}[victim]
    kill_rank_and_check_the_run_fails(
        tmp_path, "mxnet-kv", ranks=4, rank=rank, role=victim, settle_s=3.0
    )


def test_ls_backends_lists_the_mxnet_backends_as_installed(cli):
    listing = cli("ls", "backends")
    assert listing.returncode == 0, listing.stderr
    rows = {line.split("│")[1].strip(): line for line in listing.stdout.splitlines() if "│" in line}
    for name in ("mxnet-single", "mxnet-kv", "horovod-mxnet"):
        assert "│ yes " in rows[name], rows.get(name)
    for name in ("mxnet-single", "mxnet-kv"):  # in full: where its environment is
        assert "yes: .venv-mxnet" in cli("ls", "backends", name, env=WIDE).stdout
    assert "built for mxnet" in " ".join(
        cli("ls", "backends", "horovod-mxnet", env=WIDE).stdout.split()
    )


def test_a_missing_mxnet_environment_is_one_line_naming_make_mxnet(tmp_path: Path, cli):
    result = cli(
        "run",
        "--backend",
        "mxnet-single",
        "--model",
        "tiny",
        "--steps",
        "1",
        "--results",
        str(tmp_path),
        env={"DLSCALE_MXNET_PYTHON": str(tmp_path / "nowhere" / "python")},
    )
    assert result.returncode == 2
    assert "make mxnet" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
