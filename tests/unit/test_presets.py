"""The paper presets (src/dlscale/presets/: mahon2020, malik2018, nikolaidis2021) at full
scale and at ``scale = local``, and the scales mechanism itself. A reduced preset runs for real
in tests/e2e/test_cli.py."""

import pytest

from dlscale.config.presets import load_preset, preset_names
from dlscale.config.study import apply_scale, expand, load_study_file, parse_set
from dlscale.contract.errors import UserError
from dlscale.launchers.slurm_nodes import node_facts


def _study(name: str, scale: str | None):
    settings, _, _ = load_preset(name)
    name = settings.pop("name")
    settings.pop("description")
    if scale is None:  # the cluster's nodes, as its Slurm would say them (not this machine's)
        settings |= {"cpus_per_node": 64, "gpus_per_node": 4}
    return expand(apply_scale(settings, scale, name), name=name, cores=64)


def test_mahon2020_full_is_resnet44_on_cifar10_on_1_to_12_gpus_in_every_framework():
    study = _study("mahon2020", None)
    points = study.points
    assert {p.model for p in points} == {"resnet44"} and {p.dataset for p in points} == {"cifar10"}
    assert {p.device for p in points} == {"cuda"} and {p.launcher for p in points} == {"slurm"}
    assert {p.workers for p in points if p.backend == "torch-ddp"} == {1, 2, 4, 8, 12}
    frameworks = {p.framework for p in points}
    assert frameworks == {"torch", "tensorflow"}  # MXNet has no GPU build here: skipped, noted
    assert any("mxnet-kv" in note for note in study.skipped)
    assert {p.target_accuracy for p in points} == {0.9} and {p.epochs for p in points} == {30}
    compressed = {(p.backend, p.options.get("compression")) for p in points if p.workers == 12}
    for backend in ("horovod-torch", "horovod-tf", "horovod-keras"):  # Horovod's fp16 axis
        assert {(backend, "none"), (backend, "fp16")} <= compressed
    assert study.repeats.repeats == 3
    # planned from the cluster's nodes (64 CPUs, 4 GPUs), not from this machine: one GPU a
    # rank, 4 ranks a node, 16 threads each, 12 ranks on 3 nodes, the baselines on one
    assert {p.threads_per_worker for p in points} == {16}
    assert {(p.workers, node_facts(p).nodes) for p in points} == {
        (1, 1),
        (2, 1),
        (4, 1),
        (8, 2),
        (12, 3),
    }
    mirrored = [note for note in study.skipped if note.startswith("tf-mirrored at")]
    assert len(mirrored) == 2 and "drives 12 GPUs from one process" in mirrored[1]


def test_malik2018_full_is_three_models_horovod_against_the_ps_batch_64_to_512_to_256_gpus():
    points = _study("malik2018", None).points
    assert {p.model for p in points} == {"alexnet", "googlenet", "resnet50"}
    assert {p.backend for p in points} == {"tf-single", "horovod-tf", "tf-ps"}
    # the paper's parameter server was TF1's synchronous one
    assert {p.options["ps_mode"] for p in points if p.backend == "tf-ps"} == {"sync"}
    assert {p.batch_size for p in points} == {64, 128, 256, 512}
    assert max(p.workers for p in points) == 256 and {p.dataset for p in points} == {"synthetic"}


def test_nikolaidis2021_full_is_cpu_nodes_allreduce_against_ps_sync_against_async():
    points = _study("nikolaidis2021", None).points
    assert {p.device for p in points} == {"cpu"} and {p.threads_per_worker for p in points} == {8}
    modes = {(p.backend, p.options.get("ps_mode") or p.options.get("kvstore")) for p in points}
    for expected in [("torch-ps", "sync"), ("torch-ps", "async"), ("tf-ps", "sync"),
                     ("tf-ps", "async"), ("mxnet-kv", "dist_sync"),
                     ("mxnet-kv", "dist_async")]:  # fmt: skip
        assert expected in modes
    assert {"torch-ddp", "horovod-torch", "tf-mwms", "horovod-mxnet", "tf-ps"} <= {
        p.backend for p in points
    }


@pytest.mark.parametrize("name", ["mahon2020", "malik2018", "nikolaidis2021"])
def test_every_preset_has_a_local_scale_that_fits_this_machine(name):
    full, local = _study(name, None), _study(name, "local")
    assert {p.backend for p in local.points} <= {p.backend for p in full.points} | {
        "mxnet-single", "mxnet-kv", "horovod-mxnet"
    }  # fmt: skip
    assert {p.device for p in local.points} == {"cpu"}
    assert {p.launcher for p in local.points} == {"local"}
    assert max(p.workers for p in local.points) == 2
    assert max(p.layout().size for p in local.points) <= 4  # a parameter server's processes
    assert all(p.epochs is None and p.steps <= 4 for p in local.points)
    assert local.repeats.repeats == 1


def test_a_scale_the_study_lacks_is_one_line_naming_those_it_has(tmp_path):
    settings, _, _ = load_preset("malik2018")
    with pytest.raises(
        UserError, match="no scale 'tiny'; it has: full, imagenet, imagenet-local, local"
    ):
        apply_scale(settings, "tiny", "malik2018")
    assert apply_scale({"model": "tiny"}, "full", "x") == {"model": "tiny"}
    bad = tmp_path / "bad.toml"
    bad.write_text('model = "tiny"\n[scales.local]\nwrokers = 2\n')
    with pytest.raises(UserError, match=r"\[scales.local\]: unknown key 'wrokers'"):
        load_study_file(bad)
    bad.write_text('model = "tiny"\nscales = 3\n')
    with pytest.raises(UserError, match="scales must be tables"):
        load_study_file(bad)
    chosen = tmp_path / "chosen.toml"
    chosen.write_text('model = "tiny"\nscale = "local"\n[scales.local]\nsteps = 2\n')
    assert apply_scale(load_study_file(chosen), None, "chosen")["steps"] == 2
    for text in ('model = "tiny"\nscale = 3\n', 'model = "tiny"\nscale = " "\n'):
        bad.write_text(text)
        with pytest.raises(UserError, match=r"scale must be the name of one of the study's"):
            load_study_file(bad)
    with pytest.raises(UserError, match=r"--set: scale must be the name of one of"):
        parse_set(["scale="])
    bad.write_text('model = "tiny"\nworkers = []\n')
    with pytest.raises(UserError, match=r"key 'workers' has an empty list"):
        load_study_file(bad)


def _narrowed(*argv: str):
    from dlscale.cli import build_parser
    from dlscale.cli.run import study_from

    return study_from(build_parser().parse_args(["run", *argv]))


def test_a_preset_narrowed_to_backends_without_its_options_leaves_them_out():
    """malik2018 sets ps_mode for its parameter server: narrowed to tf-single it runs without
    it, while the same option given on the command line to such a backend is refused."""
    study = _narrowed(
        "--preset", "malik2018", "--set", "scale=local", "--backend", "tf-single",
        "--model", "alexnet", "--set", "machine_reference=false",
    )  # fmt: skip
    assert [(p.backend, p.workers) for p in study.points] == [("tf-single", 1)]
    with pytest.raises(UserError, match="ps_mode: not an option of backend tf-single"):
        _narrowed("--backend", "tf-single", "--set", "ps_mode=sync")
    with pytest.raises(UserError, match="ps_mode: not an option of backend tf-single"):
        _narrowed("--preset", "malik2018", "--backend", "tf-single",
                  "--set", "ps_mode=sync")  # fmt: skip


def test_every_shipped_preset_loads_and_is_named_as_its_file():
    """Each study shipped in src/dlscale/presets/ reads as a study file; its ``name`` (the
    study's name in the results) is the name ``--preset`` and ``ls presets`` give it."""
    names = preset_names()
    assert {"mahon2020", "malik2018", "nikolaidis2021", "quick", "strategies"} <= set(names)
    for name in names:
        settings, origin, known = load_preset(name)
        assert settings["name"] == known == name and origin == f"preset {name}"
        assert settings["description"]
