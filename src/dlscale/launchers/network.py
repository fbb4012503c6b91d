"""Emulated multi-node networks (``network = "1gbit:100us"``): each node in its own namespace.

A run's nodes (torchrun's agents) each get a Linux network namespace, joined through a switch:

* a switch namespace holds a bridge (``br0``); node k's namespace holds one end of a veth pair,
  named ``dls0``, with the address ``10.99.0.(100+k)/24``; the other end is a port of the bridge
  (``p<k>``). Nothing is added to or changed in the machine's own network namespace, so the
  machine's interfaces, routes and firewall are untouched and runs side by side never collide
  (each has its own switch).
* Every interface that carries traffic between nodes is shaped on its way out by tc: a token
  bucket (``tbf``) at the link's rate and, for a latency, netem's delay of half the one-way
  latency inside it. A packet from node a to node b leaves through a's ``dls0`` (rate,
  latency / 2) and reaches b through b's port (rate, latency / 2): each node has a full-duplex
  link of ``rate`` to a non-blocking switch, and the one-way latency between two nodes is
  ``latency``. Ranks on one node talk over that node's own loopback, unshaped, as on a real
  node.
* The ranks use only the namespaces' addresses: every rank's host in the plan is its node's
  ``10.99.0.x``, and the socket libraries are told the interface (``GLOO_SOCKET_IFNAME``,
  ``HOROVOD_GLOO_IFACE``, ``DMLC_INTERFACE``, ``NCCL_SOCKET_IFNAME``, ``TP_SOCKET_IFNAME``).

Creating namespaces needs root and iproute2 (``ip``, ``tc``). The namespaces go when the run
ends, whatever ended it; what tc counted on each link is kept in the run's ``network.json``. A
``kill -9`` of dlscale leaves them behind (the ranks in them die with it); the next run with a
network removes them: each network's maker is recorded (pid and start time, in
``/run/dlscale-netns``), and a ``dlscale-*`` namespace whose maker is gone and that holds no
process is deleted (one with no record: once it is a minute old).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlscale.contract.errors import UserError
from dlscale.contract.files import make_directory, read_small_file, write_atomic
from dlscale.launchers import host_list
from dlscale.launchers.base import Setup
from dlscale.launchers.links import Link, shaping
from dlscale.runtime.procfs import is_alive, process_start
from dlscale.store.locks import parse_owner

INTERFACE = "dls0"
"""The node's interface to the switch, the same name in every node's namespace."""
SUBNET = "10.99.0"
FIRST_HOST = 100
MAX_NODES = 150
PREFIX = "dlscale-"
STALE_AFTER_S = 60.0
"""A ``dlscale-*`` namespace without processes this old is left over from a killed run."""
IP_TIMEOUT_S = 30.0
NETNS_ETC = Path("/etc/netns")
"""``ip netns exec NAME`` mounts the files of ``/etc/netns/NAME`` over ``/etc``'s."""
NO_NAME_SERVER = (
    "# an emulated node: its names are in its hosts file, and no name server answers here\n"
    "nameserver 127.0.0.1\n"
)
"""An emulated node's ``resolv.conf``. Its namespace cannot reach this machine's name server,
so a name missing from its hosts file (glibc asks for a name's IPv6 address first, which the
hosts file does not hold) waited 10 s for that server: torch.distributed's rendezvous started
17 s late on every node. Asked on the node's own loopback, nobody answers and the lookup
fails at once, as it would on a cluster whose name server lacks the name."""
OWNERS = Path("/run/dlscale-netns")
"""``<network name>.json``: the dlscale process that made a network (pid, start time)."""


def address(node: int) -> str:
    """Node ``node``'s address, 10.99.0.100+k: one text width for every node, because
    torchrun's c10d rendezvous numbers the nodes in the text order of their addresses."""
    return f"{SUBNET}.{FIRST_HOST + node}"


def interface_env() -> dict[str, str]:
    """The variables that make each engine's sockets use the node's link."""
    return host_list.interface_env(INTERFACE)


@dataclass(frozen=True)
class EmulatedNetwork(Setup):
    """The namespaces, links and shaping of one run: its commands as data, then made real.

    ``name`` is unique to the run (its directory), so the namespaces of runs side by side never
    share a name.
    """

    link: Link
    nodes: int
    name: str
    record: Path
    """Where tc's counters of every link are written when the network is removed."""

    def __post_init__(self) -> None:
        if not 2 <= self.nodes <= MAX_NODES:
            raise UserError(
                f"an emulated network joins 2 to {MAX_NODES} nodes, not {self.nodes}: set nnodes"
            )

    def namespace(self, node: int) -> str:
        return f"{self.name}-{node}"

    @property
    def switch(self) -> str:
        return f"{self.name}-sw"

    def exec_prefix(self, node: int) -> tuple[str, ...]:
        """What runs a node's command inside its namespace."""
        return ("ip", "netns", "exec", self.namespace(node))

    def hosts_file(self, node: int) -> tuple[Path, str]:
        """Node ``node``'s ``/etc/hosts`` in its namespace: this machine's name at the node's
        address, as a real node resolves its own name. Libraries that bind to the address of
        ``gethostname()`` need it (Horovod 0.28's process-set contexts ignore
        HOROVOD_GLOO_IFACE and found 127.0.0.1, which the other node cannot reach)."""
        names = " ".join(dict.fromkeys((socket.gethostname(), socket.gethostname().split(".")[0])))
        text = f"127.0.0.1 localhost\n::1 localhost\n{address(node)} {names}\n"
        return NETNS_ETC / self.namespace(node) / "hosts", text

    def describe(self) -> list[str]:
        lines = [shlex.join(command) for command in self.commands()]
        for node in range(self.nodes):
            path, text = self.hosts_file(node)
            lines.append(f"write {path}: {text.strip().splitlines()[-1]}")
        return lines

    def commands(self) -> list[tuple[str, ...]]:
        """Every ip and tc command that builds the network, in order (``--dry-run``)."""
        sw = self.switch
        out: list[tuple[str, ...]] = [
            ("ip", "netns", "add", sw),
            ("ip", "-n", sw, "link", "set", "lo", "up"),
            ("ip", "-n", sw, "link", "add", "br0", "type", "bridge"),
            ("ip", "-n", sw, "link", "set", "br0", "up"),
        ]
        for node in range(self.nodes):
            ns, port = self.namespace(node), f"p{node}"
            out += [
                ("ip", "netns", "add", ns),
                ("ip", "-n", ns, "link", "set", "lo", "up"),
                tuple(
                    f"ip -n {sw} link add {port} type veth peer name {INTERFACE} netns {ns}".split()
                ),
                ("ip", "-n", sw, "link", "set", port, "master", "br0"),
                ("ip", "-n", sw, "link", "set", port, "up"),
                ("ip", "-n", ns, "addr", "add", f"{address(node)}/24", "dev", INTERFACE),
                ("ip", "-n", ns, "link", "set", INTERFACE, "up"),
                *shaping(self.link, ns, INTERFACE),
                *shaping(self.link, sw, port),
            ]
        return out

    def create(self) -> None:
        """Build the network (after removing any left over by a killed run). A failure removes
        what was built and raises :class:`UserError` naming the command and its message."""
        remove_stale()
        self.remove()  # a namespace of this run's name left by an earlier, killed attempt
        try:
            OWNERS.mkdir(parents=True, exist_ok=True)
            owner = {"pid": os.getpid(), "start": process_start(os.getpid())}
            (OWNERS / f"{self.name}.json").write_text(json.dumps(owner))
            for command in self.commands():
                run_ip(command)
            for node in range(self.nodes):
                path, text = self.hosts_file(node)
                write_node_etc(path.parent, text)
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Write tc's counters of every shaped link to ``record``, then delete the namespaces
        (their interfaces go with them). Safe to call twice, or on a network never built."""
        names = [self.namespace(n) for n in range(self.nodes)] + [self.switch]
        try:
            existing = set(namespaces())
        except UserError:  # ip itself failed: try every name
            existing = set(names)
        if self.namespace(0) in existing:
            with contextlib.suppress(OSError, UserError):
                self.record.write_text(json.dumps(self.counters(), indent=1) + "\n")
        for name in names:
            if name in existing:
                with contextlib.suppress(UserError):
                    run_ip(("ip", "netns", "delete", name))
            shutil.rmtree(NETNS_ETC / name, ignore_errors=True)
        with contextlib.suppress(OSError):
            (OWNERS / f"{self.name}.json").unlink(missing_ok=True)

    def counters(self) -> dict[str, Any]:
        """What went over every node's link, each way (the interface's counters), and the
        packets its shaping dropped."""
        links = []
        for node in range(self.nodes):
            ways = {}
            for way, namespace, device in (
                ("out", self.namespace(node), INTERFACE),
                ("in", self.switch, f"p{node}"),
            ):
                (link,) = json.loads(
                    run_ip(("ip", "-n", namespace, "-s", "-j", "link", "show", "dev", device))
                )
                sent = link.get("stats64", {}).get("tx", {})
                qdiscs = json.loads(
                    run_ip(("tc", "-n", namespace, "-s", "-j", "qdisc", "show", "dev", device))
                    or "[]"
                )
                ways[way] = {
                    "bytes": sent.get("bytes"),
                    "packets": sent.get("packets"),
                    "shaping_drops": sum(int(q.get("drops", 0)) for q in qdiscs),
                }
            links.append({"node": node, "address": address(node), **ways})
        return {
            "rate_bit_s": self.link.rate_bit_s,
            "latency_s": self.link.latency_s,
            "links": links,
        }


def namespaces() -> list[str]:
    """The names of this machine's network namespaces."""
    text = run_ip(("ip", "-j", "netns", "list"))
    return [entry["name"] for entry in json.loads(text or "[]")]


def write_node_etc(etc: Path, hosts: str) -> None:
    """An emulated node's ``/etc`` files (``/etc/netns/NAME``): its hosts file and
    :data:`NO_NAME_SERVER`; before its first process starts (``ip netns exec`` mounts them)."""
    etc.parent.mkdir(parents=True, exist_ok=True)
    make_directory(etc)  # a link or a file planted there is refused, never written through
    for name, text in (("hosts", hosts), ("resolv.conf", NO_NAME_SERVER)):
        write_atomic(etc / name, text)


def remove_stale() -> None:
    """Delete the ``dlscale-*`` namespaces (and their ``/etc/netns`` files) left by a run whose
    dlscale was killed: its maker is gone and no process is left in it (the ranks died with
    dlscale); one without a record of its maker once it is a minute old."""
    live = namespaces()
    for name in live:
        if not name.startswith(PREFIX):
            continue
        network = name.rpartition("-")[0]
        if not _maker_gone(network, name) or run_ip(("ip", "netns", "pids", name)).strip():
            continue
        with contextlib.suppress(UserError):
            run_ip(("ip", "netns", "delete", name))
        shutil.rmtree(NETNS_ETC / name, ignore_errors=True)
    for folder in NETNS_ETC.glob(f"{PREFIX}*"):
        if folder.name not in live and _maker_gone(folder.name.rpartition("-")[0], None):
            shutil.rmtree(folder, ignore_errors=True)
    for record in OWNERS.glob(f"{PREFIX}*.json"):
        if not any(n.startswith(f"{record.stem}-") for n in live) and _maker_gone(
            record.stem, None
        ):
            record.unlink(missing_ok=True)


def _maker_gone(network: str, namespace: str | None) -> bool:
    """Whether the process that made ``network`` is gone; without its record, whether
    ``namespace`` (when given) is over a minute old."""
    try:
        owner = parse_owner(read_small_file(OWNERS / f"{network}.json"))
    except OSError:
        owner = None
    if owner is not None:
        return not is_alive(owner["pid"], owner["start"])
    if namespace is None:
        return True
    try:
        return time.time() - os.stat(f"/run/netns/{namespace}").st_mtime > STALE_AFTER_S
    except OSError:
        return False


def check_can_emulate(link: Link) -> None:
    """Before a run: root, iproute2, and (for a latency) tc's netem in this kernel."""
    if os.geteuid() != 0:
        raise UserError(
            "network = ... builds network namespaces, which needs root: run dlscale as root "
            "(or in a container with CAP_NET_ADMIN), or drop the network setting"
        )
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise UserError(f"network = ... needs iproute2's {tool}: apt-get install iproute2")
    if link.latency_s > 0 and not netem_available():
        raise UserError(
            "this kernel has no tc netem (sch_netem), so no latency can be added: load it "
            "(modprobe sch_netem) or give the network without a latency (network = 1gbit)"
        )


@functools.cache
def netem_available() -> bool:
    """Whether tc can add a netem qdisc here (tried on a veth pair in a namespace of its own,
    removed after)."""
    name = f"{PREFIX}probe-{os.getpid()}"
    try:
        run_ip(("ip", "netns", "add", name))
        run_ip(
            ("ip", "-n", name, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1")
        )
        run_ip(("tc", "-n", name, "qdisc", "add", "dev", "probe0", "root", "netem", "delay", "1ms"))
        return True
    except UserError:
        return False
    finally:
        with contextlib.suppress(UserError):
            run_ip(("ip", "netns", "delete", name))


def run_ip(command: tuple[str, ...]) -> str:
    """Run one ip or tc command; its output, or :class:`UserError` with its message."""
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=IP_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise UserError(f"emulated network: `{' '.join(command)}` failed: {error}") from None
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        raise UserError(
            f"emulated network: `{' '.join(command)}` failed: {message[-1] if message else ''}"
        )
    return done.stdout
