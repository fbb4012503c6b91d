"""The record of the emulated hosts that run on this machine (``dlscale hosts start``,
:mod:`~dlscale.launchers.testbed`): what the test bed is, read back by whoever needs it.

``/run/dlscale-hosts.json`` (one test bed at a time) holds its directory, hosts, slots, link and
owner; :func:`running_link` tells a run on some hosts whether they are the test bed's, and on
which emulated link (a microbench then leaves the sizes that pass the link's token bucket
unshaped out of its fit, as it does for torchrun's emulated nodes).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dlscale.contract.files import read_small_file
from dlscale.contract.numbers import whole_value
from dlscale.store.locks import PID_MAX

SUBNET = "10.98.0"
PREFIX = "dlstb-"
"""The namespaces' names: ``dlstb-<host>`` and the switch ``dlstb-sw``."""
RECORD = Path("/run/dlscale-hosts.json")


def host_address(index: int) -> str:
    return f"{SUBNET}.{100 + index}"


@dataclass(frozen=True)
class Testbed:
    """One test bed: where its files are, its hosts, and who owns it."""

    dir: str
    hosts: tuple[str, ...]
    slots: int
    link: str
    owner: dict[str, int | None] | None = None
    cpus: int = 0
    """CPUs of this machine a host's processes may run on (its share, as a torchrun node's:
    :func:`~dlscale.contract.layout.node_cpus`); 0: all of them, shared by every host."""

    def cpus_of(self, host: str) -> tuple[int, ...]:
        """The CPUs ``host`` is confined to (empty: all of this machine's)."""
        from dlscale.contract.layout import node_cpus

        return node_cpus(self.hosts.index(host), self.cpus) if self.cpus else ()

    @property
    def addresses(self) -> dict[str, str]:
        return {name: host_address(k + 1) for k, name in enumerate(self.hosts)}

    def namespace(self, host: str) -> str:
        return f"{PREFIX}{host}"

    @property
    def switch(self) -> str:
        return f"{PREFIX}sw"

    @property
    def ssh_dir(self) -> Path:
        return Path(self.dir) / "ssh"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1) + "\n"

    @staticmethod
    def read(path: Path) -> Testbed:
        """The record at ``path``, every value checked; ``OSError`` when it cannot be read (a
        FIFO, larger than 1 MiB), ``ValueError`` when it is not a record (bad JSON, a list, a
        key missing or of the wrong type)."""
        try:
            data = json.loads(read_small_file(path, 2**20))
            return Testbed._from(path, data)
        except RecursionError:
            raise ValueError(f"{path}: nested too deeply") from None
        except (KeyError, TypeError, AttributeError):
            raise ValueError(f"{path}: not a test bed's record") from None

    @staticmethod
    def _from(path: Path, data: Any) -> Testbed:
        owner, slots = data.get("owner"), whole_value(data["slots"], 1, 4096)
        if not isinstance(data["hosts"], list) or slots is None:
            raise ValueError(f"{path}: not a test bed's record")
        return Testbed(
            dir=str(data["dir"]),
            hosts=tuple(str(host) for host in data["hosts"]),
            slots=slots,
            link=str(data.get("link", "")),
            cpus=whole_value(data.get("cpus", 0), 0, 4096) or 0,
            owner={  # a pid that cannot be a process's (1e999) reads as a gone owner
                "pid": whole_value(owner.get("pid"), 1, PID_MAX) or 0,
                "start": whole_value(owner.get("start")),
            }
            if isinstance(owner, dict)
            else None,
        )


def running_link(hosts: Iterable[str]) -> str:
    """The emulated link (``--link``, as ``network = ...`` reads) of the test bed running on
    this machine when every one of ``hosts`` is its; "" when none runs, its record cannot be
    read, a host is not its, or it has no link (real hosts: no token bucket to leave out)."""
    names = set(hosts)
    try:
        bed = Testbed.read(RECORD)
    except (OSError, ValueError):
        return ""
    return bed.link if names and names <= set(bed.hosts) else ""
