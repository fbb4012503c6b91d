"""The local launcher's plan as data: nothing is started here."""

from pathlib import Path

from dlscale.config import RunConfig
from dlscale.launchers.base import thread_budget
from dlscale.launchers.local import LocalLauncher


def test_plan_sets_rank_variables_and_thread_budget():
    cfg = RunConfig(workers=2, model="tiny")
    plan = LocalLauncher().plan(cfg, Path("/r/x/spec.json"), "/py", ports=(29555,), cores=8)
    assert plan.threads_per_worker == 4 and plan.warnings == ()
    assert [list(e.ranks) for e in plan.entries] == [[0], [1]]
    assert plan.addresses.ports == (29555,) and plan.layout.size == 2
    p1 = plan.entries[1]
    assert p1.argv == ("/py", "-P", "-m", "dlscale.worker", "/r/x/spec.json")
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
            "DLSCALE_RANK",
        )
    } == {
        "RANK": "1",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29555",
        "OMP_NUM_THREADS": "4",
        "DLSCALE_THREADS": "4",
        "DLSCALE_RANK": "1",
    }
    assert p1.stderr == Path("/r/x/rank1.stderr")
    # The worker path holds links to dlscale, never the parent's site-packages.
    assert p1.env["PYTHONPATH"].split(":")[0] == "/r/x/pythonpath"


def test_parameter_server_roles_take_the_ranks_after_the_workers():
    cfg = RunConfig.make(backend="torch-ps", workers=2, model="tiny", num_servers=2)
    plan = LocalLauncher().plan(cfg, Path("/r/x/spec.json"), "/py", ports=(29555,), cores=8)
    roles = [(p.role, p.index, p.trains) for p in plan.layout.processes]
    assert roles == [
        ("worker", 0, True),
        ("worker", 1, True),
        ("server", 0, False),
        ("server", 1, False),
    ]
    assert plan.layout.replicas == 2 and plan.layout.training_ranks == [0, 1]
    assert [e.env["RANK"] for e in plan.entries] == ["0", "1", "2", "3"]
    assert plan.threads_per_worker == 2  # 8 cores over 4 processes


def test_oversubscription_warns():
    threads, warnings = thread_budget(4, 2, cores=2)
    assert threads == 2
    assert warnings and "oversubscribed" in warnings[0]
    assert thread_budget(4, None, cores=2) == (
        1,
        [
            "4 processes x 1 threads = 4 threads on 2 cores: oversubscribed, "
            "expect lower and noisier throughput"
        ],
    )


def test_each_emulated_node_gets_its_share_of_the_cpus_wrapping_around(monkeypatch):
    """torchrun's nodes on one machine: node k runs on the k-th share of the CPUs dlscale may
    use (its ranks times their threads), wrapping around where the nodes need more; no share
    where one node would need them all."""
    from dlscale.contract.layout import node_cpus

    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: {2, 3, 5, 7, 11, 13})
    assert [node_cpus(node, 2) for node in range(3)] == [(2, 3), (5, 7), (11, 13)]
    assert [node_cpus(node, 4) for node in range(2)] == [(2, 3, 5, 7), (11, 13, 2, 3)]
    assert node_cpus(0, 6) == node_cpus(1, 9) == ()
