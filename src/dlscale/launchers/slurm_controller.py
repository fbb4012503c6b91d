"""Is Slurm there to take a job? Asked once before anything of a run is created.

Without this, a SLURM_CONF that names no file made every Slurm client retry silently for 60 s
and then fail with a message of several lines; a controller that is down failed at submission,
after the run's directory was made. :func:`controller_problem` asks ``scontrol ping`` once (a
running controller answers in milliseconds) and says in one line what is wrong; the launcher
adds how to start one (:data:`START`).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

DEFAULT_CONF = Path("/etc/slurm/slurm.conf")
"""Where Debian's Slurm clients look for their configuration without SLURM_CONF."""
START = (
    "start one on this machine with `scripts/slurm-local.sh start DIR` (after `make slurm`) "
    "and export the SLURM_CONF it prints, or set SLURM_CONF to your cluster's slurm.conf"
)
PING_TIMEOUT_S = 10.0
"""How long ``scontrol ping`` may take before launch (an answering controller: milliseconds)."""


def controller_problem(environ: dict[str, str]) -> str | None:
    """What keeps Slurm from taking a job now, asked once before anything is created: a
    SLURM_CONF that names no file (Slurm's clients would retry it silently for 60 s), no
    configuration at all, or a controller that does not answer ``scontrol ping``; ``None``:
    it answers."""
    conf = environ.get("SLURM_CONF")
    if conf and not Path(conf).is_file():
        return f"SLURM_CONF={conf} names no file"
    where = conf or str(DEFAULT_CONF)
    try:
        done = subprocess.run(
            ["scontrol", "ping"],
            capture_output=True,
            text=True,
            timeout=PING_TIMEOUT_S,
            env=environ,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return (
            f"Slurm's controller (from {where}) did not answer scontrol ping in "
            f"{PING_TIMEOUT_S:g} s"
        )
    except FileNotFoundError:
        return "Slurm's client commands are not installed here (no scontrol on the PATH)"
    except OSError as error:
        return f"scontrol ping failed: {error}"
    if done.returncode == 0:
        return None
    if not conf and not DEFAULT_CONF.is_file():
        return (
            f"no Slurm configuration here (SLURM_CONF is not set and {DEFAULT_CONF} does not exist)"
        )
    text = done.stdout + done.stderr
    if "DOWN" in text:
        return (
            f"Slurm's controller (slurmctld, configured in {where}) is not running: "
            "scontrol ping says DOWN"
        )
    return f"Slurm's controller (from {where}) does not answer: scontrol ping says {said(text)}"


def said(text: str) -> str:
    """A tool's message on one line: its lines joined by '; ', banners and prefixes left out."""
    lines = [line.strip().strip("*").strip() for line in text.splitlines()]
    lines = [re.sub(r"^(sbatch|srun|scontrol): (error: )?", "", line) for line in lines if line]
    return "; ".join(line for line in lines if line) or "no message"
