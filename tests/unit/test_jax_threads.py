"""A JAX process given fewer threads than the CPUs it may use is pinned to that many of them:
XLA sizes its pool from the affinity mask, and the XLA_FLAGS meant to make it single-threaded
left it on every core (docs/benchmarks.md, "JAX"). Each test pins a process of its own."""

import json
import os
import subprocess
import sys

CONFINE = (
    "import json, os, sys\n"
    "from dlscale.frameworks.jax.env import confine\n"
    "chosen = confine(int(sys.argv[1]), int(sys.argv[2]))\n"
    "print(json.dumps([chosen, sorted(os.sched_getaffinity(0))]))\n"
)


def _confine(threads: int, local_rank: int) -> list:
    done = subprocess.run(
        [sys.executable, "-c", CONFINE, str(threads), str(local_rank)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def test_each_local_rank_gets_its_own_share_of_the_cpus_it_may_use():
    cpus = sorted(os.sched_getaffinity(0))
    assert len(cpus) >= 2, "these tests need 2 CPUs (CI has 2)"
    assert _confine(1, 0) == [[cpus[0]], [cpus[0]]]
    assert _confine(1, 1) == [[cpus[1]], [cpus[1]]]
    assert _confine(1, len(cpus)) == [[cpus[0]], [cpus[0]]]  # more ranks than CPUs: wrap
    # as many threads as CPUs (or more): left as the launcher set it
    assert _confine(len(cpus), 0) == [None, cpus]
    assert _confine(len(cpus) + 1, 3) == [None, cpus]
