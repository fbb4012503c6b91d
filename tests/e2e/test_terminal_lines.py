"""An error or a warning fits a 100-column terminal (issue 71): wrapped at words there, its
later lines indented; into a pipe or a log it stays one line, as scripts read it. The terminal
is util-linux's `script` (Debian's bsdutils, an essential package)."""

import shlex
import subprocess
import sys
from pathlib import Path

ARGV = [sys.executable, "-m", "dlscale", "predict", "--workers", "1,8", "--bandwidth", "10Gbit",
        "--compute-ms", "10", "--model", "nosuchmodel"]  # fmt: skip


def test_an_error_is_wrapped_at_words_in_a_terminal_and_one_line_in_a_pipe(tmp_path: Path):
    log = tmp_path / "tty.log"
    command = f"stty cols 100 rows 50; {shlex.join(ARGV)}"
    subprocess.run(["script", "-qec", command, str(log)], check=False, timeout=120,
                   stdin=subprocess.DEVNULL, capture_output=True)  # fmt: skip
    lines = [
        line
        for line in log.read_text().replace("\r", "").splitlines()
        if line and not line.startswith("Script ")
    ]
    assert lines[0].startswith("dlscale: error: unknown model 'nosuchmodel'; choose one of:")
    assert len(lines) >= 2 and max(len(line) for line in lines) <= 100, lines
    assert all(line.startswith("  ") for line in lines[1:])
    piped = subprocess.run(ARGV, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 2 and len(piped.stderr.splitlines()) == 1
    assert " ".join(line.strip() for line in lines) == piped.stderr.strip()
