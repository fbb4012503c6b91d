"""A deepspeed-zero* point whose workers' interpreter has no DeepSpeed is refused before
launch in one line naming the install command. The interpreter is a real virtual environment
that sees every package of this one but DeepSpeed's (a site directory of links to them), so
torch and dlscale import in it and only DeepSpeed is missing, as on a cluster where it was not
installed."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def without_deepspeed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("no-deepspeed")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", root / "venv"], check=True)
    python = root / "venv" / "bin" / "python"
    ours = Path(sysconfig.get_paths()["purelib"])
    seen = root / "site"
    seen.mkdir()
    for entry in ours.iterdir():
        if not entry.name.lower().startswith("deepspeed"):
            (seen / entry.name).symlink_to(entry)
    theirs = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # addsitedir, not a plain path: the linked .pth files (dlscale's editable install) run
    (Path(theirs) / "seen.pth").write_text(f"import site; site.addsitedir({str(seen)!r})\n")
    probe = (
        "import importlib.util as u; print(bool(u.find_spec('torch')), u.find_spec('deepspeed'))"
    )
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "None"]
    return python


def test_a_point_without_deepspeed_is_refused_before_launch_in_one_line(
    tmp_path: Path, cli, without_deepspeed
):
    done = cli(
        "run",
        "--backend",
        "deepspeed-zero2",
        "--workers",
        "2",
        "--set",
        f"python={without_deepspeed}",
        "--results",
        str(tmp_path / "results"),
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines == [
        f"dlscale: error: deepspeed-zero2 needs deepspeed, which {without_deepspeed} cannot "
        "import; install it: pip install 'dlscale[deepspeed]' -c constraints.txt"
    ]
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())
