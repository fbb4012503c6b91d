"""The layer rules of pyproject.toml's [tool.importlinter], checked by `make test` with
lint-imports: the list of core modules stays whole, every rule holds on the tree, and each rule
catches an import planted where it forbids one (inside a function: lazy imports count)."""

from __future__ import annotations

import pkgutil
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import dlscale

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")
CONTRACTS = {
    c["id"]: c
    for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"
    ]
}


def lint(root: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    only = [arg for contract in contracts for arg in ("--contract", contract)]
    return subprocess.run(
        [str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache", *only],
        cwd=root,
        env={"PYTHONPATH": str(root / "src"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


TOP = {m.name for m in pkgutil.iter_modules(dlscale.__path__)} - {"__main__"}


def test_every_core_module_is_held_to_the_core_rule():
    """A module added to the core later is covered, or this fails naming it."""
    listed = {
        m.removeprefix("dlscale.") for m in CONTRACTS["core-imports-no-framework"]["source_modules"]
    }
    assert TOP - {"frameworks"} - listed == set(), "add these to core-imports-no-framework"
    assert listed - TOP == set()


def test_every_package_has_its_layer():
    """A package added later is given a layer, or this fails naming it."""
    layered = {name.strip() for layer in CONTRACTS["layers"]["layers"] for name in layer.split("|")}
    assert TOP - layered == set(), "give these a layer in pyproject.toml"
    assert layered - TOP == set()
    assert CONTRACTS["layers"]["layers"][-1] == "contract"  # the contract is at the bottom


def test_the_tree_keeps_every_rule():
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout[-3000:]
    assert f"{len(CONTRACTS)} kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("contract", "module", "imported"),
    [
        ("layers", "contract/options.py", "dlscale.config.study"),
        ("layers", "contract/run_config.py", "dlscale.runtime.environment"),
        ("layers", "runtime/context.py", "dlscale.store.results"),
        ("layers", "store/results.py", "dlscale.metrics.scaling"),
        ("layers", "launchers/torchrun.py", "dlscale.preflight"),
        ("no-cycles", "runtime/checkpoint.py", "dlscale.store.results"),
        ("no-cycles", "perfmodel/costs.py", "dlscale.metrics.units"),
        ("no-cycles", "frameworks/torch/ddp.py", "dlscale.frameworks.horovod.session"),
        ("core-imports-no-framework", "cli/report.py", "dlscale.frameworks.horovod.session"),
        ("core-imports-no-framework", "cli/ls.py", "dlscale.frameworks.tensorflow.models"),
        ("frameworks-independent", "frameworks/torch/ddp.py", "dlscale.frameworks.mxnet.sgd"),
        (
            "frameworks-independent",
            "frameworks/mxnet/loop.py",
            "dlscale.frameworks.tensorflow.data",
        ),
        (
            "frameworks-independent",
            "frameworks/tensorflow/loop.py",
            "dlscale.frameworks.torch.weights",
        ),
        (
            "frameworks-independent",
            "frameworks/tensorflow/strategies.py",
            "dlscale.frameworks.horovod.session",
        ),
        (
            "frameworks-independent",
            "frameworks/torch/plugin.py",
            "dlscale.frameworks.horovod.declare",
        ),
    ],
)
def test_an_import_planted_against_a_rule_breaks_it(tmp_path, contract, module, imported):
    shutil.copytree(ROOT / "src" / "dlscale", tmp_path / "src" / "dlscale")
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with (tmp_path / "src" / "dlscale" / module).open("a") as planted:
        planted.write(f"\n\ndef _planted() -> None:\n    import {imported}  # noqa: F401\n")
    result = lint(tmp_path, contract)  # that rule alone sees it
    assert result.returncode != 0 and "BROKEN" in result.stdout, result.stdout[-2000:]
    if contract == "no-cycles":  # names the packages of the cycle, by the import to cut
        here = module.split("/")[1 if module.startswith("frameworks/") else 0].removesuffix(".py")
        there = imported.split(".")[2 if imported.startswith("dlscale.frameworks.") else 1]
        assert {f".{here} -> .{there}", f".{there} -> .{here}"} & set(_cuts(result.stdout))
    else:
        assert imported in result.stdout  # and names the import


def _cuts(report: str) -> list[str]:
    """The imports an acyclic_siblings report proposes to cut: lines ``- .a -> .b (n imports)``."""
    return [line[2:].partition(" (")[0] for line in report.splitlines() if line.startswith("- .")]


def test_a_new_framework_folder_must_be_placed_and_is_then_held_to_independence(tmp_path):
    """A folder added under frameworks/ breaks the rule until it is given its place (the rule
    is exhaustive); placed beside the engines, importing another framework's folder breaks
    it."""
    shutil.copytree(ROOT / "src" / "dlscale", tmp_path / "src" / "dlscale")
    new = tmp_path / "src" / "dlscale" / "frameworks" / "newcomer"
    new.mkdir()
    (new / "__init__.py").write_text("")
    (new / "engine.py").write_text("from dlscale.contract.engine import Engine  # noqa: F401\n")
    config = (ROOT / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(config)
    unplaced = lint(tmp_path, "frameworks-independent")
    assert unplaced.returncode != 0 and "dlscale.frameworks.newcomer" in unplaced.stdout
    placed = config.replace(
        '"torch | tensorflow | mxnet | jax"', '"torch | tensorflow | mxnet | jax | newcomer"'
    )
    assert placed != config
    (tmp_path / "pyproject.toml").write_text(placed)
    assert lint(tmp_path, "frameworks-independent").returncode == 0
    (new / "engine.py").write_text("import dlscale.frameworks.torch.loop  # noqa: F401\n")
    result = lint(tmp_path, "frameworks-independent")
    assert result.returncode != 0 and "dlscale.frameworks.newcomer.engine" in result.stdout


def test_a_new_top_level_package_must_be_given_a_layer(tmp_path):
    shutil.copytree(ROOT / "src" / "dlscale", tmp_path / "src" / "dlscale")
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "src" / "dlscale" / "newpackage.py").write_text("")
    result = lint(tmp_path, "layers")
    assert result.returncode != 0 and "dlscale.newpackage" in result.stdout
