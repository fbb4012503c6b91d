"""Host lists for mpirun and horovodrun (``hosts = "a:2,b:2"`` or ``hostfile = PATH``).

The ranks fill the hosts in the order given, each up to its slots (rank 0 and 1 on ``a``, 2 and 3
on ``b``): the order mpirun (``--map-by slot``) and horovodrun (``-H``) fill them, so every rank
knows every peer's address before it starts, and the worker checks that it runs where the plan
put it (:func:`dlscale.runtime.placement.check_placement`). Host names are resolved here, on the
machine that launches, into the IPv4 addresses the engines bind and connect to. The hosts must
reach each other and this machine by ssh without a password, share the run's directory and hold
the workers' interpreter at the same path, as on a cluster with a shared file system;
``dlscale hosts start`` makes such hosts on this machine.
"""

from __future__ import annotations

import functools
import re
import socket
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from dlscale.contract.errors import UserError
from dlscale.contract.files import read_bounded, unreadable
from dlscale.contract.nodes import NodeFacts
from dlscale.contract.numbers import whole_number
from dlscale.contract.run_config import RunConfig
from dlscale.contract.text import excerpt
from dlscale.launchers.options import HostListOptions

MAX_SLOTS = 4096
SSH_TIMEOUT_S = 30.0
"""The longest asking one host for its CPUs may take (``ssh HOST nproc``)."""
HOSTFILE_LIMIT = 2**20
"""A host file's most bytes: 1 MiB is some 30,000 hosts."""
_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,252})\Z")
_INTERFACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,14}\Z")
_SLOTS = re.compile(r"^slots\s*=\s*([0-9]{1,18})\Z")
INTERFACE_VARIABLES = (
    "GLOO_SOCKET_IFNAME",
    "TP_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
    "HOROVOD_GLOO_IFACE",
    "DMLC_INTERFACE",
)
"""What tells each engine's sockets which interface to use."""


@dataclass(frozen=True)
class Placement:
    """Where a run's ranks go: the hosts in order with their slots, and each rank's host."""

    hosts: tuple[tuple[str, int], ...]
    rank_hosts: tuple[str, ...]
    """Each rank's host name, in rank order."""
    addresses: tuple[str, ...]
    """Each rank's host address (resolved here)."""
    interface: str

    def tool_hosts(self) -> str:
        """``a:2,b:1`` for mpirun's ``--host`` and horovodrun's ``-H``: the hosts the ranks use,
        each with the ranks placed on it."""
        used = dict.fromkeys(self.rank_hosts, 0)
        for host in self.rank_hosts:
            used[host] += 1
        return ",".join(f"{host}:{count}" for host, count in used.items())

    def most_per_host(self) -> int:
        return max(self.rank_hosts.count(host) for host in set(self.rank_hosts))


def _check_name(name: str, what: str) -> str:
    if not _NAME.match(name):
        raise UserError(
            f"{what}: {excerpt(name)} is not a host name (letters, digits, '.', '-', '_')"
        )
    return name


def _check_slots(text: str, name: str, what: str) -> int:
    slots = whole_number(text, low=1, high=MAX_SLOTS)
    if slots is None:
        raise UserError(f"{what}: host {name} has slots {excerpt(text)}; give 1 to {MAX_SLOTS}")
    return slots


def parse_hosts(text: str, what: str) -> tuple[tuple[str, int], ...]:
    """``a:2,b,c:4`` as ((a, 2), (b, 1), (c, 4)); a host named twice is refused."""
    hosts: list[tuple[str, int]] = []
    for part in text.split(","):
        name, _, slots = part.strip().partition(":")
        hosts.append((_check_name(name, what), _check_slots(slots or "1", name, what)))
    return _unique(hosts, what)


def read_hostfile(path: str) -> tuple[tuple[str, int], ...]:
    """An OpenMPI/Horovod host file: ``NAME [slots=N]`` per line, ``#`` comments. A line that
    is wrong is named by its number, never quoted: the path may be any file (``/etc/shadow``)."""
    what = f"hostfile {path}"
    try:
        raw = read_bounded(Path(path), HOSTFILE_LIMIT)
    except OSError as error:
        raise UserError(
            f"{what}: cannot read it ({unreadable(error)}); give a regular file of NAME "
            "slots=N lines"
        ) from None
    text = raw.decode("utf-8", errors="replace")
    hosts = []
    for number, line in enumerate(text.splitlines(), start=1):
        if "\x00" in line or "\ufffd" in line:
            raise UserError(f"{what}, line {number}: not text (a binary file?); give host names")
        words = line.split("#", 1)[0].split(maxsplit=1)
        if not words:
            continue
        found = _SLOTS.match(words[1].strip()) if len(words) == 2 else None
        if not _NAME.match(words[0]) or (len(words) == 2 and found is None):
            raise UserError(
                f"{what}, line {number}: not NAME or NAME slots=N (a host name is letters, "
                "digits, '.', '-', '_')"
            )
        hosts.append((words[0], _check_slots(found.group(1) if found else "1", words[0], what)))
    if not hosts:
        raise UserError(f"{what}: no host in it (one per line: NAME slots=N)")
    return _unique(hosts, what)


def _unique(hosts: list[tuple[str, int]], what: str) -> tuple[tuple[str, int], ...]:
    counts = Counter(name for name, _ in hosts)
    if twice := sorted(name for name, count in counts.items() if count > 1):
        raise UserError(f"{what}: {', '.join(twice)} named twice; give each host once")
    return tuple(hosts)


def check_interface(value: str) -> None:
    if value and not _INTERFACE.match(value):
        raise UserError(
            f"interface = {excerpt(value)} is not a network interface's name (eth0, ib0)"
        )


def listed_hosts(options: HostListOptions) -> tuple[tuple[str, int], ...] | None:
    """The hosts and slots given (``hosts`` or ``hostfile``); ``None``: none."""
    if options.hosts and options.hostfile:
        raise UserError("give hosts or hostfile, not both")
    if options.hosts:
        return parse_hosts(options.hosts, "hosts")
    if options.hostfile:
        return read_hostfile(options.hostfile)
    if options.interface:
        raise UserError(
            "interface names the hosts' network: give hosts or hostfile too (every rank "
            "on this machine talks over the loopback)"
        )
    return None


def one_rank_each(config: RunConfig) -> Placement | None:
    """One rank on each listed host, in the list's order (``dlscale doctor``); ``None``
    without hosts."""
    options = config.typed(HostListOptions)
    hosts = listed_hosts(options)
    if hosts is None:
        return None
    names = tuple(name for name, _ in hosts)
    return Placement(
        hosts=tuple((name, 1) for name in names),
        rank_hosts=names,
        addresses=tuple(_resolve(name) for name in names),
        interface=options.interface,
    )


def placement(config: RunConfig, size: int) -> Placement | None:
    """Where the ranks of ``config`` go when it names hosts; ``None``: all on this machine."""
    options = config.typed(HostListOptions)
    hosts = listed_hosts(options)
    if hosts is None:
        return None
    slots = sum(count for _, count in hosts)
    if slots < size:
        listed = ", ".join(f"{name}:{count}" for name, count in hosts)
        raise UserError(
            f"the hosts offer {slots} slots ({listed}) and the run has {size} processes: add "
            "hosts or slots, or run fewer workers"
        )
    rank_hosts = tuple(name for name, count in hosts for _ in range(count))[:size]
    resolved = {name: _resolve(name) for name in dict.fromkeys(rank_hosts)}
    return Placement(
        hosts=hosts,
        rank_hosts=rank_hosts,
        addresses=tuple(resolved[name] for name in rank_hosts),
        interface=options.interface,
    )


def _resolve(name: str) -> str:
    try:
        return socket.gethostbyname(name)
    except OSError as error:
        raise UserError(
            f"host {name} does not resolve here ({error}): give a name this machine knows "
            "(DNS or /etc/hosts) or its address"
        ) from None


def interface_env(interface: str) -> dict[str, str]:
    """The variables that put every engine's sockets on ``interface``."""
    return dict.fromkeys(INTERFACE_VARIABLES, interface) if interface else {}


def host_facts(config: RunConfig, size: int) -> NodeFacts | None:
    """The hosts ``config``'s ranks run on, which their threads are planned from: each rank's
    host, and a host's CPUs given (``cpus_per_host``) or asked of every host the ranks use
    (``nproc`` there, by ssh; the fewest); ``None`` when every rank runs on this machine."""
    where = placement(config, size)
    if where is None:
        return None
    used = {host: index for index, host in enumerate(dict.fromkeys(where.rank_hosts))}
    given = config.typed(HostListOptions).cpus_per_host
    cpus = given or min(host_cpus(host) for host in used)
    return NodeFacts(
        cpus=cpus,
        gpus=None,  # each rank checks its own GPU where it runs
        nodes=len(used),
        source="given (cpus_per_host)" if given else "nproc on each host, by ssh",
        node_of=tuple(used[host] for host in where.rank_hosts),
    )


@functools.cache
def host_cpus(host: str) -> int:
    """The CPUs ``host`` gives a process there (its ``nproc``, asked by ssh without a
    password: the same way mpirun and horovodrun reach it); asked once per host and process."""
    fix = "make it reachable by ssh without a password, or give --set cpus_per_host=C"
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "--", host, "nproc"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=SSH_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as error:
        raise UserError(f"cannot ask host {host} for its CPUs ({error}); {fix}") from None
    count = whole_number(done.stdout.strip(), low=1, high=2**20)
    if done.returncode != 0 or count is None:
        words = excerpt((done.stderr or done.stdout).strip() or f"exit {done.returncode}")
        raise UserError(f"cannot ask host {host} for its CPUs (ssh {host} nproc: {words}); {fix}")
    return count
