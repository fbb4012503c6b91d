import os
import subprocess
import sys
from pathlib import Path

import pytest


def dlscale_cli(
    *args: str, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run the dlscale command line as a user would (a fresh interpreter)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "dlscale", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env=env,
    )


@pytest.fixture
def cli():
    return dlscale_cli
