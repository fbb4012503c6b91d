from pathlib import Path

import pytest

from dlscale.config import RunConfig, expand, load_study_file, parse_set
from dlscale.contract.backends import BACKENDS
from dlscale.contract.errors import UserError


def test_defaults_are_valid_and_derived_values():
    cfg = RunConfig()
    assert cfg.batch_per_worker == 64 and cfg.global_batch == 64
    strong = RunConfig(workers=4, batch_size=256, scaling="strong")
    assert strong.batch_per_worker == 64 and strong.global_batch == 256
    weak = RunConfig(workers=4, batch_size=32, lr=0.1, lr_scaling="linear")
    assert weak.global_batch == 128 and weak.effective_lr == pytest.approx(0.4)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model": "resnet45"}, "unknown model 'resnet45'; did you mean resnet56 or resnet50 or"),
        (
            {"backend": "nope"},
            # every registered backend, whatever registered it
            "unknown backend 'nope'; choose one of: " + ", ".join(BACKENDS.names()),
        ),
        ({"dataset": "imagenet-22k"}, "unknown dataset 'imagenet-22k'; did you mean imagenet?"),
        ({"dataset": "mnist"}, "unknown dataset 'mnist'; choose one of: cifar10"),
        ({"workers": 0}, "workers must be an integer >= 1, got 0"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1"),
        ({"target_accuracy": 0.0}, "target_accuracy must be in (0, 1]"),
        ({"target_accuracy": 90.0}, "target_accuracy must be in (0, 1]"),
        ({"scaling": "medium"}, "scaling must be one of weak, strong"),
        ({"backend": "torch-single", "workers": 2}, "runs at most 1 worker"),
        ({"scaling": "strong", "workers": 3, "batch_size": 64}, "divisible"),
        ({"dataset": "cifar10"}, "needs --data-dir"),
        ({"lr": -1.0}, "lr must be > 0"),
    ],
)
def test_bad_values_name_the_key(kwargs, message):
    with pytest.raises(UserError, match=None) as info:
        RunConfig(**kwargs)
    assert message in str(info.value)


def test_run_id_is_stable_and_ignores_where_and_how_long():
    a = RunConfig(workers=2, model="tiny")
    assert a.run_id() == RunConfig(workers=2, model="tiny", timeout_s=5.0).run_id()
    assert a.run_id() != RunConfig(workers=2, model="tiny", seed=1).run_id()
    assert a.run_id().startswith("tiny-torch-ddp-synthetic-w2-")


def test_study_file_grid_and_unknown_key(tmp_path: Path):
    study = tmp_path / "s.toml"
    study.write_text(
        'name = "g"\nbackend = "torch-ddp"\nmodel = "tiny"\nworkers = [2, 1]\nlr = 1\n'
    )
    settings = load_study_file(study)
    assert settings["lr"] == 1.0 and isinstance(settings["lr"], float)
    points = expand(settings).points
    assert [p.workers for p in points] == [1, 2]  # baselines first
    bad = tmp_path / "bad.toml"
    bad.write_text("modle = 'tiny'\n")
    with pytest.raises(UserError, match="unknown key 'modle'"):
        load_study_file(bad)
    broken = tmp_path / "broken.toml"
    broken.write_text("model = [\n")
    with pytest.raises(UserError, match="not valid TOML"):
        load_study_file(broken)
    with pytest.raises(UserError, match="does not exist"):
        load_study_file(tmp_path / "missing.toml")
    typed = tmp_path / "typed.toml"
    typed.write_text("workers = 'two'\n")
    with pytest.raises(UserError, match="workers must be int"):
        load_study_file(typed)


def test_grid_skips_what_a_backend_cannot_run_and_says_so():
    study = expand(
        {"backend": ["torch-single", "torch-ddp"], "workers": [1, 2], "model": "tiny",
         "device": ["cpu", "cuda"]}
    )  # fmt: skip
    assert [(p.backend, p.workers, p.device) for p in study.points] == [
        ("torch-single", 1, "cpu"),
        ("torch-single", 1, "cuda"),
        ("torch-ddp", 1, "cpu"),
        ("torch-ddp", 1, "cuda"),
        ("torch-ddp", 2, "cpu"),
        ("torch-ddp", 2, "cuda"),
    ]  # torch-single at 2 workers: the grid's shape, unsaid (below)
    mixed = expand({"backend": ["torch-ddp", "mxnet-kv"], "device": ["cpu", "cuda"]})
    assert len(mixed.points) == 3  # mxnet-kv has no cuda: skipped, and said
    assert mixed.skipped == ("mxnet-kv at 1 worker(s): backend mxnet-kv does not run on cuda",)
    with pytest.raises(UserError, match="at most 1 worker"):
        expand({"backend": "torch-single", "workers": 2})


def test_set_overrides():
    assert parse_set(["workers=1,2", "compile=true", "epochs=none", "lr=0.5"]) == {
        "workers": [1, 2],
        "compile": True,
        "epochs": None,
        "lr": 0.5,
    }
    with pytest.raises(UserError, match="unknown key 'wrokers'"):
        parse_set(["wrokers=2"])
    with pytest.raises(UserError, match="write key=value"):
        parse_set(["workers"])
    with pytest.raises(UserError, match="compile must be bool"):
        parse_set(["compile=maybe"])


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"lr": float("nan")}, "lr must be a finite number"),
        ({"lr": float("inf")}, "lr must be a finite number"),
        ({"timeout_s": float("inf")}, "timeout_s must be a finite number"),
        ({"momentum": float("nan")}, "momentum must be a finite number"),
        ({"bucket_mb": float("nan")}, "bucket_mb must be a finite number"),
        ({"bucket_mb": 0.0}, "bucket_mb must be > 0"),
        ({"num_servers": 0, "backend": "torch-ps"}, "num_servers must be >= 1"),
        ({"compression": "zip"}, "backend torch-ddp accepts compression = none, fp16"),
        ({"ps_mode": "async"}, "ps_mode: not an option of backend torch-ddp"),
        ({"bucket_mb": "big"}, "bucket_mb must be float"),
    ],
)
def test_plugin_options_are_validated_by_their_plugin(settings, message):
    with pytest.raises(UserError) as info:
        RunConfig.make(model="tiny", **settings)
    assert message in str(info.value)


def test_options_are_resolved_and_part_of_the_run_id():
    ddp = RunConfig.make(model="tiny", workers=2)
    assert ddp.options["bucket_mb"] == 25.0 and ddp.options["compression"] == "none"
    assert ddp.options["samples_per_epoch"] == 50000  # the synthetic data set's option
    explicit = RunConfig.make(model="tiny", workers=2, bucket_mb=25)
    assert explicit.run_id() == ddp.run_id()  # a default given or not is the same point
    assert RunConfig.make(model="tiny", workers=2, bucket_mb=1).run_id() != ddp.run_id()
    single = RunConfig.make(model="tiny", backend="torch-single")
    assert "bucket_mb" not in single.options
    # Stored grouped by plug-in kind and read back to the same config.
    stored = ddp.to_dict()
    assert stored["options"]["backend"]["bucket_mb"] == 25.0
    assert stored["options"]["dataset"] == {"samples_per_epoch": 50000}
    assert RunConfig.from_dict(stored) == ddp


def test_threads_are_part_of_a_points_identity():
    one = RunConfig(model="tiny", threads_per_worker=1)
    two = RunConfig(model="tiny", threads_per_worker=2)
    assert one.run_id() != two.run_id()
    from dlscale.contract.run_config import NOT_MATCHED_KEYS

    assert "threads_per_worker" not in NOT_MATCHED_KEYS
    assert {"repeat_id", "timeout_s", "python", "save_params"} <= set(NOT_MATCHED_KEYS)


def test_a_grid_over_backends_with_one_backends_option():
    study = expand(
        {
            "backend": ["torch-single", "torch-ddp", "torch-ring"],
            "compression": ["none", "powersgd"],
            "model": "tiny",
        }
    )
    points = [(p.backend, p.options.get("compression")) for p in study.points]
    assert points == [
        ("torch-single", None),
        ("torch-ddp", "none"),
        ("torch-ddp", "powersgd"),
        ("torch-ring", "none"),
    ]
    # torch-ring declares compression but has no powersgd: said; torch-single has no
    # compression at all: the axis does not apply to it (one point, nothing to say)
    (note,) = study.skipped
    assert note.startswith("torch-ring") and "powersgd" in note


def test_an_option_axis_spans_only_the_backends_that_declare_it():
    study = expand(
        {
            "backend": ["torch-ddp", "torch-ps", "mxnet-kv"],
            "ps_mode": ["sync", "async"],
            "kvstore": ["dist_sync", "dist_async"],
            "model": "tiny",
        }
    )
    points = [(p.backend, p.options.get("ps_mode"), p.options.get("kvstore")) for p in study.points]
    assert points == [
        ("torch-ddp", None, None),
        ("torch-ps", "sync", None),
        ("torch-ps", "async", None),
        ("mxnet-kv", None, "dist_sync"),
        ("mxnet-kv", None, "dist_async"),
    ]
    assert study.skipped == ()


def test_an_option_value_no_plugin_accepts_is_an_error_not_a_skip():
    with pytest.raises(UserError) as info:
        expand({"backend": ["torch-single", "torch-ddp"], "compression": "zip", "model": "tiny"})
    assert "no plug-in accepts compression = 'zip'" in str(info.value)
    assert "backend torch-ddp accepts compression = none, fp16, bf16, powersgd" in str(info.value)
    # a value some plug-in takes is a point to skip where it does not apply
    study = expand({"backend": ["torch-ddp", "torch-ring"], "compression": "powersgd"})
    assert [p.backend for p in study.points] == ["torch-ddp"] and len(study.skipped) == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [("true", True), (" Yes ", True), ("on", True), ("1", True), ("false", False), ("OFF", False),
     ("0", False), ("no", False), (True, True), (False, False)],
)  # fmt: skip
def test_one_parser_reads_a_bool_the_same_for_core_keys_settings_and_options(text, expected):
    """A core key (save_params), a study setting (machine_reference) and a plug-in option
    (channels_last) take the same words, through options.parse_value."""
    from dlscale.config.repeats import coerce_study
    from dlscale.config.study import coerce
    from dlscale.contract.options import Option

    assert coerce("save_params", text) is expected
    assert coerce_study("machine_reference", text, origin="--set") is expected
    assert Option(name="x", type="bool", default=False, help="").parse(text) is expected


@pytest.mark.parametrize("text", ["maybe", "2", "", 1, 0.0, None])
def test_anything_else_is_one_line_naming_the_key_for_each_reader(text):
    from dlscale.config.repeats import coerce_study
    from dlscale.config.study import coerce
    from dlscale.contract.options import Option

    for read, label in (
        (lambda: coerce("save_params", text), "save_params must be bool"),
        (
            lambda: coerce_study("machine_reference", text, origin="--set"),
            "--set: machine_reference must be bool",
        ),
        (
            lambda: Option(name="x", type="bool", default=False, help="").parse(text),
            "x must be bool",
        ),
    ):
        with pytest.raises(UserError, match=label):
            read()


def test_a_plugin_declares_its_options_once_and_reads_them_typed():
    """The Options the core validates come from the plug-in's dataclass, and its code gets the
    resolved values as that dataclass (what --set gave, parsed, defaults filled in)."""
    from dlscale.contract.options import declared
    from dlscale.frameworks.torch.options import DDP_OPTIONS, DDPOptions

    assert declared(DDPOptions) == DDP_OPTIONS
    bucket = next(o for o in DDP_OPTIONS if o.name == "bucket_mb")
    assert (bucket.type, bucket.default, bucket.minimum) == ("float", 25.0, 0.0)
    point = expand({"backend": "torch-ddp", "workers": 2, **parse_set(["bucket_mb=5"])}).points[0]
    options = point.typed(DDPOptions)
    assert options == DDPOptions(bucket_mb=5.0)  # every other field at its default
    assert isinstance(options.bucket_mb, float) and options.compression == "none"


def test_a_worker_limit_is_said_only_where_no_backend_runs_that_many_workers():
    # torch-single beside torch-ddp at 1 and 2 workers: the grid's shape, nothing to say
    quiet = expand({"backend": ["torch-single", "torch-ddp"], "model": "tiny", "workers": [1, 2]})
    assert quiet.skipped == () and len(quiet.points) == 3
    # alone at 1 and 2 workers, the 2 runs nowhere: that is worth a note
    alone = expand({"backend": ["torch-single"], "model": "tiny", "workers": [1, 2]})
    (note,) = alone.skipped
    assert "torch-single at 2 worker(s)" in note and "at most 1 worker(s)" in note


def test_a_name_differing_only_in_case_is_the_registered_one_and_its_point():
    assert (
        RunConfig(model="ResNet44", backend="Torch-DDP", workers=2).run_id()
        == RunConfig(model="resnet44", backend="torch-ddp", workers=2).run_id()
    )


def test_worker_counts_as_a_range_are_the_powers_of_two_in_every_command():
    from dlscale.cli.predict import parse_workers
    from dlscale.config.worker_counts import worker_range

    assert worker_range("1..8") == [1, 2, 4, 8] == parse_workers("1..8")
    assert worker_range("3..20") == [4, 8, 16]
    with pytest.raises(UserError, match="no power of 2 lies from 5 to 7"):
        worker_range("5..7")
    for text in ("0..4", "a..4", "4..", "8..2", "1..4..8"):
        with pytest.raises(UserError, match=r"give A\.\.B"):
            worker_range(text)


def test_a_one_worker_point_runs_on_one_node_and_is_the_baseline_of_every_node_count():
    """torchrun's nnodes spreads a point's processes over nodes, as workers says how many: the
    study's 1-worker points (its baseline, the whole-machine reference) run on one node, where
    nnodes = 2 could not split them (the command of docs/clusters.md failed so), and each is
    matched to the 2-node points as their baseline."""
    from dlscale.metrics.scaling import baseline_key, machine_key

    settings = {"backend": "torch-ddp", "workers": [1, 4], "launcher": "torchrun", "nnodes": 2}
    study = expand({**settings, "machine_reference": True}, cores=8)
    nodes = {(p.backend, p.workers): p.options["nnodes"] for p in study.points}
    assert nodes == {("torch-single", 1): 1, ("torch-ddp", 1): 1, ("torch-ddp", 4): 2}

    def row(point: RunConfig) -> dict:
        flat = {k: v for k, v in point.to_dict().items() if k != "options"} | point.options
        return {"config": flat, "framework": "torch", "threads_per_worker": 2}

    one, four = (row(p) for p in study.points if p.backend == "torch-ddp")
    assert baseline_key(one) == baseline_key(four) and machine_key(one) == machine_key(four)
    other = row(RunConfig.make(backend="torch-ddp", workers=4, launcher="torchrun", nnodes=2,
                               model="resnet20"))  # fmt: skip
    assert machine_key(other) != machine_key(four)  # another model is other work
    # an emulated network: the 1-worker points have none (a single worker sends nothing)
    linked = expand({**settings, "network": "100mbit", "machine_reference": True}, cores=8)
    links = {(p.backend, p.workers): p.options["network"] for p in linked.points}
    assert links == {("torch-single", 1): "", ("torch-ddp", 1): "", ("torch-ddp", 4): "100mbit"}
