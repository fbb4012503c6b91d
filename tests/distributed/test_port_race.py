"""A port taken between planning a run and binding it (issue 42 item 7).

The ports of a run on this machine are found free when it is planned and bound seconds later;
anything may take one in between (another run's rendezvous, an outgoing connection). That run
was recorded as failed with EADDRINUSE. The race is made to happen here: the first plan's
port is one this test holds, listening, so rank 0's TCPStore cannot bind it; the run must start
again on new ports, complete, and say so in one warning line. A failure that is not a lost
port, or one after training began, is never started again (tests/unit/test_port_retry.py).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from dlscale.config import RunConfig
from dlscale.launchers import local
from dlscale.runner import run_point
from dlscale.store import RunStore

pytestmark = pytest.mark.dist

TWO = {"backend": "torch-ddp", "model": "tiny", "workers": 2, "steps": 2, "windows": 1,
       "warmup_steps": 1, "repeat_id": 0}  # fmt: skip


def test_a_run_whose_port_is_taken_before_it_binds_starts_again_on_new_ports(
    tmp_path: Path, monkeypatch
):
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind((local.LOOPBACK, 0))
    taken.listen()
    busy = taken.getsockname()[1]
    real, plans = local.free_ports, []

    def racing(count: int) -> tuple[int, ...]:
        plans.append(count)
        ports = real(count)
        return (busy, *ports[1:]) if len(plans) == 1 else ports

    monkeypatch.setattr(local, "free_ports", racing)
    warnings: list[str] = []
    config = RunConfig.make(**TWO)
    with taken:
        outcome = run_point(
            config, RunStore(tmp_path), force=True, command=["t"], study="t",
            on_warning=warnings.append,
        )  # fmt: skip
    assert outcome.result is not None and outcome.state == "completed", outcome.result
    assert len(plans) == 2
    (said,) = [w for w in warnings if "could not bind" in w]
    assert str(busy) in said and "(2 of 3)" in said and "\n" not in said
    spec = json.loads((tmp_path / outcome.run_id / "spec.json").read_text())
    assert busy not in spec["cluster"]["ports"]  # the spec the workers read is the second plan
