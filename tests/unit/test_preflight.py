"""Bad input that used to end in a traceback or a launch now gets one line before launch."""

import json
import shutil
from pathlib import Path

import pytest

from dlscale.cli import main
from dlscale.config import RunConfig
from dlscale.contract.engine import Engine
from dlscale.contract.events import events_path, read_events
from dlscale.contract.layout import usable_cores
from dlscale.contract.records import from_dict
from dlscale.metrics.aggregate import aggregate
from dlscale.metrics.impossible import impossible_figures
from dlscale.preflight import MAX_PROCESSES_PER_CORE, memory_lower_bound_bytes
from dlscale.runtime.schedule import run_schedule
from tests.worker_context import worker_context


def one_line(capsys, argv: list[str]) -> str:
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("dlscale: error:"), err
    return err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--set", "python=/no/such/python"], "no such interpreter"),
        (["--workers", str(MAX_PROCESSES_PER_CORE * usable_cores() + 1)], "per core"),
        (["--batch-size", "100000000"], "GiB of memory"),
        (["--workers", "1099511627776"], "dlscale plans at most 65,536"),
        (["--set", "momentum=nan"], "momentum must be a finite number"),
        (["--set", "weight_decay=-1"], "weight_decay must be >= 0"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_refused_before_launch_with_one_line(tmp_path: Path, capsys, argv, message):
    results = tmp_path / "r"
    err = one_line(capsys, ["run", *argv, "--results", str(results)])
    assert message in err
    assert not results.exists()  # nothing was launched


def test_results_that_is_a_file(tmp_path: Path, capsys):
    afile = tmp_path / "file"
    afile.write_text("")
    assert "is a file" in one_line(capsys, ["run", "--results", str(afile), "--dry-run"])
    err = one_line(capsys, ["run", "--results", str(afile / "sub"), "--dry-run"])
    assert f"is under {afile}, a file" in err


def test_the_resource_guard_can_be_switched_off(tmp_path: Path, capsys):
    workers = MAX_PROCESSES_PER_CORE * usable_cores() + 1
    argv = ["run", "--workers", str(workers), "--dry-run", "--results", str(tmp_path / "r")]
    argv += ["--set", "machine_reference=false"]  # only the points asked for
    assert main([*argv, "--set", "resource_guard=false"]) == 0
    out = capsys.readouterr().out
    assert out.count("-m dlscale.worker") == workers


def test_memory_lower_bound_by_hand():
    cfg = RunConfig(model="resnet44", workers=2, batch_size=64)
    # 2 processes x 100 MiB + 2 x (64 x 3 x 32 x 32 x 4 bytes) x 2 replicas
    assert memory_lower_bound_bytes(cfg) == 2 * 100 * 2**20 + 2 * 64 * 3 * 32 * 32 * 4 * 2


def test_cuda_without_a_gpu_is_refused_before_launch(tmp_path: Path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the probe finds it")
    err = one_line(capsys, ["run", "--device", "cuda", "--results", str(tmp_path / "r")])
    assert "sees no CUDA GPU; use --device cpu" in err


def test_a_microbench_refused_at_its_launch_leaves_no_directory(tmp_path: Path, capsys):
    """A host file that is no host file (here /etc/shadow's shape) is refused when the launcher
    plans the ranks, after the microbench made its run directory: it is removed again."""
    if shutil.which("mpirun") is None:
        pytest.fail("mpirun is missing: scripts/install-openmpi.sh (make test runs it)")
    hostfile = tmp_path / "shadow"
    hostfile.write_text("root:$6$salt$hash:19000:0:99999:7:::\n")
    results = tmp_path / "results"
    argv = [
        "microbench",
        "--backend",
        "torch-ddp",
        "--workers",
        "2",
        "--launcher",
        "mpirun",
        "--set",
        f"hostfile={hostfile}",
        "--sizes",
        "4,64",
        "--results",
        str(results),
    ]
    assert "line 1: not NAME or NAME slots=N" in one_line(capsys, argv)
    assert not results.exists() or list(results.iterdir()) == []


def test_an_empty_study_file_is_refused(tmp_path: Path, capsys):
    for text in ("", 'name = "only a name"\n'):
        study = tmp_path / "s.toml"
        study.write_text(text)
        assert "sets no study key" in one_line(capsys, ["run", str(study)])


class _Diverged(Engine):
    """An engine whose model diverged: NaN losses in training and evaluation (or finite ones
    beyond any loss a model that trains has: ``loss``)."""

    steps_per_epoch = 2
    has_eval = True

    def __init__(self, loss: float = float("nan")) -> None:
        self.loss = loss

    def batches(self, epoch):
        return iter([None, None])

    def step(self, batch):
        return self.loss

    def evaluate(self):
        return 3, 10, self.loss * 10


@pytest.mark.parametrize("loss", [float("nan"), float("inf"), 9.8e32, -2e15])
def test_a_diverged_model_in_epoch_mode_is_recorded_not_crashed(tmp_path: Path, loss):
    """jax-dp at lr 1e12 stepped at 9.8e32 nats, finite: it failed the run as an impossible
    reading of a clock or counter, where it is a diverged model like a NaN one."""
    cfg = RunConfig(model="tiny", backend="torch-single", epochs=2, warmup_steps=0)
    ctx = worker_context(tmp_path, cfg)
    events = ctx.events
    run_schedule(ctx, _Diverged(loss))
    events.close()
    records = read_events(events_path(tmp_path, 0))
    evals = [r for r in records if r["event"] == "eval"]
    windows = [r for r in records if r["event"] == "window"]
    assert [e["loss_sum"] for e in evals] == [None, None] and evals[0]["correct"] == 3
    assert all(w["loss_nonfinite"] and w["loss_sum"] is None for w in windows)
    json.dumps(records, allow_nan=False)  # nothing NaN was stored
    # a diverged run is a completed run that says so, not a failed one: each step's loss is
    # null, and a null loss is no impossible reading
    metrics = aggregate({0: [from_dict(r) for r in records]}, target_accuracy=None)
    assert metrics["loss_diverged"] is True
    assert metrics["train_loss_by_step"] == [None] * sum(w["steps"] for w in windows)
    assert impossible_figures(metrics) == (metrics, None)


def test_a_backend_whose_modules_are_missing_is_refused_with_its_install_command(tmp_path):
    """Checked under the workers' interpreter: here a venv without torch or horovod."""
    import subprocess
    import sys

    from dlscale.contract.errors import UserError
    from dlscale.launchers.base import missing_modules
    from dlscale.preflight import check_requirements

    assert missing_modules(sys.executable, ("json", "no_such_module_xyz")) == ["no_such_module_xyz"]
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    python = str(bare / "bin" / "python")
    assert missing_modules(python, ("json", "torch")) == ["torch"]
    with pytest.raises(UserError) as caught:
        check_requirements(python, "horovod-torch")
    assert str(caught.value) == (
        f"horovod-torch needs torch, horovod, which {python} cannot import; "
        "install it: make horovod"
    )
    check_requirements(sys.executable, "torch-ddp")  # present: no error
    # the launcher's tool: horovodrun is looked for beside the workers' interpreter
    from dlscale.launchers.horovodrun import HorovodrunLauncher

    with pytest.raises(
        UserError, match=r"needs .*bare/bin/horovodrun, which is not installed: make"
    ):
        HorovodrunLauncher().check(python)


def test_loader_processes_count_in_the_resource_guard(tmp_path: Path, capsys):
    from tests.image_data import write_folder

    data = write_folder(tmp_path / "imagenet", classes=2, per_class=2)
    config = RunConfig.make(
        model="tiny", dataset="imagenet", data_dir=str(data), workers=2, batch_size=2,
        options={"loader_workers": 3},
    )  # fmt: skip
    # 2 ranks and their 3 loaders each: 8 interpreters
    assert memory_lower_bound_bytes(config) == 8 * 100 * 2**20 + 2 * 2 * 3 * 32 * 32 * 4 * 2
    loaders = MAX_PROCESSES_PER_CORE * usable_cores()  # one rank with that many loaders
    err = one_line(capsys, ["run", "--backend", "torch-single", "--workers", "1", "--model",
                            "tiny", "--dataset", "imagenet", "--data-dir", str(data),
                            "--set", f"loader_workers={loaders}", "--results",
                            str(tmp_path / "r")])  # fmt: skip
    assert f"needs {loaders + 1} processes" in err and f"{loaders} of them loader processes" in err
