"""Real runs started where a user's directory holds modules named like the standard library's
and the frameworks' (``random.py``, ``numpy.py``, ``torch.py``): no worker, server, agent or
tool imports them, under every launcher of this machine; and a rank the kernel's OOM killer
kills is reported as out of memory (a run inside a small memory cgroup)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlscale.frameworks.mxnet.declare import mxnet_python
from dlscale.runtime.environment import memory_cgroup
from dlscale.store import RunStore
from tests.distributed.references import COMMON, ends_where_torch_single_ends

pytestmark = pytest.mark.dist

DLSCALE = Path(sys.executable).parent / "dlscale"  # the command a user runs
PLANTED = ("random", "numpy", "torch")
TINY = ("--model", "tiny", "--dataset", "synthetic", "--steps", "2", "--windows", "1",
        "--warmup-steps", "1", "--repeats", "1", "--set", "machine_reference=false")  # fmt: skip
EQUIVALENCE = (  # test_equivalence.py's point: 2 workers of batch 8 end as 1 of 16 ends
    *(
        arg
        for key, value in {**COMMON, "batch_size": 8}.items()
        for arg in ("--set", f"{key}={str(value).lower() if isinstance(value, bool) else value}")
    ),
    *("--repeats", "1", "--set", "machine_reference=false"),
)


@pytest.fixture
def hostile_cwd(tmp_path: Path) -> tuple[Path, Path]:
    """A working directory whose random.py, numpy.py and torch.py leave a marker and exit 3
    when imported; (the directory, the marker)."""
    cwd, marker = tmp_path / "cwd", tmp_path / "imported-from-cwd"
    cwd.mkdir()
    for name in PLANTED:
        (cwd / f"{name}.py").write_text(
            "import os, sys\n"
            f"with open({str(marker)!r}, 'a') as out:\n"
            f"    out.write('{name} ' + ' '.join(sys.argv) + '\\n')\n"
            "os._exit(3)\n"
        )
    return cwd, marker


def _dlscale(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(DLSCALE), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip


def test_the_planted_modules_would_run_without_a_safe_path(hostile_cwd):
    """The trap works: ``python -m`` (what every worker was started with) imports them."""
    cwd, marker = hostile_cwd
    # without coverage.py's start-up (make coverage): its .pth file imports `random` first
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    done = subprocess.run([sys.executable, "-m", "tempfile"], cwd=cwd, env=env,
                          capture_output=True)  # fmt: skip
    assert done.returncode == 3 and marker.read_text().startswith("random ")


def _launchers() -> list:
    cases = [
        pytest.param("local", ("torch-ddp", "torch-ps"), (), id="local-ddp-and-ps-servers"),
        pytest.param("torchrun", ("torch-ddp",), (), id="torchrun"),
    ]
    no_mxnet = pytest.mark.skipif(not Path(mxnet_python()).exists(), reason="make mxnet")
    kvstore = ("--set", "kvstore=dist_sync")  # ps-lite's scheduler and server, MXNet's venv
    cases.append(pytest.param("local", ("mxnet-kv",), kvstore, marks=no_mxnet, id="mxnet-kv"))
    horovod = importlib.util.find_spec("horovod") is not None
    why = "Horovod is not installed here: make horovod"
    no_horovod = pytest.mark.skipif(not horovod, reason=why)
    # Horovod's two tools at test_equivalence.py's point: the run also proves its steps
    cases.append(
        pytest.param("horovodrun", ("horovod-torch",), EQUIVALENCE, marks=no_horovod, id="hvd")
    )
    no_mpi = pytest.mark.skipif(not shutil.which("mpirun"), reason="scripts/install-openmpi.sh")
    marks = [no_horovod, no_mpi]
    cases.append(pytest.param("mpirun", ("horovod-torch",), EQUIVALENCE, marks=marks, id="mpi"))
    return cases


@pytest.mark.parametrize(("launcher", "backends", "extra"), _launchers())
def test_no_rank_server_or_tool_imports_from_the_working_directory(
    hostile_cwd, tmp_path: Path, request, launcher, backends, extra
):
    cwd, marker = hostile_cwd
    results = tmp_path / "res"
    flags = ("--launcher", launcher, "--backend", ",".join(backends), "--workers", "2")
    point = extra if extra == EQUIVALENCE else (*TINY, *extra)
    run = _dlscale(cwd, "run", *flags, *point, "--json", "--results", str(results))
    assert not marker.exists(), marker.read_text()
    assert run.returncode == 0, run.stderr
    runs = [r for r in map(json.loads, run.stdout.splitlines()) if r["kind"] == "run"]
    assert sorted(r["backend"] for r in runs) == sorted(backends)
    assert all(r["status"] == "completed" for r in runs), runs
    if extra == EQUIVALENCE:  # each step's loss and the parameters: torch-single's at batch 16
        store = RunStore(results)
        (result,) = store.results()
        reference = request.getfixturevalue("reference")
        ends_where_torch_single_ends(result, store.run_dir(result.run_id), reference)


def test_a_microbench_imports_nothing_from_the_working_directory(hostile_cwd, tmp_path: Path):
    cwd, marker = hostile_cwd
    run = _dlscale(cwd, "microbench", "--workers", "2", "--sizes", "4,4k", "--collectives",
                   "all_reduce", "--json", "--results", str(tmp_path / "res"))  # fmt: skip
    assert not marker.exists(), marker.read_text()
    assert run.returncode == 0, run.stderr
    assert '"collective": "all_reduce"' in run.stdout


@contextlib.contextmanager
def _memory_cgroup(limit: int):
    """A v1 memory cgroup below this process's with ``limit`` bytes (root and cgroup v1's
    memory controller, as on the test machine; else the test is skipped); removed after."""
    here = memory_cgroup()
    if here is None or here.version != 1 or os.geteuid() != 0:
        pytest.skip("needs root and cgroup v1's memory controller (as on the test machine)")
    path = here.path / f"dlscale-test-oom-run-{os.getpid()}"
    try:
        path.mkdir()
        (path / "memory.limit_in_bytes").write_text(str(limit))
    except OSError as error:
        pytest.skip(f"cannot make a memory cgroup here: {error}")
    try:
        yield path
    finally:
        for _ in range(100):  # empty once every process of the run is gone
            with contextlib.suppress(OSError):
                path.rmdir()
                break
            time.sleep(0.1)


def test_a_rank_the_oom_killer_kills_is_reported_out_of_memory(tmp_path: Path):
    """dlscale run inside a 1.2 GiB memory cgroup (the machine's memory is never at risk):
    the tiny model at batch 16384 needs about 2 GiB, the kernel's OOM killer kills the rank
    (SIGKILL), and the run says so and how to fix it, not only the signal."""
    results = tmp_path / "res"
    with _memory_cgroup(1200 << 20) as cgroup:
        command = [str(DLSCALE), "run", "--backend", "torch-single", "--workers", "1",
                   "--batch-size", "16384", *TINY, "--json", "--results", str(results)]  # fmt: skip
        script = f'echo $$ > "{cgroup}/cgroup.procs" && exec "$@"'
        run = subprocess.run(["sh", "-c", script, "sh", *command], capture_output=True,
                             text=True, timeout=300)  # fmt: skip
        oom_kills = (cgroup / "memory.oom_control").read_text()
    assert run.returncode == 1, run.stderr
    (record,) = [r for r in map(json.loads, run.stdout.splitlines()) if r["kind"] == "run"]
    assert record["status"] == "failed" and "oom_kill 1" in oom_kills
    assert record["error"].startswith("rank 0 was killed by SIGKILL: out of memory (the kernel's")
    assert record["error"].endswith("; use a smaller batch or fewer workers")
    assert "Traceback" not in run.stderr
