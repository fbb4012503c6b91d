"""Plan entries as processes on this machine (every launcher that runs a local command).

Each command runs in its own process session, so stopping it stops whatever it started too
(the ranks mpirun or horovodrun spawn, say): SIGTERM to the group, SIGKILL after a grace.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

from dlscale.launchers.base import LaunchPlan, Running

GRACE_S = 5.0


class LocalProcesses(Running):
    def __init__(self, procs: list[subprocess.Popen[bytes]]) -> None:
        self.procs = procs

    def poll(self) -> list[int | None]:
        return [proc.poll() for proc in self.procs]

    def stop(self, entries: list[int] | None = None) -> None:
        chosen = [self.procs[i] for i in entries] if entries is not None else self.procs
        live = [proc for proc in chosen if proc.poll() is None]
        for proc in live:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        for proc in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        for proc in chosen:
            _signal_group(proc, signal.SIGKILL)  # also children a finished command left behind
            proc.wait()


def start_processes(plan: LaunchPlan) -> LocalProcesses:
    running = LocalProcesses([])
    try:
        for entry in plan.entries:
            with entry.stdout.open("wb") as out, entry.stderr.open("wb") as err:
                running.procs.append(
                    subprocess.Popen(
                        entry.argv,
                        env={**os.environ, **entry.env},
                        stdout=out,
                        stderr=err,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                )
    except BaseException:
        running.stop()
        raise
    return running


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
