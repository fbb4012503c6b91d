"""A model or script of the user's own: how its name is read, located and refused, and how
a script's steps become windows (the real recorder, writing a real events file)."""

import re
from pathlib import Path

import pytest

from dlscale.cli.run import script_backend
from dlscale.contract.errors import UnsupportedPoint, UserError
from dlscale.contract.events import EventWriter, read_records
from dlscale.contract.layout import Addresses
from dlscale.contract.models import MODELS
from dlscale.contract.records import Window
from dlscale.contract.run_config import RunConfig
from dlscale.contract.user_models import ScriptModelSpec, UserModelSpec, is_user_model
from dlscale.runtime.context import WorkerContext
from dlscale.runtime.script_run import script_batch_size
from dlscale.runtime.script_steps import MeasuredEnough, StepRecorder, mark_step

MODEL = "import torch\n\ndef build(num_classes):\n    return torch.nn.Linear(4, num_classes)\n"


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_names_of_the_users_kind():
    assert is_user_model("mymodels:build")
    assert is_user_model("pkg.nets:resnet_9")
    assert is_user_model("models/net.py:build")
    assert is_user_model("train.py")
    for other in ("resnet44", "a:b:c", "x.py:", ":f", "mod:1f", "bad\nname.py", "a b:c"):
        assert not is_user_model(other), other


def test_module_file_and_script_resolve(here: Path):
    (here / "mymodels.py").write_text(MODEL)
    (here / "sub").mkdir()
    (here / "sub" / "net.py").write_text(MODEL)
    (here / "train.py").write_text("print('train')\n")
    module = MODELS.get("mymodels:build")
    assert isinstance(module, UserModelSpec)
    assert module.module == "mymodels" and module.path == str(here / "mymodels.py")
    assert module.builders == {"torch": "mymodels:build"} and not module.builtin
    file = MODELS.get("sub/net.py:build")
    assert isinstance(file, UserModelSpec) and file.module is None
    script = MODELS.get("train.py")
    assert isinstance(script, ScriptModelSpec) and script.path == str(here / "train.py")


def test_package_submodule(here: Path):
    (here / "pkg").mkdir()
    (here / "pkg" / "__init__.py").write_text("")
    (here / "pkg" / "nets.py").write_text(MODEL)
    spec = MODELS.get("pkg.nets:build")
    assert spec.path == str(here / "pkg" / "nets.py")
    with pytest.raises(UserError, match="defines no top-level 'nope'"):
        MODELS.get("pkg.nets:nope")


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("mymodels:nope", "defines no top-level 'nope'"),
        ("nomodule:build", "module nomodule not found"),
        ("random:build", "is Python's own"),
        ("sys:build", "built into Python"),
        ("missing.py:build", "model file missing.py not found"),
        ("missing.py", "training script missing.py not found"),
        ("mymodels.nets:build", "is not a package"),
        (
            "bogus",
            "or your own (MODULE:FUNCTION, FILE.py:FUNCTION, LIBRARY:NAME as dlscale ls "
            "models lists, or --script FILE.py)",
        ),
    ],
)
def test_refused_with_one_line(here: Path, name: str, said: str):
    (here / "mymodels.py").write_text(MODEL)
    with pytest.raises(UserError, match=said.replace("(", r"\(").replace(")", r"\)")):
        MODELS.get(name)


def test_a_users_module_named_like_an_installed_one_is_refused(here: Path):
    (here / "numpy.py").write_text(MODEL)
    with pytest.raises(UserError, match=r"has the name of .*numpy.*which Python imports first"):
        MODELS.get("numpy:build")


def test_an_edited_model_or_script_is_a_new_point(here: Path):
    (here / "mymodels.py").write_text(MODEL)
    (here / "train.py").write_text("print(1)\n")
    before = RunConfig.make(model="mymodels:build").run_id()
    script = dict(model="train.py", backend="torch-script", dataset="own")
    script_before = RunConfig.make(**script).run_id()
    assert before.startswith("mymodels_build-torch-ddp-synthetic-w1-")
    assert script_before.startswith("train.py-torch-script-own-w1-")
    (here / "mymodels.py").write_text(MODEL + "# edited\n")
    (here / "train.py").write_text("print(2)\n")
    MODELS._resolved.clear()  # a new command resolves the names again
    assert RunConfig.make(model="mymodels:build").run_id() != before
    assert RunConfig.make(**script).run_id() != script_before


def test_scripts_and_models_keep_to_their_backends(here: Path):
    (here / "mymodels.py").write_text(MODEL)
    (here / "train.py").write_text("print(1)\n")
    with pytest.raises(UnsupportedPoint, match="is a training script: run it with a script"):
        RunConfig.make(model="train.py", dataset="own")
    with pytest.raises(UnsupportedPoint, match="runs training scripts"):
        RunConfig.make(backend="torch-script", dataset="own")
    with pytest.raises(UserError, match="reads its own data"):
        RunConfig.make(model="train.py", backend="torch-script")
    with pytest.raises(UserError, match="reads its own data"):
        RunConfig.make(dataset="own")
    with pytest.raises(UserError, match="scales weakly only"):
        RunConfig.make(
            model="train.py", backend="torch-script", dataset="own", scaling="strong", workers=2
        )
    with pytest.raises(UnsupportedPoint, match="is a torch model, which tensorflow"):
        RunConfig.make(model="mymodels:build", backend="tf-single")


@pytest.mark.parametrize(
    ("args", "batch"),
    [
        (["--epochs", "2", "--batch-size", "16"], 16),
        (["--batch_size=8"], 8),
        (["-b", "4", "--lr", "0.1"], 4),
        (["--epochs", "2"], None),
    ],
)
def test_the_scripts_batch_size(args: list[str], batch: int | None):
    assert script_batch_size(args) == batch


@pytest.mark.parametrize("args", [["--batch-size"], ["--batch-size", "x"], ["-b=0"]])
def test_a_bad_batch_size_is_refused(args: list[str]):
    with pytest.raises(UserError, match="is not a positive integer"):
        script_batch_size(args)


def _recorder(
    tmp_path: Path, *, run_to_end: bool = False, synchronize=None, set_sync=None, **keys
) -> StepRecorder:
    (tmp_path / "train.py").write_text("print(1)\n")
    cfg = RunConfig.make(
        model=str(tmp_path / "train.py"),
        backend="torch-script",
        dataset="own",
        batch_size=8,
        **keys,
    )
    ctx = WorkerContext(
        config=cfg,
        run_dir=tmp_path,
        rank=0,
        local_rank=0,
        layout=cfg.layout(),
        addresses=Addresses(hosts=["127.0.0.1"], ports=[1]),
        threads=1,
        events=EventWriter(tmp_path / "events.rank0.jsonl", 0),
    )
    return StepRecorder(
        ctx,
        cfg.batch_per_worker,
        run_to_end=run_to_end,
        synchronize=synchronize,
        set_sync=set_sync,
    )


def _windows(tmp_path: Path, recorder: StepRecorder) -> list[Window]:
    recorder.ctx.events.close()
    records = read_records(tmp_path / "events.rank0.jsonl")
    return [r for r in records if isinstance(r, Window)]


def test_steps_become_windows_after_the_warmup(tmp_path: Path):
    recorder = _recorder(tmp_path, warmup_steps=2, steps=3, windows=2)
    for _ in range(2 + 3 + 2):
        recorder.stepped()
    with pytest.raises(MeasuredEnough):  # the 6th timed step ends the last window
        recorder.stepped()
    windows = _windows(tmp_path, recorder)
    assert [(w.index, w.steps, w.samples) for w in windows] == [(0, 3, 24), (1, 3, 24)]
    assert all(len(w.step_ms or []) == 3 for w in windows)
    assert all(w.duration_s == pytest.approx(sum(w.step_ms or []) / 1e3) for w in windows)


def test_the_device_is_synchronized_at_window_boundaries_only(tmp_path: Path):
    """On a GPU the clock is read after the queued work is done at each window's start and
    end, and at no step between them (no host-device sync per step)."""
    synced: list[int] = []
    recorder = _recorder(
        tmp_path, warmup_steps=2, steps=3, windows=2,
        synchronize=lambda: synced.append(recorder.count),
    )  # fmt: skip
    with pytest.raises(MeasuredEnough):
        for _ in range(2 + 3 + 3):
            recorder.stepped()
    # step 2 ends the warm-up (window 0 starts), 5 ends window 0 (window 1 starts), 8 ends it
    assert synced == [2, 5, 8]
    assert len(_windows(tmp_path, recorder)) == 2


def test_the_probe_follows_the_windows_in_abba_order(tmp_path: Path):
    """After the last window, a warm-up step of each kind, then 2 pairs ABBA (synchronized,
    unsynchronized, unsynchronized, synchronized), each kind's times in its own window, the
    synchronization back on, then the script is stopped."""
    switched: list[bool] = []
    recorder = _recorder(
        tmp_path, warmup_steps=1, steps=2, windows=1, workers=2, comm_probe_steps=2,
        set_sync=lambda on: switched.append(on) or True,
    )  # fmt: skip
    for _ in range(1 + 2 + 5):
        recorder.stepped()
    with pytest.raises(MeasuredEnough):  # the probe's 6th step ends it
        recorder.stepped()
    assert switched == [True, False, False, True, True, False, True]
    windows = _windows(tmp_path, recorder)
    assert [(w.kind, w.steps, w.samples) for w in windows] == [
        ("measure", 2, 16),
        ("probe", 2, 16),
        ("nosync", 2, 16),
    ]


@pytest.mark.parametrize(
    ("keys", "found"),
    [({"workers": 1}, True), ({"workers": 2, "run_to_end": True}, True),
     ({"workers": 2, "comm_probe_steps": 0}, True), ({"workers": 2}, False)],
)  # fmt: skip
def test_no_probe_where_it_cannot_or_must_not_run(tmp_path: Path, keys: dict, found: bool):
    """One worker synchronizes nothing; a script that runs on to its end must not drift;
    no DDP module to switch (a Horovod script): the windows alone, and the script stops."""
    keys = {"warmup_steps": 1, "steps": 2, "windows": 1, **keys}
    recorder = _recorder(tmp_path, set_sync=lambda on: found, **keys)
    for _ in range(2):
        recorder.stepped()
    if keys.get("run_to_end"):
        recorder.stepped()  # measured: no stop, no probe
    else:
        with pytest.raises(MeasuredEnough):
            recorder.stepped()
    assert [w.kind for w in _windows(tmp_path, recorder)] == ["measure"]


def test_mark_step_takes_over_from_the_optimizer(tmp_path: Path):
    recorder = _recorder(tmp_path, warmup_steps=1, steps=2, windows=1, run_to_end=True)
    recorder.install()
    try:
        recorder.stepped()  # forgotten once the script marks its own steps
        mark_step(5)
        recorder.stepped()  # not counted any more
        mark_step(5)
        mark_step(3)
        mark_step(7)  # measured already: the script runs on to its end
    finally:
        recorder.uninstall()
    mark_step(1)  # outside a run: nothing
    windows = _windows(tmp_path, recorder)
    assert [(w.steps, w.samples) for w in windows] == [(2, 8)]


def test_a_script_that_ends_too_soon_says_so(tmp_path: Path):
    recorder = _recorder(tmp_path, warmup_steps=3, steps=10)
    for _ in range(5):
        recorder.stepped()
    with pytest.raises(
        UserError, match=re.escape("train.py ended after 5 optimizer steps; measuring")
    ):
        recorder.finish("train.py")
    (tmp_path / "quiet").mkdir()
    silent = _recorder(tmp_path / "quiet")
    with pytest.raises(UserError, match=re.escape("can mark its steps with dlscale.mark_step")):
        silent.finish("train.py")


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "8"])
def test_mark_step_refuses_a_bad_count(tmp_path: Path, bad: object):
    recorder = _recorder(tmp_path, warmup_steps=1, steps=2)
    recorder.marked(1)
    with pytest.raises(UserError, match="positive number of samples"):
        recorder.marked(bad)  # type: ignore[arg-type]


def test_a_wrapped_optimizers_step_counts_once(tmp_path: Path):
    """Horovod's DistributedOptimizer is a subclass whose step calls its base class's, and
    torch's global hooks fire for both (seen: 2 per step with Horovod 0.28.1): one step."""
    import torch

    from dlscale.frameworks.torch.script import _StepHooks

    class Wrapped(torch.optim.SGD):
        def step(self, closure=None):  # type: ignore[override]
            return super().step(closure)

    recorder = _recorder(tmp_path, warmup_steps=1, steps=50)
    hooks = _StepHooks(recorder.ctx, recorder, tmp_path / "train.py", first=True)
    try:
        weight = torch.zeros(2, requires_grad=True)
        plain = torch.optim.SGD([weight], lr=0.1)
        plain.step()
        wrapped = Wrapped([weight], lr=0.1)
        for _ in range(3):
            wrapped.step()
    finally:
        hooks.remove()
    assert recorder.count == 4
    plain.step()  # hooks removed: not counted
    assert recorder.count == 4
    recorder.ctx.events.close()
    strategy = [r for r in read_records(tmp_path / "events.rank0.jsonl") if r.event == "strategy"]
    assert [(s.gradient_bytes, s.facts["optimizer"]) for s in strategy] == [(8, "SGD")]


@pytest.mark.parametrize(
    ("source", "backend"),
    [
        ("import torch\nimport torch.distributed as dist\n", "torch-script"),
        ("import horovod.torch as hvd\nimport torch\n", "horovod-script"),
        ("from horovod import torch as hvd\n", "horovod-script"),
        ("import tensorflow as tf\n", "tf-script"),
        ("import keras\n", "tf-script"),
        ("import tensorflow as tf\nimport torch\n", "torch-script"),
        ("print('no framework')\n", "torch-script"),
        ("this is not python(\n", "torch-script"),
    ],
)
def test_the_backend_a_scripts_imports_call_for(tmp_path: Path, source: str, backend: str):
    script = tmp_path / "train.py"
    script.write_text(source)
    assert script_backend(script) == backend


def test_a_script_given_another_batch_than_the_point_is_refused(tmp_path: Path):
    from dlscale.runtime.script_run import run_script

    recorder = _recorder(tmp_path, script_args="--batch-size 16")  # the point's batch: 8
    with pytest.raises(UserError, match="is given --batch-size 16 but the point's batch_size"):
        run_script(recorder.ctx, {}, lambda recorder, path: lambda: None)


@pytest.mark.parametrize(
    ("source", "frameworks"),
    [
        ("import torch.nn as nn\n\ndef build(n):\n    return nn.Linear(4, n)\n", {"torch"}),
        ("import tensorflow as tf\n\ndef build(n):\n    return tf.keras.Sequential()\n",
         {"tensorflow"}),
        ("def build(n):\n    from tf_keras import Sequential\n    return Sequential()\n",
         {"tensorflow"}),
        ("from mxnet import gluon\n\ndef build(n):\n    return gluon.nn.Dense(n)\n", {"mxnet"}),
    ],
)  # fmt: skip
def test_a_models_framework_is_read_from_its_imports(here: Path, source: str, frameworks):
    module = f"nets_{'_'.join(sorted(frameworks))}"  # a name each: a process resolves one once
    (here / f"{module}.py").write_text(source)
    assert set(MODELS.get(f"{module}:build").builders) == frameworks


def test_a_model_that_imports_no_framework_is_offered_to_every_engine(here: Path):
    """Made somewhere dlscale does not look (a helper of the user's): every framework that
    builds models may take it, and its engine checks what it gets; never Horovod's, whose
    backends train the framework they run on."""
    (here / "helpers.py").write_text(
        "import torch\n\ndef make():\n    return torch.nn.Linear(1, 1)\n"
    )
    (here / "nets_any.py").write_text(
        "from helpers import make\n\ndef build():\n    return make()\n"
    )
    builders = set(MODELS.get("nets_any:build").builders)
    assert {"torch", "tensorflow", "mxnet"} <= builders and "horovod" not in builders


def test_a_models_output_must_be_one_row_of_classes_per_image():
    from dlscale.contract.user_models import classes_from_output, refused_input

    assert classes_from_output("m:f", (2, 7), "synthetic", None) == 7
    with pytest.raises(UserError, match=r"gives \(2, 3, 4\) for 2 images"):
        classes_from_output("m:f", (2, 3, 4), "synthetic", None)
    with pytest.raises(UserError, match="gives list for 2 images"):
        classes_from_output("m:f", "list", "synthetic", None)
    with pytest.raises(UserError, match="predicts 7 classes; data set digits has 10"):
        classes_from_output("m:f", (2, 7), "digits", 10)
    error = RuntimeError("Traceback (most recent call last):\n  File x.cc\nCheck failed: 4 <= 2\n")
    said = str(refused_input("m:f", 2, error))
    assert "\n" not in said and "(RuntimeError: Check failed: 4 <= 2)" in said
