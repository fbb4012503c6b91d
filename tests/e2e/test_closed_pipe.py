"""A reader that goes away (``dlscale run --keys | head``, ``less`` quit early) ends a
command quietly, as a Unix tool ends: no traceback, nothing on stderr, a non-zero exit (141,
128 + SIGPIPE; 1 where rich's console met the closed pipe first: it ends the process itself).
The pipe's reading end is closed before the command writes anything, so every write fails:
the case cannot pass by the output fitting into the pipe's buffer before ``head`` leaves."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("command", [["run", "--keys"], ["ls", "backends"], ["explain", "speedup"]])
def test_a_closed_pipe_ends_the_command_quietly(command):
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "dlscale", *command],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert done.returncode in (1, 141), done.stderr
    assert done.stderr == ""
