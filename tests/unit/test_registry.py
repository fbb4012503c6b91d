import os
import subprocess
import sys

import pytest

from dlscale.contract.errors import UserError
from dlscale.contract.registry import Registry


def test_lookup_and_listing():
    registry: Registry[int] = Registry("widget")
    registry.register("b", 2)
    registry.register("a", 1)
    assert registry.get("a") == 1
    assert registry.names() == ["a", "b"]
    assert "a" in registry and "c" not in registry
    assert list(registry) == [("a", 1), ("b", 2)]
    with pytest.raises(UserError, match="unknown widget 'c'; choose one of: a, b"):
        registry.get("c")
    registry.register("resnet44", 3)
    with pytest.raises(UserError, match=r"unknown widget 'resnt44'; did you mean resnet44\?$"):
        registry.get("resnt44")  # a typo gets the name it missed, not the list
    assert registry.canonical("ResNet44") == "resnet44"  # a name differing only in case
    assert registry.canonical("RESNET45") == "RESNET45"  # left for get to refuse
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("a", 3)


def test_a_model_twin_is_registered_per_framework(monkeypatch):
    from dlscale.contract.models import MODELS, ModelSpec, register_builder

    spec = ModelSpec(
        name="twin-test",
        description="",
        builders={"torch": "dlscale.frameworks.torch.models.tiny:tiny"},
        input_size=32,
        default_classes=10,
        has_batchnorm=False,
    )
    monkeypatch.setitem(MODELS._entries, "twin-test", spec)  # gone after the test
    register_builder("twin-test", "numpy", "builtins:range")
    assert list(spec.builders) == ["torch", "numpy"]
    assert spec.build(3, "numpy") == range(3)
    with pytest.raises(ValueError, match="already has a numpy builder"):
        register_builder("twin-test", "numpy", "builtins:range")
    with pytest.raises(KeyError, match="no tensorflow builder"):
        spec.build(10, "tensorflow")


def test_the_built_ins_come_through_the_plugin_door():
    """No core module lists them: dlscale's own entry points name each framework folder's
    plugin.py, and the launchers' and data sets', and the first lookup loads them."""
    from importlib import metadata

    from dlscale.contract.backends import BACKENDS
    from dlscale.contract.frameworks import FRAMEWORKS, recorded_packages
    from dlscale.contract.plugins import ENTRY_POINT_GROUP

    ours = {
        ep.name: ep.value
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)
        if ep.value.startswith("dlscale.")
    }
    assert ours == {
        **{
            name: f"dlscale.frameworks.{name}.plugin"
            for name in ("torch", "horovod", "tensorflow", "mxnet", "jax", "deepspeed")
        },
        "launchers": "dlscale.launchers.plugin",
        "datasets": "dlscale.datasets.plugin",
    }
    from dlscale.contract.datasets import DATASETS
    from dlscale.contract.launchers import LAUNCHERS

    assert LAUNCHERS.names() == ["horovodrun", "local", "mpirun", "ray", "slurm", "torchrun"]
    assert DATASETS.names() == [
        "cifar10",
        "digits",
        "imagenet",
        "imagenet-subset",
        "own",
        "python-source",
        "synthetic",
        "token-file",
        "tokens",
    ]
    assert FRAMEWORKS.names() == ["deepspeed", "horovod", "jax", "mxnet", "tensorflow", "torch"]
    frameworks = {spec.framework for _, spec in BACKENDS}
    assert frameworks == {"torch", "tensorflow", "mxnet", "jax"}  # each one's is registered
    from dlscale.contract.models import BUILT_IN, MODELS

    for model in BUILT_IN:  # every built-in framework builds every built-in model
        assert set(MODELS.get(model).builders) == {"torch", "tensorflow", "mxnet", "jax"}
    from dlscale.contract.models import TOKEN_MODELS

    for model in TOKEN_MODELS:  # the GPT's twins; MXNet has no next-token task (refused)
        assert set(MODELS.get(model).builders) == {"torch", "tensorflow", "jax"}
    assert "next-token" not in FRAMEWORKS.get("mxnet").tasks
    assert set(recorded_packages()) >= {
        "numpy",
        "torch",
        "horovod",
        "tensorflow",
        "tensorflow-cpu",
        "tf-keras",
        "keras",
        "mxnet",
        "jax",
        "jaxlib",
        "flax",
        "deepspeed",
    }


def test_a_model_is_counted_on_an_installed_twin_that_can_count():
    from dlscale.contract.frameworks import profiler_for

    assert profiler_for({"torch": "x:y", "tensorflow": "x:y"}).name == "torch"
    assert profiler_for({"tensorflow": "x:y"}) is None  # TensorFlow counts nothing


def test_an_empty_registry_says_the_install_lacks_its_entry_points():
    registry: Registry[int] = Registry("widget")
    with pytest.raises(UserError, match=r"no widget is registered.*reinstall"):
        registry.get("torch-ddp")
    with pytest.raises(UserError, match=r"no widget is registered.*reinstall"):
        registry.listed()  # dlscale ls: the same line, not an empty table
    registry.register("one", 1)
    assert registry.listed() == [("one", 1)]


@pytest.mark.parametrize(
    ("source", "said"),
    [
        (
            "from dlscale.contract.launchers import LAUNCHERS, LauncherSpec\n"
            "LAUNCHERS.register('local', LauncherSpec(name='local', description='x', "
            "implementation='os:getcwd'))\n",
            "plug-in 'shadow_plugin' failed while registering (ValueError: launcher 'local' is "
            "registered twice)",
        ),
        (
            "raise RuntimeError('boom\\x1b]0;title\\x07')\n",
            "failed while registering (RuntimeError: boom\\x1b]0;title\\x07)",
        ),
        ("import no_such_module_xyz\n", "plug-in 'shadow_plugin' cannot be imported"),
    ],
    ids=["takes-a-built-in-name", "raises", "imports-nothing"],
)
def test_a_broken_plugin_is_one_line_naming_it(tmp_path, source, said):
    """A plug-in that fails on import (a name the built-ins hold, any exception) is one line
    naming it, exit 2, with no control character printed; dlscale's own plug-ins are loaded
    first, so the error is the outsider's."""
    (tmp_path / "shadow_plugin.py").write_text(source)
    done = subprocess.run(
        [sys.executable, "-m", "dlscale", "ls", "launchers"],
        env={**os.environ, "DLSCALE_PLUGINS": "shadow_plugin", "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert said in done.stderr
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr


def test_a_framework_has_one_reference_backend():
    """The baseline and the whole-machine point are chosen by framework: a second reference
    backend of one is refused when it registers, naming both."""
    from dlscale.contract.backends import BackendRegistry, BackendSpec

    registry = BackendRegistry("backend")
    common = {"description": "x", "framework": "numpy", "worker": "m:f"}
    registry.register("a-single", BackendSpec(name="a-single", reference=True, **common))
    registry.register("a-dist", BackendSpec(name="a-dist", **common))  # not a reference: fine
    with pytest.raises(ValueError, match=r"'b-single' is a second reference.*'a-single'"):
        registry.register("b-single", BackendSpec(name="b-single", reference=True, **common))
    other = {**common, "framework": "numpyref"}
    registry.register("c-single", BackendSpec(name="c-single", reference=True, **other))


def test_the_workers_import_the_frameworks_module_not_its_name(monkeypatch):
    """A framework whose name is not a module (a FrameworkSpec names the module) is checked
    by the module; one with no FrameworkSpec by its name."""
    from dlscale.contract.frameworks import FRAMEWORKS, FrameworkSpec, framework_module

    assert framework_module("torch") == "torch"
    assert framework_module("no-spec-here") == "no-spec-here"
    monkeypatch.setitem(
        FRAMEWORKS._entries, "numpyref", FrameworkSpec(name="numpyref", module="numpy", packages=())
    )
    assert framework_module("numpyref") == "numpy"


def test_dlscale_env_prints_a_plugins_facts_as_text(tmp_path):
    """A plug-in framework's facts and package names reach `dlscale env` as text: no markup is
    applied and no control character reaches the terminal."""
    (tmp_path / "facts_plugin.py").write_text(
        "from dlscale.contract.frameworks import FRAMEWORKS, FrameworkSpec\n"
        "FRAMEWORKS.register('odd', FrameworkSpec(name='odd', module='json', packages=(),\n"
        "    facts='facts_plugin:facts'))\n"
        "def facts():\n"
        "    return {'odd_note': '[bold]loud[/bold] \\x1b]0;title\\x07 [/x]'}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "dlscale", "env"],
        env={**os.environ, "DLSCALE_PLUGINS": "facts_plugin", "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "[bold]loud[/bold]" in done.stdout and "[/x]" in done.stdout  # shown, not applied
    assert "\x1b" not in done.stdout and "\\x1b]0;title\\x07" in done.stdout
