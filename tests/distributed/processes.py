"""Starting a long dlscale run and finding its worker processes, for the failure tests."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from dlscale.contract.events import read_events
from dlscale.runtime.procfs import is_alive

ROOT = Path(__file__).resolve().parents[2]


def toy_env() -> dict[str, str]:
    """The environment that makes the toy plug-in (tests/plugins/dlscale_toy) importable."""
    return {
        **os.environ,
        "DLSCALE_PLUGINS": "dlscale_toy",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "plugins"), str(ROOT)]),
    }


def alive(pid: int) -> bool:
    """The pid runs and is not a zombie."""
    return is_alive(pid, None)


def start_long_run(
    results: Path,
    timeout_s: float,
    backend: str = "torch-ddp",
    *,
    model: str = "tiny",
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> subprocess.Popen:
    """A 2-worker run of a million steps: it ends only by failure, timeout or signal."""
    cmd = [
        sys.executable,
        "-m",
        "dlscale",
        "run",
        "--repeats",
        "1",
        "--set",
        "machine_reference=false",
        "--backend",
        backend,
        "--model",
        model,
        "--workers",
        "2",
        "--steps",
        "1000000",
        "--windows",
        "1",
        "--json",
        "--results",
        str(results),
        "--set",
        f"timeout_s={timeout_s}",
        *extra,
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for_pids(
    results: Path,
    ranks: int = 2,
    deadline_s: float = 90,
    *,
    ready_rank: int = 0,
    proc: subprocess.Popen | None = None,
) -> dict[int, int]:
    """Rank -> pid once every rank has started and ``ready_rank`` (the first training rank)
    has set up its model (recorded its environment); fails at once if ``proc`` (the dlscale
    command) has ended."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"dlscale ended ({proc.returncode}) first: {out}\n{err}")
        pids = {}
        for path in results.glob("*/events.rank*.jsonl"):
            events = read_events(path)
            if events and events[0]["event"] == "start":
                pids[events[0]["rank"]] = events[0]["pid"]
        env_seen = any(
            e["event"] == "environment"
            for p in results.glob(f"*/events.rank{ready_rank}.jsonl")
            for e in read_events(p)
        )
        if len(pids) == ranks and env_seen:
            return pids
        time.sleep(0.2)
    raise AssertionError("ranks did not start")


def parent_pid(pid: int) -> int:
    """The parent of a live process (field 4 of /proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def wait_gone(pids: Iterable[int], within_s: float) -> list[int]:
    """The pids still alive after ``within_s`` seconds (returns as soon as none is)."""
    left = list(pids)
    end = time.monotonic() + within_s
    while True:
        left = [pid for pid in left if alive(pid)]
        if not left or time.monotonic() >= end:
            return left
        time.sleep(0.05)


def kill_all(pids: Iterable[int], *procs: subprocess.Popen) -> None:
    """Cleanup for a test that may have failed half-way: SIGKILL what is left, reap our own."""
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)


def left_in(scratch: Path) -> list[Path]:
    """What a run's ranks left in ``scratch``, the temporary directory the run was given: a
    rank's own directory (``dlscale-*``, runtime/scratch.py) or a framework's file written
    straight there (TensorFlow's autograph). A tool's own (torchrun's ``torchelastic_*``, left
    when its agent is stopped) is not the ranks'."""
    return [p for p in scratch.iterdir() if p.name.startswith(("dlscale-", "__autograph"))]


def processes_naming(path: Path | str) -> list[int]:
    """Live processes whose command line names ``path`` (a run's ranks, and the tools that
    started them: horovodrun, mpirun and their helpers)."""
    return _live_processes("cmdline", lambda cmdline: str(path).encode() in cmdline)


def processes_given_tmpdir(directory: Path | str) -> list[int]:
    """Live processes started with ``TMPDIR=directory``: every process of a Ray cluster made
    under it, its agents too, which rename themselves (``ray::DashboardAgent``) so that their
    command line no longer names the directory."""
    wanted = f"TMPDIR={directory}".encode()
    return _live_processes("environ", lambda environ: wanted in environ.split(b"\0"))


def _live_processes(file: str, matches: Callable[[bytes], bool]) -> list[int]:
    """Live processes but this one whose ``/proc/PID/file`` ``matches``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            text = (proc / file).read_bytes()
        except OSError:
            continue
        if matches(text) and alive(int(proc.name)):
            found.append(int(proc.name))
    return found


def with_descendants(pids: Iterable[int]) -> list[int]:
    """``pids`` and every live process they started, and those started, and so on."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                children.setdefault(parent_pid(int(proc.name)), []).append(int(proc.name))
    found, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.append(pid)
            todo += children.get(pid, [])
    return [pid for pid in found if alive(pid)]


def stop_ray(directory: Path, port: int) -> list[int]:
    """Stop, by SIGKILL, the Ray cluster a test started with its files under ``directory`` and
    its head on ``port``, and only it (``ray stop`` stops every Ray process of the machine, the
    clusters of tests running beside this one too); the pids still alive after 20 s."""
    head = {*processes_naming(f":{port}\x00"), *processes_naming(f":{port} ")}  # its address
    processes = with_descendants({*processes_naming(directory), *head})
    kill_all(processes)
    return wait_gone(processes, 20.0)


def kill_rank_and_check_the_run_fails(
    results: Path,
    backend: str,
    *,
    ranks: int = 2,
    rank: int = 1,
    role: str = "worker",
    settle_s: float = 2.0,
    extra: tuple[str, ...] = (),
    reason: str | None = None,
) -> None:
    """Start a long 2-worker run of ``backend`` (``ranks`` processes), ``kill -9`` rank
    ``rank`` once every rank runs, and check what a user must see: the run failed, the dead
    rank named with its role, no traceback, the failure stored, and no process of the run left
    (the launcher stopped every other one)."""
    import json

    from dlscale.store import RunStore

    scratch = results.parent / f"{results.name}.tmp"  # its temporary directory: empty after it
    scratch.mkdir(parents=True, exist_ok=True)
    proc = start_long_run(
        results, 300, backend, extra=extra, env={**os.environ, "TMPDIR": str(scratch)}
    )
    pids: dict[int, int] = {}
    try:
        pids = wait_for_pids(results, ranks=ranks, proc=proc)
        time.sleep(settle_s)
        os.kill(pids[rank], signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 1, err
        record = json.loads(out.strip().splitlines()[-1])
        assert record["status"] == "failed"
        expected = reason or f"rank {rank} was killed by SIGKILL (role {role})"
        assert expected in record["error"], record
        assert "Traceback" not in err, err
        (result,) = RunStore(results).results()
        assert result.failure["failed_rank"] == rank
        assert not wait_gone(pids.values(), 10.0)
        assert not processes_naming(results)
        assert left_in(scratch) == []  # the killed rank's own directory went too
    finally:
        kill_all(pids.values(), proc)
