"""The TensorFlow and Keras backends on real processes (TensorFlow and Horovod's TensorFlow
binding are installed by `make test`): every backend trains 2 workers and ends where PyTorch
ends, a killed ps task fails its run and leaves nothing behind (async tf-ps learns:
test_equivalence.py).

Like for like, proven on the engines themselves: from the PyTorch twin's initial weights
(``weights = "torch"``, the default) on the same shards in the same order, N TensorFlow workers
with batch b end with the parameters that torch-single reaches with batch N*b (the reason is in
test_equivalence.py; the model has no BatchNorm). tf-ps is asynchronous, so only its 1-worker
run is sequential SGD and held to this.
"""

from pathlib import Path

import numpy as np
import pytest

from dlscale.config import RunConfig
from dlscale.contract.events import read_events
from dlscale.store import RunStore
from tests.distributed.processes import kill_rank_and_check_the_run_fails
from tests.distributed.references import (  # the same points as the torch proof
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
    "tf-single": ("tf-single", 1, {}),
    "tf-ps-1-worker": ("tf-ps", 1, {}),
    "tf-ps-sync": ("tf-ps", 2, {"ps_mode": "sync"}),
    "tf-mirrored": ("tf-mirrored", 2, {}),
    "tf-mwms": ("tf-mwms", 2, {}),  # collective = "ring": on a paper's model below
    "keras-fit": ("keras-fit", 2, {}),
    "keras-fit-3-steps-a-call": ("keras-fit", 2, {"steps_per_execution": 3}),
    "horovod-tf": ("horovod-tf", 2, {}),
    "horovod-keras": ("horovod-keras", 2, {}),
}
"""horovod-tf under horovodrun is held to the same point across 2 emulated hosts
(tests/cluster/test_hosts.py, PROVES)."""


@pytest.mark.parametrize("case", sorted(CASES))
def test_tensorflow_workers_end_where_pytorch_ends(tmp_path: Path, reference: Reference, case):
    backend, workers, extra = CASES[case]
    result, run_dir = run_and_compare(tmp_path, reference, backend, workers, extra)
    metrics = result.metrics
    coordinator = backend == "tf-ps" and extra.get("ps_mode") != "sync"
    if coordinator or extra.get("steps_per_execution", 1) > 1:  # a window's mean only
        assert metrics["train_loss_by_step"] is None
    else:  # step by step: the mean of the ranks' losses is the loss of PyTorch's batch of 16
        ours, theirs = step_losses(result), reference.losses
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
    assert result.environment["packages"]["tensorflow"] == "2.21.0"
    assert metrics["throughput_samples_s"] > 0 and metrics["eval_accuracy"] is not None
    strategy = next(
        e for e in read_events(run_dir / "events.rank0.jsonl") if e["event"] == "strategy"
    )
    assert strategy["facts"]["weights"] == "torch"
    if backend == "tf-ps":  # a pull of every variable and a push of every gradient
        assert metrics["bytes_sent_per_step_model"] == 2 * metrics["gradient_bytes"]
    elif workers == 2 and backend != "tf-mirrored":  # a ring of 2: each sends the payload once
        assert metrics["bytes_sent_per_step_model"] == metrics["gradient_bytes"]
    if backend.startswith("horovod"):  # counted from the tensors handed to Horovod's all-reduce
        assert metrics["bytes_sent_per_step_counted"] == metrics["gradient_bytes"]
    if backend in ("tf-mirrored", "tf-mwms", "horovod-tf"):  # the custom loops time steps
        assert metrics["step_time_nosync_p50_ms"] > 0 and metrics["input_time_p50_ms"] > 0
    elif backend in ("keras-fit", "horovod-keras"):  # fit's steps, one at a time in the probe
        assert metrics["step_time_nosync_p50_ms"] > 0 and metrics["input_time_p50_ms"] is None
        assert metrics["forward_time_p50_ms"] > 0  # its forward alone, through fit too
    elif backend == "tf-single":  # one process: its plain step beside a forward alone
        assert metrics["step_time_nosync_p50_ms"] > 0 and metrics["forward_time_p50_ms"] > 0
        assert metrics["exposed_comm_fraction"] == 0.0  # it synchronizes nothing
    else:  # the coordinator times whole windows; the synchronous ps times its steps but has
        # no step without the ps to compare with
        assert metrics["step_time_nosync_p50_ms"] is None
    if not coordinator and backend == "tf-ps":
        assert metrics["step_time_p50_ms"] > 0 and metrics["input_time_p50_ms"] > 0
        assert strategy["facts"]["strategy"] == "SyncReplicasOptimizer"


def test_tf_mwms_with_its_collective_chosen_takes_torch_ddps_steps_on_resnet20(
    tmp_path: Path, shared_store
):
    """A paper's model (BatchNorm, weight decay, momentum) from the PyTorch twin's weights,
    in float32 with tf-mwms' collective chosen (ring; TensorFlow's choice, auto, elsewhere):
    each step's loss within 1e-3 of torch-ddp's. The other TensorFlow engines, and tf-mwms
    with auto, take torch-ddp's steps on ResNet-20 and AlexNet to 1e-9 in float64
    (test_float64.py), a stronger proof of the same algorithm on the same models, where
    float32's rounding leaves 1e-4 between frameworks; their float32 runs are held to
    PyTorch's on the tiny model above (CASES)."""
    store = follows_torch_ddp(tmp_path, shared_store, "tf-mwms", "resnet20", collective="ring")
    (result,) = store.results()
    strategy = next(
        e
        for e in read_events(store.run_dir(result.run_id) / "events.rank0.jsonl")
        if e["event"] == "strategy"
    )
    assert strategy["facts"]["collective"] == "ring"


@pytest.mark.parametrize("backend", ["horovod-tf", "horovod-keras"])
def test_horovod_fp16_compression_halves_what_is_sent_and_stays_close(
    tmp_path: Path, reference: Reference, backend
):
    """Horovod's fp16 compressor rounds each gradient to float16 (~1e-3 relative) before the
    all-reduce: the run ends near PyTorch's, not at it, and half the bytes are handed to the
    all-reduce, counted from the float16 tensors of every step that ran (full bytes if the
    compressor had not compressed, 0 if the count followed traces instead of steps)."""
    config = RunConfig.make(backend=backend, workers=2, batch_size=8, compression="fp16", **COMMON)
    result, run_dir = run_completed(config, RunStore(tmp_path))
    for name, value in final_params(run_dir).items():
        np.testing.assert_allclose(
            value, reference.params[name], rtol=1e-2, atol=1e-3, err_msg=name
        )
    m = result.metrics
    assert m["bytes_sent_per_step_model"] == m["gradient_bytes"] / 2
    assert m["bytes_sent_per_step_counted"] == m["bytes_sent_per_step_model"]


def test_keras_initial_weights_are_another_start(tmp_path: Path, reference: Reference):
    """weights=keras starts from Keras' initializers: the run is valid but not PyTorch's."""
    config = RunConfig.make(
        backend="tf-single", workers=1, batch_size=16, weights="keras", **COMMON
    )
    params = final_params(run_completed(config, RunStore(tmp_path))[1])
    assert max(float(np.abs(params[n] - reference.params[n]).max()) for n in params) > 1e-2


def test_a_killed_ps_task_fails_the_run_and_leaves_nothing_running(tmp_path: Path):
    """Ranks: chief 0, workers 1-2, ps 3. The ps task never exits by itself; killed, it ends
    the run as failed, named, and the launcher stops the chief and the workers."""
    kill_rank_and_check_the_run_fails(tmp_path, "tf-ps", ranks=4, rank=3, role="ps")


def test_a_killed_worker_of_the_synchronous_parameter_server_fails_the_run(tmp_path: Path):
    """Ranks: workers 0-1, ps 2. The chief (worker 0) would wait for worker 1's gradient for
    ever: the launcher ends it and the ps task, and names the dead worker."""
    kill_rank_and_check_the_run_fails(
        tmp_path,
        "tf-ps",
        ranks=3,
        rank=1,
        role="worker",
        extra=("--set", "ps_mode=sync"),
        reason="rank 1 was killed by SIGKILL",  # a worker: no role named
    )


def test_ls_backends_lists_every_tensorflow_backend_as_installed(cli):
    listing = cli("ls", "backends")
    assert listing.returncode == 0, listing.stderr
    rows = {line.split("│")[1].strip(): line for line in listing.stdout.splitlines() if "│" in line}
    for name in ("tf-single", "tf-mirrored", "tf-mwms", "tf-ps", "keras-fit"):
        assert "yes" in rows[name], rows.get(name)
    for name in ("horovod-tf", "horovod-keras"):
        shown = cli("ls", "backends", name, env=WIDE).stdout
        assert "built for torch,tensorflow" in " ".join(shown.split())
