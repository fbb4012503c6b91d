"""`dlscale run` on a real terminal (a pseudo-terminal: rich draws its live progress line) with
a study name made to take over the terminal, into a results directory whose name runs commands
when pasted unquoted: every byte it prints is checked."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import shlex
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from dlscale.cli import build_parser
from dlscale.cli.run import settings_from
from dlscale.config.study import expand
from dlscale.contract.text import visible
from dlscale.store import read_json, write_json_atomic
from tests.runs import made_here
from tests.unit.test_outputs_hostile import RAW, SHELL_PATH, _pasted

pytestmark = pytest.mark.e2e
DATA = Path(__file__).resolve().parent.parent / "data"
NAME = "x\x1b]0;PWNED\x07\x1b[2J nul\x00 \u202erlo [bold]b[/bold] :smile:"
STUDY = """name = "{name}"
backend = "torch-single"
model = "tiny"
dataset = "digits"
workers = 1
batch_size = 32
steps = 2
machine_reference = false
"""


def _toml_string(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" if not c.isprintable() or c in '"\\' else c for c in text)


def _on_a_terminal(argv: list[str], cwd: Path) -> tuple[int, bytes]:
    """Run ``argv`` with stdin, stdout and stderr on a 200-column pseudo-terminal; every
    byte it wrote."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES")}
    env.update(TERM="xterm-256color", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, close_fds=True
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every end of the terminal closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return proc.wait(timeout=120), b"".join(chunks)


def test_run_on_a_terminal_shows_a_hostile_study_name_escaped(tmp_path: Path):
    study = tmp_path / "study.toml"
    study.write_text(STUDY.format(name=_toml_string(NAME)))
    results = tmp_path / SHELL_PATH
    settings, name, description = settings_from(build_parser().parse_args(["run", str(study)]))
    assert name == NAME
    template = read_json(
        DATA / "results" / "tiny-torch-single-digits-w1-749c9ebe62" / "result.json", "result"
    )
    for config in expand(settings, name=name, description=description).points:
        document = made_here({**template, "run_id": config.run_id(), "config": config.to_dict()})
        (results / config.run_id()).mkdir(parents=True)
        write_json_atomic(results / config.run_id() / "result.json", "result", document)
    argv = [sys.executable, "-m", "dlscale", "run", str(study), "--results", str(results)]
    code, raw = _on_a_terminal(argv, tmp_path)
    text = raw.decode("utf-8")
    assert code == 0, text
    for control in RAW:
        assert control not in text, (control, text)
    assert "already completed" in text and "\x1b[" in text  # it ran, and drew as on a terminal
    assert visible(NAME) in text  # in the table's title, and the progress line
    hint = re.search(r"results: .*? \((dlscale ls runs --results .*?)\)\r?\n", text)
    assert hint is not None, text
    expected = ["dlscale", "ls", "runs", "--results", str(results)]
    assert shlex.split(hint.group(1)) == expected
    assert _pasted(hint.group(1), tmp_path / "cwd") == expected
    assert not list(tmp_path.rglob("PWNED*"))
