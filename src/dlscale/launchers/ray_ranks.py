"""The ranks of a point as Ray actors: each actor, placed in its rank's bundle, starts the
rank's command on its node as the local launcher would (its own process group, dying with
the actor: :func:`dlscale.launchers.processes.start_entries`), waits for it and stops it.

The driver (``dlscale run``) asks each actor for its rank's exit once a second (a call that
returns as soon as the command ends), so watching costs the nodes nothing while they train. An
actor that dies (its node lost, its process killed) is the rank's failure, said in Ray's words;
Ray kills the actors when the driver goes, whatever kills it, and each command then dies with
its actor. Every rank is told where all the others were placed (``DLSCALE_RAY_HOSTS``), its
local rank among those on its node, and the Ray facts its result records.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import socket
import time
from typing import Any

from dlscale.contract.errors import UserError
from dlscale.contract.layout import Addresses
from dlscale.launchers.base import PlanEntry, Running
from dlscale.launchers.processes import GRACE_S, LocalProcesses, start_entries
from dlscale.launchers.ray_cluster import RayCluster, where

HOSTS_ENV = "DLSCALE_RAY_HOSTS"
"""Each rank's node address, comma-separated in rank order (read by ``RayLauncher.hosts``)."""
WAIT_S = 1.0
"""How long one call waits for a rank's exit before the driver asks again."""
START_TIMEOUT_S = 120.0
"""How long the actors may take to start their commands (a node importing dlscale)."""
DIED = -int(signal.SIGKILL)
"""The exit code a rank whose actor died is given."""


class RankProcess:
    """A Ray actor (``ray.remote(RankProcess)``): one rank's command on the actor's node."""

    def __init__(self) -> None:
        self.running: LocalProcesses | None = None

    def start(self, entry: PlanEntry) -> str:
        import ray

        node = {"DLSCALE_RAY_NODE_ID": ray.get_runtime_context().get_node_id()}
        self.running = start_entries((dataclasses.replace(entry, env={**entry.env, **node}),))
        return socket.gethostname()

    def wait(self, timeout_s: float) -> int | None:
        """The command's exit code, or None if it still runs after ``timeout_s``."""
        assert self.running is not None
        deadline = time.monotonic() + timeout_s
        while (code := self.running.poll()[0]) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return code

    def stop(self) -> int | None:
        """Stop the command (SIGTERM, then SIGKILL after a grace); its exit code."""
        if self.running is None:
            return None
        self.running.stop()
        return self.running.poll()[0]


class RayRanks(Running):
    """The started actors, one an entry (each entry is one rank)."""

    def __init__(self, cluster: RayCluster, entries: tuple[PlanEntry, ...], env: dict[str, str]):
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.ray = ray = cluster.ray
        self.cluster = cluster
        self.codes: list[int | None] = [None] * len(entries)
        self.deaths: dict[int, str] = {}
        self.pending: list[Any] = [None] * len(entries)
        """Each rank's outstanding call for its exit (None: none, the rank ended or stopped)."""
        actor = ray.remote(RankProcess)
        self.actors = [
            actor.options(
                num_cpus=cluster.bundles[i].get("CPU", 0.0),
                num_gpus=cluster.bundles[i].get("GPU", 0.0),
                max_restarts=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    cluster.group, placement_group_bundle_index=i
                ),
            ).remote()
            for i in range(len(entries))
        ]
        addresses = Addresses(hosts=cluster.node_ips, ports=())
        started = [
            self.actors[i].start.remote(_placed(entry, i, addresses, env))
            for i, entry in enumerate(entries)
        ]
        try:
            ray.get(started, timeout=START_TIMEOUT_S)
        except Exception as error:
            self.stop()
            raise UserError(_start_failure(cluster, error)) from None
        self.pending = [a.wait.remote(WAIT_S) for a in self.actors]

    def poll(self) -> list[int | None]:
        for i, ref in enumerate(self.pending):
            if ref is None:
                continue
            ready, _ = self.ray.wait([ref], timeout=0)
            if not ready:
                continue
            self.pending[i] = None
            try:
                self.codes[i] = code = self.ray.get(ref)
                if code is None:
                    self.pending[i] = self.actors[i].wait.remote(WAIT_S)
            except Exception as error:  # the actor died: its node lost, its process killed
                self._died(i, error)
        return list(self.codes)

    def stop(self, entries: list[int] | None = None) -> None:
        """Stop the chosen ranks' commands (each actor stops its own: SIGTERM, a grace, SIGKILL,
        all at once), record their exit codes, then kill the actors."""
        chosen = list(range(len(self.actors)) if entries is None else entries)
        asked = {}
        for i in chosen:
            self.pending[i] = None
            if i not in self.deaths:
                with contextlib.suppress(Exception):  # a dead actor: its command died with it
                    asked[i] = self.actors[i].stop.remote()
        for i, ref in asked.items():
            try:
                code = self.ray.get(ref, timeout=GRACE_S + 2 * WAIT_S + 10)
            except Exception as error:
                self._died(i, error)
                continue
            if self.codes[i] is None:
                self.codes[i] = code
        for i in chosen:
            with contextlib.suppress(Exception):
                self.ray.kill(self.actors[i])

    def _died(self, index: int, error: BaseException) -> None:
        if self.codes[index] is None:
            self.deaths[index] = _first_sentence(error)
            self.codes[index] = DIED

    def describe(self, index: int) -> str | None:
        if index not in self.deaths:
            return None
        node = self.cluster.node_ips[index] if index < len(self.cluster.node_ips) else "?"
        return f"its Ray actor on node {node} died ({self.deaths[index]})"


def _placed(entry: PlanEntry, rank: int, addresses: Addresses, env: dict[str, str]) -> PlanEntry:
    """The entry with what its placement says: every rank's node, its local rank."""
    placed = {
        **env,
        HOSTS_ENV: ",".join(addresses.hosts),
        "DLSCALE_LOCAL_RANK": str(addresses.same_host(rank).index(rank)),
    }
    return dataclasses.replace(entry, env={**entry.env, **placed})


def _start_failure(cluster: RayCluster, error: Exception) -> str:
    text = str(error)
    if "No module named 'dlscale'" in text:
        return (
            f"a node of {where(cluster.address)} cannot import dlscale: install dlscale and the "
            "engine's framework on every node, in the Python that Ray runs there"
        )
    if isinstance(getattr(error, "cause", None), FileNotFoundError) or "FileNotFoundError" in text:
        return (
            f"a node of {where(cluster.address)} has no {_missing(text)}: the workers' Python "
            "must be at the same path on every node (a shared file system, or the same install)"
        )
    return f"the ranks' Ray actors did not start on {where(cluster.address)}: {_last_line(error)}"


def _missing(text: str) -> str:
    for line in text.splitlines():
        if "No such file or directory" in line and "'" in line:
            return line.rsplit(":", 1)[-1].strip()
    return "interpreter at the driver's path"


def _last_line(error: BaseException) -> str:
    """The last line of Ray's error: a remote traceback ends with the exception's message."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return (lines[-1] if lines else type(error).__name__)[:300]


def _first_sentence(error: BaseException) -> str:
    """Ray's first sentence of why an actor died (``The actor is dead because its worker
    process has died``), without the paragraph of likely causes after it."""
    text = next((line.strip() for line in str(error).splitlines() if line.strip()), "")
    return (text.split(". ")[0].rstrip(".") or type(error).__name__)[:200]
