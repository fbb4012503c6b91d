"""The local launcher's plan as data: nothing is started here."""

from pathlib import Path

from dlscale.config import RunConfig
from dlscale.launchers.local import LocalLauncher, thread_budget


def test_plan_sets_rank_variables_and_thread_budget():
    cfg = RunConfig(workers=2, model="tiny")
    plan = LocalLauncher().plan(cfg, Path("/r/x/spec.json"), "/py", port=29555, cores=8)
    assert plan.threads_per_worker == 4 and plan.warnings == ()
    assert [p.rank for p in plan.processes] == [0, 1]
    p1 = plan.processes[1]
    assert p1.argv == ("/py", "-m", "dlscale.worker", "/r/x/spec.json")
    assert {
        k: p1.env[k]
        for k in (
            "RANK",
            "LOCAL_RANK",
            "WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
            "OMP_NUM_THREADS",
            "DLSCALE_THREADS",
        )
    } == {
        "RANK": "1",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29555",
        "OMP_NUM_THREADS": "4",
        "DLSCALE_THREADS": "4",
    }
    assert p1.stderr == Path("/r/x/rank1.stderr")


def test_oversubscription_warns():
    threads, warnings = thread_budget(RunConfig(workers=4, threads_per_worker=2), cores=2)
    assert threads == 2
    assert warnings and "oversubscribed" in warnings[0]
    assert thread_budget(RunConfig(workers=4), cores=2) == (
        1,
        [
            "4 workers x 1 threads = 4 threads on 2 cores: oversubscribed, "
            "expect lower and noisier throughput"
        ],
    )
