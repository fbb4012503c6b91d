"""The Ray cluster a point's ranks run on, and the placement group that holds their resources.

``ray_address`` empty: a local cluster of this machine's CPUs (``ray.init``), started for the
point and stopped after it. ``auto`` or ``HOST:PORT``: a running cluster, which this process
joins as a driver (so it runs on one of the cluster's nodes, as ``ray job submit`` runs a
driver on the head); it is left running. Either way the ranks' resources are one placement
group, a bundle a rank, made before any rank starts: a cluster that cannot hold it is refused
in one line. Ray is imported here and in :mod:`dlscale.launchers.ray_ranks` only, on use.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dlscale.contract.errors import UserError
from dlscale.launchers.base import Setup

CONNECT_TIMEOUT_S = 5.0
"""How long the head's port may take to accept a connection before the address is refused."""
PLACEMENT_TIMEOUT_S = 60.0
"""How long a placement group the cluster can hold may wait for other work's resources."""
_ADDRESS = re.compile(r"(?P<host>[A-Za-z0-9_.\-]{1,253}|\[[0-9A-Fa-f:]{2,45}\]):(?P<port>\d{1,5})")
SHORT_TEMP = 40
"""The longest directory a local cluster keeps its files in: its socket paths, under it, must
fit in 107 bytes (``$TMPDIR/ray`` under a long ``TMPDIR`` gives way to
``/tmp/ray-dlscale-UID``)."""
INSTALL = "pip install 'dlscale[ray]' -c constraints.txt (Ray 2.60.0; make test installs it)"


def check_address(value: Any) -> None:
    """Refuse a ``ray_address`` that is neither empty, ``auto`` nor ``HOST:PORT``."""
    if value in ("", "auto"):
        return
    text = str(value)
    if text.startswith("ray://"):
        raise UserError(
            f"ray_address {text!r} is a Ray Client address, which dlscale does not use: run "
            "dlscale on a node of the cluster (its head, say) with ray_address=auto or HEAD:PORT"
        )
    found = _ADDRESS.fullmatch(text)
    if found is None or not 0 < int(found["port"]) < 65536:
        raise UserError(
            f"ray_address {text!r} is not HOST:PORT (the head's address, e.g. 10.0.0.1:6379), "
            "auto, or empty (a local cluster for the run)"
        )


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError(f"--launcher ray needs Ray, which is not installed: {INSTALL}") from None
    return ray


def where(address: str) -> str:
    """The cluster in words: ``the Ray cluster at 10.0.0.1:6379``."""
    if not address:
        return "a local Ray cluster"
    if address == "auto":
        return "the Ray cluster this machine belongs to"
    return f"the Ray cluster at {address}"


def answers(address: str) -> None:
    """Raise :class:`UserError` when the head at ``HOST:PORT`` (for ``auto``, the one
    ``RAY_ADDRESS`` or the newest ``ray start`` here names) does not accept a connection within
    :data:`CONNECT_TIMEOUT_S` (``ray.init`` would retry for minutes)."""
    if not address:
        return
    target = _found_here() if address == "auto" else address
    host, _, port = target.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT_S):
            return
    except OSError as error:
        why = error.strerror or type(error).__name__
    named = f" at {target}" if address == "auto" else ""
    raise UserError(
        f"{where(address)}{named} does not answer ({why}): start it (ray start --head on that "
        "node) or give its head's address as ray_address=HOST:PORT"
        + (" (RAY_ADDRESS or the newest ray start here named it)" if named else "")
    )


def _found_here() -> str:
    """The ``HOST:PORT`` ``ray.init(address="auto")`` would join, found as Ray finds it."""
    from ray._private.services import canonicalize_bootstrap_address

    try:
        found = canonicalize_bootstrap_address("auto")
    except ConnectionError:
        found = None
    except ValueError:  # RAY_ADDRESS not an address: refused below in its own words
        found = os.environ.get("RAY_ADDRESS", "")
    if not found:
        raise UserError(
            "ray_address=auto: no Ray cluster runs on this machine (no RAY_ADDRESS, no ray start "
            "here): run dlscale on a node of the cluster, give its head as "
            "ray_address=HOST:PORT, or leave ray_address empty for a local cluster"
        )
    if _ADDRESS.fullmatch(str(found)) is None:
        raise UserError(
            f"ray_address=auto: RAY_ADDRESS {found!r} is not HOST:PORT: unset it, or give the "
            "head's address as ray_address=HOST:PORT"
        )
    return str(found)


def connect(address: str, cpus: int) -> Any:
    """Join the cluster at ``address``, or start a local one of ``cpus`` CPUs (and the GPUs Ray
    finds here); the ``ray`` module, connected."""
    ray = import_ray()
    answers(address)
    settings: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "configure_logging": False,
    }
    if address:
        settings["address"] = address
    else:  # "local": a new cluster, not the one RAY_ADDRESS or ray start's file last named
        settings["address"] = "local"
        settings["num_cpus"] = cpus
        from ray._common.utils import get_default_ray_temp_dir

        if len(get_default_ray_temp_dir()) > SHORT_TEMP:  # its sockets' paths would not fit
            settings["_temp_dir"] = f"/tmp/ray-dlscale-{os.getuid()}"
    try:
        with _stderr_dropped():
            ray.init(**settings)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise UserError(_join_failure(address, error)) from None
    return ray


def _join_failure(address: str, error: BaseException) -> str:
    chain: list[str] = []
    cause: BaseException | None = error
    while cause is not None and len(chain) < 8:
        chain.append(str(cause))
        cause = cause.__cause__ or cause.__context__
    if any("InvalidAuthToken" in text for text in chain):
        return (
            f"{where(address)} requires Ray's token authentication, which Ray turns on for an "
            "address given only when asked: set RAY_AUTH_MODE=token where dlscale runs (the "
            "cluster's token in ~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN), or "
            "run on a node of the cluster with ray_address=auto"
        )
    first = next((line for line in str(error).splitlines() if line.strip()), type(error).__name__)
    return (
        f"cannot join {where(address)}: {first.strip()[:300]} (is Ray running there? ray status "
        "shows it; dlscale runs on a node of the cluster)"
    )


@contextlib.contextmanager
def _stderr_dropped() -> Iterator[None]:
    """Ray's core prints each retry of a connection to the process's standard error (a line a
    second for 20 s when the cluster refuses it): while it connects, what it prints there is
    dropped; a failure is said in one line instead (:func:`_join_failure`)."""
    saved = os.dup(2)
    sink = os.open(os.devnull, os.O_WRONLY)
    os.dup2(sink, 2)
    os.close(sink)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def alive_nodes(ray: Any) -> list[dict[str, Any]]:
    return [node for node in ray.nodes() if node.get("Alive")]


@dataclass
class RayCluster(Setup):
    """The cluster joined (or started) and the ranks' placement group, for one point."""

    address: str
    bundles: tuple[dict[str, float], ...]
    strategy: str
    cpus: int = 1
    """A local cluster's CPUs (at least the bundles' sum: an oversubscribed plan still runs)."""
    ray: Any = field(default=None, repr=False)
    group: Any = field(default=None, repr=False)
    node_ips: tuple[str, ...] = ()
    """Each bundle's (rank's) node address, once placed."""
    node_ids: tuple[str, ...] = ()

    def describe(self) -> list[str]:
        bundle = ", ".join(f"{k}: {v:g}" for k, v in self.bundles[0].items())
        joined = (
            f"join {where(self.address)} (ray.init, address={self.address})"
            if self.address
            else f"start a local Ray cluster of {self.cpus} CPUs"
            + (" and the GPUs Ray finds" if "GPU" in self.bundles[0] else "")
            + " (ray.init; stopped after the run)"
        )
        return [
            joined,
            f"a placement group of {len(self.bundles)} bundles {{{bundle}}}, strategy "
            f"{self.strategy.upper()}: one Ray actor a rank, which starts the rank's command",
        ]

    def create(self) -> None:
        self.ray = connect(self.address, self.cpus)
        try:
            self._place()
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        ray, self.ray = self.ray, None
        if ray is None:
            return
        with contextlib.suppress(Exception):
            if self.group is not None:
                from ray.util.placement_group import remove_placement_group

                remove_placement_group(self.group)
        with contextlib.suppress(Exception):
            ray.shutdown()

    def _place(self) -> None:
        from ray.util.placement_group import placement_group, placement_group_table

        self._check_fits()
        self.group = placement_group(list(self.bundles), strategy=self.strategy.upper())
        if not self.group.wait(PLACEMENT_TIMEOUT_S):
            raise UserError(
                f"{where(self.address)} did not place the ranks' {len(self.bundles)} bundles in "
                f"{PLACEMENT_TIMEOUT_S:.0f} s: other work holds its resources (ray status shows "
                "it); run again when they are free"
            )
        table = placement_group_table(self.group)["bundles_to_node_id"]
        ips = {node["NodeID"]: node["NodeManagerAddress"] for node in alive_nodes(self.ray)}
        self.node_ids = tuple(table[i] for i in range(len(self.bundles)))
        self.node_ips = tuple(ips[node] for node in self.node_ids)

    def _check_fits(self) -> None:
        nodes = alive_nodes(self.ray)
        need = {k: sum(b.get(k, 0.0) for b in self.bundles) for k in self.bundles[0]}
        total = {k: sum(n["Resources"].get(k, 0.0) for n in nodes) for k in need}
        short = [k for k in need if total[k] < need[k]]
        if self.strategy == "strict_spread" and len(nodes) < len(self.bundles):
            short.append("nodes")
        if short:
            has = ", ".join(f"{total[k]:g} {k}" for k in need)
            raise UserError(
                f"{where(self.address)} has {len(nodes)} node(s) with {has}; the point needs "
                f"{len(self.bundles)} bundles of {self.bundles[0]}"
                + (" on as many nodes (strict_spread)" if "nodes" in short else "")
                + ": fewer workers or threads_per_worker, or a larger cluster"
            )
