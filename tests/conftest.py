import os
import subprocess
import sys
from pathlib import Path

import pytest


def dlscale_cli(
    *args: str,
    cwd: Path | None = None,
    timeout: float = 300,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run the dlscale command line as a user would (a fresh interpreter); ``env``: variables
    added to this process's."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
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
