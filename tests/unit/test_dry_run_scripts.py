"""A file a launcher writes, as `--dry-run --verbose` shows it: the batch script sbatch gets,
each line whole (an ``#SBATCH`` line continued with a backslash is no option to sbatch), as a
here-document: its lines pasted into a file are the script, the whole pasted into a shell
writes that file, however narrow the terminal."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import dlscale.cli.tables
from dlscale.cli import main as dlscale_main
from dlscale.cli.dry_run import HEREDOC_END, file_lines
from dlscale.launchers.slurm import SlurmLauncher

POINT = ["--backend", "torch-ddp", "--workers", "2", "--model", "tiny", "--launcher", "slurm"]
NODES = ["--set", "cpus_per_node=16", "--set", "slurm_args=--comment='a b' --account=proj"]


@pytest.fixture
def narrow_terminal(monkeypatch):
    """A terminal of 40 columns: commands are continued, comments wrapped, files never."""
    monkeypatch.setattr(
        dlscale.cli.tables, "console", lambda stderr=False: Console(force_terminal=True, width=40)
    )


def _heredocs(out: str) -> dict[str, list[str]]:
    """Each here-document in ``out``: the file it writes, and its lines."""
    found: dict[str, list[str]] = {}
    lines = iter(out.splitlines())
    for line in lines:
        if start := re.fullmatch(r"cat > (\S+) <<'(\w+)'", line):
            found[start[1]] = list(iter(lambda: next(lines), start[2]))
    return found


@pytest.fixture
def planned_files(monkeypatch) -> dict[str, str]:
    """Every file the Slurm launcher's plans write, as the plans the dry run made hold them."""
    files: dict[str, str] = {}
    plan = SlurmLauncher.plan

    def recorded(self, *args, **kwargs):
        made = plan(self, *args, **kwargs)
        for entry in made.entries:
            files.update({str(path): text for path, text in entry.files.items()})
        return made

    monkeypatch.setattr(SlurmLauncher, "plan", recorded)
    return files


def test_the_sbatch_preview_is_the_script_each_line_whole(
    tmp_path, capsys, narrow_terminal, planned_files
):
    results = tmp_path / "res"
    args = ["run", *POINT, *NODES, "--set", "slurm_mode=sbatch", "--results", str(results)]
    assert dlscale_main([*args, "--dry-run", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"#SBATCH.*\\$", out, re.MULTILINE) is None  # never continued
    assert re.search(r"^#\s+#SBATCH", out, re.MULTILINE) is None  # never commented out
    shown = _heredocs(out)
    planned = planned_files
    assert shown.keys() == planned.keys() and len(shown) == 2  # torch-single x1, torch-ddp x2
    for path, lines in shown.items():
        assert lines == planned[path].splitlines()  # the script sbatch gets, line for line
        assert "#SBATCH '--comment=a b'" in lines and lines[0] == "#!/bin/bash"
        joined = out.replace(" \\\n    ", " ")  # a command continued in the narrow terminal
        assert f"sbatch --parsable {path}\n" in joined  # then the command that submits it
    # a command of the same plan is still continued at its words in the narrow terminal
    assert any(line.endswith(" \\") for line in out.splitlines())


def test_the_study_job_preview_is_its_script_and_how_it_is_submitted(
    tmp_path, capsys, narrow_terminal, monkeypatch
):
    results = tmp_path / "res"
    args = ["run", *POINT, *NODES, "--set", "slurm_mode=study", "--results", str(results)]
    monkeypatch.setattr(sys, "argv", ["dlscale", *args, "--dry-run"])  # the job's command
    assert dlscale_main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    script = results / ".slurm" / "study-quick.sbatch"
    ((path, lines),) = _heredocs(out).items()
    assert path == str(script) and lines[0] == "#!/bin/bash"
    assert "#SBATCH --exclusive" in lines and "#SBATCH '--comment=a b'" in lines
    assert lines[-1].startswith("exec ") and "--results" in lines[-1]
    assert f"sbatch --parsable {script}" in out.splitlines()
    assert not results.exists()  # a dry run writes nothing


def test_a_heredoc_pasted_into_a_shell_writes_the_file_byte_for_byte(tmp_path: Path):
    """Even a file with a line that is the usual delimiter, quotes, ``$`` and backquotes."""
    text = f"#!/bin/bash\n#SBATCH '--comment=a b'\n{HEREDOC_END}\necho \"$HOME\" `id` \\\n"
    target = tmp_path / "dir with space" / "job.sbatch"
    target.parent.mkdir()
    lines = file_lines(target, text)
    assert lines[-1] != HEREDOC_END and lines[-1].startswith(HEREDOC_END)
    subprocess.run(["bash", "-c", "\n".join(lines) + "\n"], check=True, timeout=60)
    assert target.read_text() == text
