"""The allocator key for real: a process started with a choice's variables runs under that
allocator (seen from inside it), and a run under jemalloc completes with a quiet stderr.

The libraries are Debian's libjemalloc2 and libtcmalloc-minimal4, which make test installs
(scripts/install-allocators.sh): a missing one fails here, it is not skipped."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlscale.config import RunConfig
from dlscale.contract.run_checks import ALLOCATORS
from dlscale.runner import run_point
from dlscale.runtime.allocator import GLIBC_TUNED, PRELOADED, allocator_env
from dlscale.store import RunStore

pytestmark = pytest.mark.dist

ASK = (
    "import ctypes; from dlscale.runtime.allocator import loaded_allocator;"
    # allocate and free a large block, so an allocator that rejects its settings says so
    "libc = ctypes.CDLL(None); libc.malloc.restype = ctypes.c_void_p;"
    "libc.free.argtypes = [ctypes.c_void_p]; libc.free(libc.malloc(64 << 20));"
    "print(loaded_allocator())"
)


def clean_environment() -> dict[str, str]:
    """This process's environment without any allocator setting of its own."""
    ours = {"LD_PRELOAD", *GLIBC_TUNED, *(k for p in PRELOADED.values() for k in p.env)}
    return {k: v for k, v in os.environ.items() if k not in ours}


@pytest.mark.parametrize("name", ALLOCATORS)
def test_a_process_started_with_the_variables_runs_under_that_allocator(name: str):
    env = clean_environment()
    done = subprocess.run(
        [sys.executable, "-c", ASK],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, **allocator_env(name, env)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == name
    assert done.stderr == ""  # e.g. "<jemalloc>: Invalid conf pair" for a bad MALLOC_CONF


def test_the_parents_preload_stays_loaded_behind_the_allocator():
    env = clean_environment()
    parent = {**env, "LD_PRELOAD": str(allocator_env("tcmalloc", {})["LD_PRELOAD"])}
    ask = "from dlscale.runtime.allocator import loaded_allocator; print(loaded_allocator())"
    maps = "print(open('/proc/self/maps').read())"
    for code, expected in ((ask, "jemalloc"), (maps, "libtcmalloc_minimal")):
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            env={**parent, **allocator_env("jemalloc", parent)},
        )
        assert done.returncode == 0 and expected in done.stdout, done.stderr


def test_a_run_under_jemalloc_completes(tmp_path: Path):
    cfg = RunConfig.make(
        backend="torch-single",
        model="tiny",
        workers=1,
        steps=2,
        windows=1,
        warmup_steps=1,
        allocator="jemalloc",
    )
    outcome = run_point(cfg, RunStore(tmp_path), force=False, command=["test"], study="t")
    assert outcome.state == "completed", outcome.result and outcome.result.error
    assert outcome.result.config["allocator"] == "jemalloc"
    assert outcome.result.metrics["throughput_img_s"] > 0
    stderr = (tmp_path / outcome.run_id / "rank0.stderr").read_text()
    assert "jemalloc" not in stderr, stderr  # its settings were taken without a complaint


def test_the_default_allocator_spares_a_synthetic_run_the_page_faults_of_glibcs_defaults(
    tmp_path: Path, monkeypatch
):
    """The cause of real data once measuring faster than synthetic data (docs/benchmarks.md):
    under glibc's own thresholds a process that never freed a large block (synthetic data)
    maps and unmaps its activations at every step; the CIFAR-10 loader's large frees had
    raised the thresholds of its process. The default fixes the thresholds for every run."""
    for name in GLIBC_TUNED:
        monkeypatch.delenv(name, raising=False)  # glibc's defaults, whatever started the tests
    default = RunConfig.make().allocator

    def faults(allocator: str, repeat: int) -> float:
        cfg = RunConfig.make(
            backend="torch-single",
            model="resnet20",
            batch_size=32,
            workers=1,
            steps=4,
            windows=1,
            warmup_steps=3,  # the heap's high-water mark is reached in the first steps
            allocator=allocator,
            repeat_id=repeat,
        )
        outcome = run_point(cfg, RunStore(tmp_path), force=False, command=["test"], study="t")
        assert outcome.state == "completed", outcome.result and outcome.result.error
        return outcome.result.metrics["page_faults_per_step"]

    tuned = faults(default, 0)
    assert tuned < 1000, tuned  # measured here: 225 and 449 against 2,797 to 6,952
    # glibc's defaults refault in most runs, not all (docs/benchmarks.md: 2 of 10 runs did
    # not): at least one of up to 3 runs shows it, by far
    system = []
    for repeat in range(3):
        system.append(faults("system", repeat))
        if system[-1] > 5 * tuned:
            break
    assert max(system) > 5 * tuned, (tuned, system)
