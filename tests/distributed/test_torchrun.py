"""The real torchrun (torch.distributed.run) starting the ranks: one node with the c10d
rendezvous, two nodes' agents side by side, the same numbers as the local launcher, other
engines under it, and a killed rank."""

import json
from pathlib import Path

import pytest

from dlscale.store import RunStore
from tests.distributed.processes import kill_rank_and_check_the_run_fails

pytestmark = pytest.mark.dist

TINY = ("--model", "tiny", "--dataset", "digits", "--steps", "4", "--windows", "1")
TINY += ("--warmup-steps", "1", "--repeats", "1", "--set", "machine_reference=false")


def _point(cli, results: Path, *flags: str) -> dict:
    run = cli("run", *TINY, "--workers", "2", "--json", "--results", str(results), *flags)
    assert run.returncode == 0, run.stderr
    (point,) = [r for r in map(json.loads, run.stdout.splitlines()) if r["kind"] == "point"]
    assert point["status"] == "completed", point["error"]
    return point


@pytest.mark.parametrize("nnodes", [1, 2])
def test_torchrun_trains_exactly_as_the_local_launcher(tmp_path: Path, cli, nnodes):
    """DDP on 2 ranks sums 2 gradients (exact in either order): the same losses to the bit."""
    local = _point(cli, tmp_path / "local", "--backend", "torch-ddp")
    under = _point(
        cli,
        tmp_path / "torchrun",
        "--backend",
        "torch-ddp",
        "--launcher",
        "torchrun",
        "--set",
        f"nnodes={nnodes}",
    )
    assert under["final_train_loss"] == local["final_train_loss"]
    (result,) = RunStore(tmp_path / "torchrun").results()
    assert result["config"]["launcher"] == "torchrun"
    run_dir = tmp_path / "torchrun" / result["run_id"]
    agents = sorted(p.name for p in run_dir.glob("torchrun*.stderr"))
    assert agents == [f"torchrun{n}.stderr" for n in range(nnodes)]
    # torchrun's own store served the rendezvous: the ranks saw its variables
    starts = [json.loads(line) for line in (run_dir / "events.rank1.jsonl").open()][:1]
    assert starts[0]["world_size"] == 2 and starts[0]["local_rank"] == (1 if nnodes == 1 else 0)


def test_other_engines_run_under_torchrun_on_their_own_rendezvous(tmp_path: Path, cli):
    """tf-ps (chief, workers, ps task) takes its rank from torchrun and TF_CONFIG from the
    plan; its ps task, which never exits, is stopped once training ended."""
    point = _point(
        cli,
        tmp_path,
        "--backend",
        "tf-ps",
        "--launcher",
        "torchrun",
        "--set",
        "nnodes=2",
        "--set",
        "resource_guard=false",
    )
    assert point["eval_accuracy"] is not None


def test_an_uneven_split_between_nodes_is_one_line(tmp_path: Path, cli):
    run = cli(
        "run", *TINY, "--workers", "3", "--backend", "torch-ddp", "--launcher", "torchrun",
        "--set", "nnodes=2", "--results", str(tmp_path),
    )  # fmt: skip
    assert run.returncode == 2
    assert "cannot split the run's 3 processes" in run.stderr and "Traceback" not in run.stderr


def test_a_killed_rank_fails_the_run_named_by_torchrun(tmp_path: Path):
    kill_rank_and_check_the_run_fails(
        tmp_path,
        "torch-ddp",
        ranks=2,
        rank=1,
        role="worker",
        extra=("--launcher", "torchrun"),
        reason="rank 1 (command of ranks [0, 1]) exited with code 1",
    )
