from pathlib import Path

import pytest

from dlscale.config import RunConfig, expand, load_study_file, parse_set
from dlscale.errors import UserError


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
        ({"model": "resnet45"}, "unknown model 'resnet45'; choose one of: alexnet"),
        (
            {"backend": "nope"},
            "unknown backend 'nope'; choose one of: torch-ddp, torch-ps, torch-ring, torch-single",
        ),
        ({"dataset": "imagenet"}, "unknown dataset 'imagenet'; choose one of: cifar10"),
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
    study = expand({"backend": ["torch-single", "torch-ddp"], "workers": [1, 2], "model": "tiny"})
    assert [(p.backend, p.workers) for p in study.points] == [
        ("torch-single", 1),
        ("torch-ddp", 1),
        ("torch-ddp", 2),
    ]
    assert study.skipped == (
        "torch-single at 2 worker(s): backend torch-single runs at most 1 worker(s), got "
        "workers=2; use torch-ddp for more",
    )
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
