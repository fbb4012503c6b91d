import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from dlscale.contract.weights_cache import CACHE_ENV

pytest_plugins = ["tests.runs"]  # shared_store: a run several tests read, made once a session

ONE_AT_A_TIME = {"tests/cluster/": "cluster"}
"""Test folders whose tests share something of the machine's and so run one at a time, in one
pytest-xdist group: tests/cluster makes network namespaces of fixed names, an emulated test bed
whose host names go into /etc/hosts, and the one Slurm a machine can run."""

SPREAD = {
    "tests/distributed/test_async_rule.py",
    "tests/distributed/test_equivalence.py",
    "tests/distributed/test_local_runs.py",
    "tests/distributed/test_mxnet.py",
    "tests/distributed/test_tensorflow.py",
    "tests/distributed/test_torchrun.py",
    "tests/distributed/test_worker_isolation.py",
    "tests/e2e/test_cli.py",
    "tests/e2e/test_imagenet_cli.py",
    "tests/e2e/test_own_models_frameworks.py",
    "tests/e2e/test_own_training.py",
}
"""Long test files whose tests run on any pytest-xdist worker, each on its own: their tests
share no fixture wider than a test's but the runs of the shared store (tests/runs.py). Every
other file is one group, so that its module-scoped fixtures (a study run once, TensorFlow
imported once) are made once, not once per worker."""


@pytest.hookimpl(wrapper=True)  # around pytest-xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]):
    """Each test's pytest-xdist group (scripts/run-tests.sh runs ``--dist loadgroup``)."""
    for item in items:
        path = item.nodeid.split("::")[0]
        group = next((g for folder, g in ONE_AT_A_TIME.items() if path.startswith(folder)), path)
        if group != path or path not in SPREAD:
            item.add_marker(pytest.mark.xdist_group(group))
    return (yield)


def pytest_configure(config: pytest.Config) -> None:
    """pytest-xdist 3.8 groups a test by renaming it (``_nodeid``); pytest 9.2 no longer
    reads that name, so the groups were lost without a word and tests/cluster's tests ran
    side by side and collided (pytest-dev/pytest-xdist#1386): say so instead.

    The workers' cache of initial weights (dlscale.contract.weights_cache) is one folder for
    the whole session, its pytest-xdist workers included (they inherit the variable), and
    never the user's own: the first TensorFlow or MXNet worker of a model builds PyTorch's
    weights, the later ones read them (tests/unit/test_weights_cache.py holds both ways)."""
    if CACHE_ENV not in os.environ and not hasattr(config, "workerinput"):
        os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="dlscale-test-cache-")
        config.add_cleanup(lambda: shutil.rmtree(os.environ.pop(CACHE_ENV), ignore_errors=True))
    uses_the_name = "_nodeid" in pytest.Item.nodeid.fget.__code__.co_names  # type: ignore[attr-defined]
    if config.getoption("dist", "no") == "loadgroup" and not uses_the_name:
        raise pytest.UsageError(
            f"pytest {pytest.__version__} ignores pytest-xdist's --dist loadgroup groups "
            "(pytest-dev/pytest-xdist#1386): install the pytest that constraints.txt allows "
            "(make test does), or run without -n"
        )


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
