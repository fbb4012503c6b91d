"""Which failed launches start again on new ports (the plan as data; the race itself, made to
happen in a real run: tests/distributed/test_port_race.py)."""

from __future__ import annotations

import json
from pathlib import Path

from dlscale.config import RunConfig
from dlscale.contract.events import events_path
from dlscale.launchers import local
from dlscale.launchers.base import LaunchOutcome
from dlscale.launchers.port_retry import lost_port

TWO = {"backend": "torch-ddp", "model": "tiny", "workers": 2}


def _plan(tmp_path: Path):
    config = RunConfig.make(**TWO)
    return local.LocalLauncher().plan(config, tmp_path / "spec.json", "/py", ports=(29500,))


def _record(tmp_path: Path, rank: int, *records: dict[str, object]) -> None:
    with events_path(tmp_path, rank).open("a") as out:
        for record in records:
            out.write(json.dumps({"schema": 1, **record}) + "\n")


def test_only_a_lost_port_before_training_is_started_again(tmp_path: Path):
    plan = _plan(tmp_path)
    failed = LaunchOutcome(ok=False, returncodes={0: 1, 1: 1}, failed_rank=0, reason="rank 0")
    assert lost_port(failed, plan, tmp_path) is None  # no word of a port: not retried
    _record(tmp_path, 0, {"event": "start"}, {"event": "error", "message": "The server socket "
            "has failed to listen on any local network address. port: 29500, code: -98, name: "
            "EADDRINUSE, message: address already in use"})  # fmt: skip
    assert "could not bind a port" in (lost_port(failed, plan, tmp_path) or "")
    assert lost_port(LaunchOutcome(ok=True, returncodes={0: 0}), plan, tmp_path) is None
    _record(tmp_path, 1, {"event": "start"}, {"event": "window", "kind": "measure"})
    assert lost_port(failed, plan, tmp_path) is None  # rank 1 trained: a failure of the run
    _record(tmp_path, 1, {"event": "start"})  # a later attempt, which has not trained
    assert lost_port(failed, plan, tmp_path) is not None
