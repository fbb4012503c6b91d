"""The studies shipped with dlscale (issue 71): ``dlscale run --preset NAME`` and ``dlscale ls
presets`` from any directory, after a plain (not editable) install of the wheel, whose
members the presets are; a name that is none of them, or a preset beside a study file, is
refused in one line."""

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from dlscale.config.presets import preset_descriptions, preset_names

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e

PAPERS = ("mahon2020", "malik2018", "nikolaidis2021", "quick")


def _wheel(into: Path) -> Path:
    """dlscale's wheel, built from a copy of the tree (the checkout gets no build folder),
    with this environment's setuptools: nothing is downloaded."""
    source = into / "source"
    shutil.copytree(ROOT / "src", source / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))  # fmt: skip
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "-q", "-w", str(into / "wheel"), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = (into / "wheel").glob("dlscale-*.whl")
    return wheel


def test_the_wheel_holds_the_presets_and_its_install_runs_them_from_anywhere(tmp_path: Path):
    wheel = _wheel(tmp_path)
    members = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"dlscale/presets/{name}.toml" for name in preset_names()}
    assert shipped <= members and {f"dlscale/presets/{p}.toml" for p in PAPERS} <= shipped
    # a virtual environment of its own, the wheel installed into it (not editable); the
    # requirements are this environment's packages, on the new one's path after its own
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = sysconfig.get_path("purelib", vars={"base": str(venv)})
    Path(purelib, "site-modules.pth").write_text(sysconfig.get_path("purelib") + "\n")
    user = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "--no-deps", "--no-index", "--disable-pip-version-check", "-q", str(wheel)],
        capture_output=True, text=True, timeout=300, env=user,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def dlscale(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(venv / "bin" / "dlscale"), *args], capture_output=True,
                              text=True, timeout=120, cwd=elsewhere,
                              env={**user, "COLUMNS": "200"})  # fmt: skip

    listed = dlscale("ls", "presets")
    assert listed.returncode == 0, listed.stderr
    for name, description in preset_descriptions():
        (row,) = [line for line in listed.stdout.splitlines() if f"│ {name} " in line]
        assert description in row
    dry = dlscale("run", "--preset", "quick", "--dry-run", "--results", str(tmp_path / "r"))
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("# study quick: ") and "torch-ddp x2" in dry.stdout
    code = "import dlscale; print(dlscale.__file__)"
    imported = subprocess.run([venv / "bin" / "python", "-c", code], capture_output=True,
                              text=True, env=user, cwd=elsewhere)  # fmt: skip
    assert imported.stdout.startswith(str(venv)), imported.stdout  # the wheel's, not src/


def test_ls_presets_names_each_with_its_description(cli, tmp_path: Path):
    listed = cli("ls", "presets", cwd=tmp_path, env={"COLUMNS": "200"})
    assert listed.returncode == 0, listed.stderr
    rows = [line for line in listed.stdout.splitlines() if line.startswith("│ ")]
    assert [row.split("│")[1].strip() for row in rows] == preset_names()
    (mahon,) = [row for row in rows if "│ mahon2020 " in row]
    assert "ResNet-44 on CIFAR-10" in mahon


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--preset", "mahon202"), "unknown preset 'mahon202'; did you mean mahon2020? the "),
        (("--preset", "../../etc/passwd"), "unknown preset '../../etc/passwd'; the presets are: "),
        (("--preset", "[red]x"), "unknown preset '[red]x'; the presets are: "),
        (("--preset", "a\x1b[31mb"), "unknown preset 'a\\x1b[31mb'; the presets are: "),
        (("study.toml", "--preset", "quick"), "give a study file ('study.toml') or --preset"),
        (("studies/mahon2020.toml",), "dlscale ships that study: dlscale run --preset mahon2020"),
    ],
)
def test_a_preset_that_is_not_one_is_refused_in_one_line(cli, tmp_path: Path, args, said):
    refused = cli("run", *args, "--dry-run", cwd=tmp_path)
    assert refused.returncode == 2 and refused.stdout == ""
    (line,) = refused.stderr.splitlines()
    assert line.startswith("dlscale: error: ") and said in line, line
    if "unknown" in said:
        assert ", ".join(preset_names()) in line


def test_a_preset_runs_from_any_directory_in_any_case(cli, tmp_path: Path):
    dry = cli("run", "--preset", "Strategies.toml", "--dry-run",
              "--results", str(tmp_path / "r"), cwd=tmp_path)  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("# study strategies: ")
