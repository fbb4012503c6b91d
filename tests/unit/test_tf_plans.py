"""The TensorFlow backends' plans as data: roles, ports, TF_CONFIG, options. Nothing starts."""

import json
from pathlib import Path

import pytest

from dlscale.config import RunConfig
from dlscale.contract.backends import BACKENDS
from dlscale.contract.errors import UnsupportedPoint, UserError
from dlscale.launchers.local import LocalLauncher

SPEC = Path("/r/x/spec.json")


def _plan(**kwargs):
    cfg = RunConfig.make(model="tiny", **kwargs)
    ports = tuple(range(30000, 30000 + BACKENDS.get(cfg.backend).port_count(cfg)))
    return cfg, LocalLauncher().plan(cfg, SPEC, "/venv/bin/python", ports=ports, cores=8)


def test_tf_ps_runs_a_chief_workers_and_ps_tasks_each_with_its_task_in_tf_config():
    _, plan = _plan(backend="tf-ps", workers=2, num_ps=2)
    roles = [(p.role, p.index, p.trains, p.exits, p.replicas) for p in plan.layout.processes]
    assert roles == [
        ("chief", 0, True, True, 2),  # the coordinator records every replica's images
        ("worker", 0, False, False, 0),
        ("worker", 1, False, False, 0),
        ("ps", 0, False, False, 0),
        ("ps", 1, False, False, 0),
    ]
    assert plan.layout.replicas == 2 and plan.threads_per_worker == 1  # 8 cores, 5 processes
    configs = [json.loads(entry.env["TF_CONFIG"]) for entry in plan.entries]
    cluster = {
        "chief": ["127.0.0.1:30000"],
        "worker": ["127.0.0.1:30001", "127.0.0.1:30002"],
        "ps": ["127.0.0.1:30003", "127.0.0.1:30004"],
    }
    assert all(c["cluster"] == cluster for c in configs)
    assert [c["task"] for c in configs] == [
        {"type": "chief", "index": 0},
        {"type": "worker", "index": 0},
        {"type": "worker", "index": 1},
        {"type": "ps", "index": 0},
        {"type": "ps", "index": 1},
    ]


def test_mwms_and_keras_fit_have_one_worker_task_per_process():
    for backend in ("tf-mwms", "keras-fit"):
        _, plan = _plan(backend=backend, workers=3)
        assert [p.role for p in plan.layout.processes] == ["worker"] * 3
        tasks = [json.loads(e.env["TF_CONFIG"])["task"] for e in plan.entries]
        assert tasks == [{"type": "worker", "index": i} for i in range(3)]
        assert plan.addresses.ports == (30000, 30001, 30002)


def test_mirrored_trains_every_replica_in_one_process_with_every_core():
    _, plan = _plan(backend="tf-mirrored", workers=4)
    (process,) = plan.layout.processes
    assert process.replicas == 4 and plan.layout.replicas == 4
    assert plan.threads_per_worker == 8 and "TF_CONFIG" not in plan.entries[0].env


def test_horovod_tf_gets_horovod_variables_and_no_micro_batches():
    _, plan = _plan(backend="horovod-tf", workers=2)
    assert plan.entries[1].env["HOROVOD_RANK"] == "1"
    with pytest.raises(UnsupportedPoint, match="backward_passes_per_step"):
        RunConfig.make(backend="horovod-tf", model="tiny", backward_passes_per_step=2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backend": "tf-mwms", "collective": "mpi"}, "collective"),
        ({"backend": "tf-ps", "num_ps": 0}, "num_ps"),
        ({"backend": "tf-single", "weights": "imagenet"}, "weights"),
        ({"backend": "keras-fit", "steps_per_execution": float("nan")}, "steps_per_execution"),
    ],
)
def test_bad_tensorflow_options_name_the_key(kwargs, message):
    with pytest.raises((UserError, UnsupportedPoint), match=message):
        RunConfig.make(model="tiny", **kwargs)


def test_tf_single_is_the_tensorflow_baseline():
    spec = BACKENDS.get("tf-single")
    assert spec.reference and spec.max_workers == 1 and spec.framework == "tensorflow"
    for name in ("tf-single", "tf-mirrored", "tf-mwms", "tf-ps", "keras-fit"):
        assert (
            BACKENDS.get(name).install
            == "pip install 'dlscale[tensorflow]' (in a checkout: make tensorflow)"
        )


def test_ls_says_whether_horovod_has_its_tensorflow_binding(tmp_path):
    from dlscale.frameworks.horovod.declare import horovod_tensorflow_build

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = str(venv / "bin" / "python")
    assert horovod_tensorflow_build(python) == "no: make tensorflow"
    record = (
        '{"horovod": "0.28.1", "frameworks": "%s", "controllers": "gloo", "gpu_operations": "none"}'
    )
    (venv / "horovod-build.json").write_text(record % "torch")
    assert "no TensorFlow binding" in horovod_tensorflow_build(python)
    (venv / "horovod-build.json").write_text(record % "torch,tensorflow")
    assert horovod_tensorflow_build(python).startswith(
        "yes: horovod 0.28.1 built for torch,tensorflow"
    )
