"""Local launcher: N worker processes on this machine, cores split between them.

Every worker runs in its own process session, so stopping it stops whatever it started too.
When one rank exits non-zero, dies of a signal, or the run passes its timeout, the others are
stopped (SIGTERM, then SIGKILL after a grace period): no orphan is left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import dlscale
from dlscale.config.run_config import RunConfig
from dlscale.launchers.base import Launcher, LaunchOutcome, LaunchPlan, ProcessPlan
from dlscale.runtime.environment import usable_cores

GRACE_S = 5.0
POLL_S = 0.05
STDERR_TAIL_LINES = 20


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def thread_budget(config: RunConfig, cores: int) -> tuple[int, list[str]]:
    """Intra-op threads per process: cores // processes unless set; warn on oversubscription."""
    processes = config.processes
    threads = config.threads_per_worker or max(1, cores // processes)
    warnings = []
    if threads * processes > cores:
        what = f"{processes} processes" if processes != config.workers else f"{processes} workers"
        warnings.append(
            f"{what} x {threads} threads = {threads * processes} threads "
            f"on {cores} cores: oversubscribed, expect lower and noisier throughput"
        )
    return threads, warnings


class LocalLauncher(Launcher):
    def plan(
        self,
        config: RunConfig,
        spec_path: Path,
        python: str,
        *,
        port: int | None = None,
        cores: int | None = None,
    ) -> LaunchPlan:
        threads, warnings = thread_budget(config, cores or usable_cores())
        port = port or free_port()
        source_root = str(Path(dlscale.__file__).resolve().parent.parent)
        pythonpath = os.pathsep.join(p for p in (source_root, os.environ.get("PYTHONPATH")) if p)
        processes = []
        for rank in range(config.processes):
            env = {
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(config.processes),
                "LOCAL_WORLD_SIZE": str(config.processes),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "OMP_NUM_THREADS": str(threads),
                "MKL_NUM_THREADS": str(threads),
                "DLSCALE_THREADS": str(threads),
                "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": pythonpath,
            }
            processes.append(
                ProcessPlan(
                    rank=rank,
                    argv=(python, "-m", "dlscale.worker", str(spec_path)),
                    env=env,
                    stdout=spec_path.parent / f"rank{rank}.stdout",
                    stderr=spec_path.parent / f"rank{rank}.stderr",
                )
            )
        return LaunchPlan(
            processes=tuple(processes), threads_per_worker=threads, warnings=tuple(warnings)
        )

    def run(self, plan: LaunchPlan, timeout_s: float) -> LaunchOutcome:
        started = time.monotonic()
        procs: dict[int, subprocess.Popen[bytes]] = {}
        try:
            for p in plan.processes:
                with p.stdout.open("wb") as out, p.stderr.open("wb") as err:
                    procs[p.rank] = subprocess.Popen(
                        p.argv,
                        env={**os.environ, **p.env},
                        stdout=out,
                        stderr=err,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    )
            failed, reason = self._watch(procs, started, timeout_s)
        except BaseException:
            _stop_all(procs)
            raise
        _stop_all(procs)
        codes = {rank: proc.returncode for rank, proc in procs.items()}
        duration = time.monotonic() - started
        if failed is None:
            return LaunchOutcome(ok=True, returncodes=codes, duration_s=duration)
        stderr = next(p.stderr for p in plan.processes if p.rank == failed)
        return LaunchOutcome(
            ok=False,
            returncodes=codes,
            failed_rank=failed,
            reason=reason,
            stderr_tail=_tail(stderr),
            duration_s=duration,
        )

    @staticmethod
    def _watch(
        procs: dict[int, subprocess.Popen[bytes]], started: float, timeout_s: float
    ) -> tuple[int | None, str | None]:
        while True:
            codes = {rank: proc.poll() for rank, proc in procs.items()}
            bad = [rank for rank, code in codes.items() if code not in (None, 0)]
            if bad:
                # Several ranks seen dead in one poll: a rank killed by a signal is the cause
                # more often than its peers that then failed on a closed connection.
                rank = min(bad, key=lambda r: (codes[r] >= 0, r))  # type: ignore[operator]
                return rank, _describe_exit(rank, codes[rank])  # type: ignore[arg-type]
            if all(code == 0 for code in codes.values()):
                return None, None
            if time.monotonic() - started > timeout_s:
                running = [rank for rank, code in codes.items() if code is None]
                return running[0], (
                    f"timed out after {timeout_s:g} s (rank(s) {running} still running); "
                    "raise timeout_s or look for a hung worker"
                )
            time.sleep(POLL_S)


def _describe_exit(rank: int, code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"rank {rank} was killed by {name}"
    return f"rank {rank} exited with code {code}"


def _stop_all(procs: dict[int, subprocess.Popen[bytes]]) -> None:
    """SIGTERM every live worker's process group, then SIGKILL what is left after a grace."""
    live = [proc for proc in procs.values() if proc.poll() is None]
    for proc in live:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    for proc in live:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    for proc in procs.values():
        _signal_group(proc, signal.SIGKILL)  # also children a finished worker left behind
        proc.wait()


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _tail(path: Path) -> list[str]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return lines[-STDERR_TAIL_LINES:]
