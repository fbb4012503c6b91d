"""`dlscale run` into a pipe, as `| tee log` and a Slurm batch job's log take it: one plain line
per run, each read while the study still runs, then the table; no escape code anywhere."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

RUN_LINE = re.compile(
    r"dlscale: run (?P<k>\d+) of (?P<n>\d+): (?P<point>torch-ddp x(?P<w>\d), \d+ thr, tiny #0) "
    r"completed, (?P<img_s>\d+\.\d) img/s in \d+ s; (?P<elapsed>\d+:\d\d:\d\d) elapsed, "
    r"(?P<left>about \d+(\.\d)? (s|min|h) left|none left)"
)

TERMINAL_ONLY = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "PYTHONUNBUFFERED")
"""Variables that would make rich draw as in a terminal, or Python flush what dlscale does not:
a batch job has none of them."""


@pytest.mark.dist
def test_a_piped_study_says_each_run_as_it_ends_in_plain_lines(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k not in TERMINAL_ONLY}
    env["TERM"] = "xterm-256color"  # as a batch job inherits it: still no colour into a pipe
    argv = [sys.executable, "-m", "dlscale", "run", "--backend", "torch-ddp", "--workers", "1,2"]
    argv += ["--model", "tiny", "--steps", "6", "--windows", "2", "--repeats", "1"]
    argv += ["--set", "machine_reference=false", "--results", str(tmp_path / "res")]
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
        env=env,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        before: list[str] = []
        for text in process.stderr:  # as the lines come
            before.append(text)
            if text.startswith("dlscale: run 1 of"):
                break
        # the first run's line arrived while the second run was still to come
        still_running = process.poll() is None
        rest = process.stderr.read()  # the table is small: stdout's pipe holds it meanwhile
        out = process.stdout.read()
        process.wait(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    err = "".join(before) + rest
    assert process.returncode == 0, err
    assert before and before[-1].startswith("dlscale: run 1 of 2: "), err
    assert still_running, err
    assert "\x1b" not in out + err and "\r" not in out + err  # no escape code, no redrawn line
    runs = [
        RUN_LINE.fullmatch(text) for text in err.splitlines() if text.startswith("dlscale: run")
    ]
    assert len(runs) == 2 and all(runs), err
    first, second = (match.groupdict() for match in runs if match is not None)
    assert (first["k"], first["n"], first["w"]) == ("1", "2", "1")
    assert (second["k"], second["n"], second["w"]) == ("2", "2", "2")
    assert float(first["img_s"]) > 0 and float(second["img_s"]) > 0
    assert first["left"].startswith("about ") and second["left"] == "none left"
    assert "study quick" in out and "img/s" in out  # the table follows on stdout, as before
