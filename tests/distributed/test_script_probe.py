"""The exposed-communication probe of a user's DDP script (runtime/script_probe.py): the switch
it uses really stops and restarts DDP's all-reduce on 2 real gloo processes, and an unmodified
DDP script measured at 2 workers gets its probe windows. A script with nothing to switch (a
Horovod script) gets none: tests/unit/test_user_models.py, and DDPSync below."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dlscale.contract.events import read_events
from dlscale.frameworks.torch.script import DDPSync

pytestmark = pytest.mark.dist
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _grads_equal_across_ranks(model: torch.nn.Module) -> bool:
    grad = torch.cat([p.grad.flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(grad) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, grad)
    return all(torch.equal(gathered[0], g) for g in gathered[1:])


def _rank(rank: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
    switch = DDPSync()
    seen = {}
    for name, on in (("off", False), ("on", True)):
        seen[f"found_{name}"] = switch(on)
        model.zero_grad()
        model(torch.full((3, 4), float(rank + 1))).sum().backward()  # each rank its own data
        seen[name] = _grads_equal_across_ranks(model)
    if rank == 0:
        Path(out).write_text(json.dumps(seen))
    dist.destroy_process_group()


def test_the_switch_stops_and_restarts_ddps_all_reduce(tmp_path: Path):
    out = tmp_path / "seen.json"
    mp.spawn(_rank, args=(str(tmp_path / "store"), str(out)), nprocs=2)
    seen = json.loads(out.read_text())
    assert seen == {"found_off": True, "off": False, "found_on": True, "on": True}


def test_no_ddp_nothing_to_switch():
    assert DDPSync()(False) is False


def _dlscale(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dlscale", *args],
        cwd=cwd, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip


@pytest.mark.parametrize(("script", "probed"), [("ddp_train.py", True)])
def test_a_ddp_scripts_exposed_communication_is_probed(tmp_path: Path, script: str, probed: bool):
    shutil.copy(SCRIPTS / script, tmp_path / script)
    run = _dlscale(
        tmp_path, "run", "--script", script, "--workers", "2", "--warmup-steps", "1",
        "--steps", "3", "--windows", "2", "--set", "comm_probe_steps=4", "--repeats", "1",
        "--json", "--", "--epochs", "4", "--batch-size", "16",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    [row] = [json.loads(x) for x in run.stdout.splitlines() if x.startswith('{"kind": "point"')]
    run_dir = next((tmp_path / "dlscale-results").glob("*-w2-*"))
    for rank in (0, 1):
        kinds = [e["kind"] for e in read_events(run_dir / f"events.rank{rank}.jsonl")
                 if e["event"] == "window"]  # fmt: skip
        assert kinds == ["measure", "measure"] + (["probe", "nosync"] if probed else [])
        if probed:  # 4 timed steps of each kind, after one warm-up of each
            probe = [e for e in read_events(run_dir / f"events.rank{rank}.jsonl")
                     if e["event"] == "window" and e["kind"] != "measure"]  # fmt: skip
            assert [(w["steps"], w["samples"]) for w in probe] == [(4, 64), (4, 64)]
    assert (row["exposed_comm_fraction"] is not None) == probed
