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
from dlscale.runtime.allocator import GLIBC_TUNED, PRELOADED, allocator_env
from dlscale.store import RunStore
from tests.runs import run_completed

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


def python_under(allocator: str, code: str, parent: dict[str, str]) -> subprocess.CompletedProcess:
    """``code`` run by a fresh interpreter with ``parent``'s environment and ``allocator``'s
    variables, as a worker gets them."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**parent, **allocator_env(allocator, parent)},
    )


@pytest.mark.parametrize("name", ALLOCATORS)
def test_a_process_started_with_the_variables_runs_under_that_allocator(name: str):
    done = python_under(name, ASK, clean_environment())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == name
    assert done.stderr == ""  # e.g. "<jemalloc>: Invalid conf pair" for a bad MALLOC_CONF


def test_the_parents_preload_stays_loaded_behind_the_allocator():
    env = clean_environment()
    parent = {**env, "LD_PRELOAD": str(allocator_env("tcmalloc", {})["LD_PRELOAD"])}
    ask = "from dlscale.runtime.allocator import loaded_allocator; print(loaded_allocator())"
    maps = "print(open('/proc/self/maps').read())"
    for code, expected in ((ask, "jemalloc"), (maps, "libtcmalloc_minimal")):
        done = python_under("jemalloc", code, parent)
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
    result, run_dir = run_completed(cfg, RunStore(tmp_path))
    assert result.config["allocator"] == "jemalloc"
    assert result.metrics["throughput_samples_s"] > 0
    stderr = (run_dir / "rank0.stderr").read_text()
    assert "jemalloc" not in stderr, stderr  # its settings were taken without a complaint


REFAULTS = (
    "import ctypes, resource;"
    "libc = ctypes.CDLL(None); libc.malloc.restype = ctypes.c_void_p;"
    "libc.malloc.argtypes = [ctypes.c_size_t]; libc.free.argtypes = [ctypes.c_void_p];"
    "size = 64 << 20\n"
    "def step():\n"
    "    block = libc.malloc(size); ctypes.memset(block, 1, size); libc.free(block)\n"
    "step(); before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
    "for _ in range(4): step()\n"
    "print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 4)"
)
"""A step's 64 MiB buffer, written and freed four times: the minor page faults per step. Above
glibc's largest dynamic mmap threshold (32 MiB on 64-bit), so glibc as is maps and unmaps it at
every step, whatever the process's history: 16,384 faults (64 MiB of 4 KiB pages) each time."""


def test_the_default_allocator_keeps_a_freed_step_buffer_where_glibc_refaults_it():
    """The mechanism behind the default (docs/benchmarks.md, "Allocator"), shown where it
    is the same in every run: a buffer over glibc's mmap threshold is unmapped when freed and
    faulted in again at the next step, unless the thresholds are fixed as the default fixes
    them; the variables are the ones a worker gets (allocator_env)."""
    env = clean_environment()

    def faults(allocator: str) -> int:
        done = python_under(allocator, REFAULTS, env)
        assert done.returncode == 0, done.stderr
        return int(done.stdout)

    assert faults("system") >= 16_000  # every 4 KiB page of the 64 MiB, each step
    assert faults(RunConfig.make().allocator) < 100  # kept in the heap: measured 0


def test_a_run_under_the_default_allocator_counts_few_page_faults_per_step(
    tmp_path: Path, monkeypatch
):
    """The default for a whole run: a synthetic run of ResNet-20 refaults next to nothing per
    measured step (glibc as is refaults 25,000 pages a step of ResNet-44 in most runs, not in
    all: benchmarks/allocator.py measures that side by side, docs/benchmarks.md)."""
    for name in GLIBC_TUNED:
        monkeypatch.delenv(name, raising=False)  # glibc's defaults, whatever started the tests
    cfg = RunConfig.make(
        backend="torch-single",
        model="resnet20",
        batch_size=32,
        workers=1,
        steps=4,
        windows=1,
        warmup_steps=3,  # the heap's high-water mark is reached in the first steps
    )
    assert cfg.allocator == "glibc-tuned"
    result, _ = run_completed(cfg, RunStore(tmp_path))
    faults = result.metrics["page_faults_per_step"]
    assert 0 <= faults < 1000, faults  # measured here: 225 and 449 against 2,797 to 6,952
