"""Emulated hosts on this machine (``dlscale hosts start DIR --hosts N``): a test bed of a cluster.

Each host is a network namespace with its own host name (a UTS namespace), its own address and an
OpenSSH server, reached by ssh as a cluster's nodes are; this machine joins them as the login
node. The hosts share this machine's file system (as a cluster's shared home does), its cores
(unless ``--cpus N`` confines each host to a share of N of them, as torchrun's emulated nodes
are, wrapping around where the hosts want more than there are: then ``nproc`` on a host says N)
and its processes' view, but not its network: they talk to each other and to this machine only
over their links, which tc shapes (``--link RATE[:LATENCY]``, as ``network = ...`` does).

* A switch namespace holds a bridge; host k (1-based) has the interface ``dls0`` at
  ``10.98.0.(100+k)`` and a default route through this machine, which joins the bridge with an
  interface also named ``dls0`` at ``10.98.0.1`` (so ``interface = "dls0"`` names the cluster's
  network on every node and on the login node alike).
* Names: ``/etc/hosts`` gets a block naming every host (removed at stop); each host's own
  ``/etc/hosts`` (``/etc/netns/NS/hosts``) names the hosts and this machine at its address.
* ssh: a key pair and one host key made in ``DIR/ssh``; ``/etc/ssh/ssh_config.d/dlscale-hosts.conf``
  tells this machine's ssh client (and the hosts', which share it) to use them for these hosts.
* ``DIR/hostfile`` lists the hosts with their slots (OpenMPI's format); ``DIR/hosts.json`` what
  ``stop`` needs. One test bed runs at a time (``/run/dlscale-hosts.json`` says where:
  :mod:`~dlscale.launchers.testbed_record`).

``stop DIR`` kills every process in the hosts (sshd, slurmd, ranks), deletes the namespaces and
removes every file it wrote outside ``DIR``. With ``--owner PID`` the test bed belongs to that
process: the next ``start`` removes it once that process is gone (a killed test run).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from dlscale.contract.errors import UserError
from dlscale.contract.files import make_directory, refuse_link, write_atomic
from dlscale.contract.layout import usable_cores
from dlscale.contract.text import shell_command
from dlscale.launchers.links import Link, shaping
from dlscale.launchers.network import NETNS_ETC, namespaces, run_ip, write_node_etc
from dlscale.launchers.testbed_record import PREFIX, RECORD, SUBNET, Testbed, host_address
from dlscale.runtime.listening import await_listener
from dlscale.runtime.procfs import is_alive, process_start

LOGIN_ADDRESS = f"{SUBNET}.1"
INTERFACE = "dls0"
MAX_HOSTS = 64
SSH_CONFIG = Path("/etc/ssh/ssh_config.d/dlscale-hosts.conf")
HOSTS_FILE = Path("/etc/hosts")
BEGIN, END = "# begin dlscale emulated hosts", "# end dlscale emulated hosts"
START_TIMEOUT_S = 20.0
_NAME = re.compile(r"^[a-z][a-z0-9]{0,15}\Z")
_PATH = re.compile(r"^[A-Za-z0-9._+/-]+\Z")


def plan(
    directory: Path,
    count: int,
    *,
    slots: int = 2,
    link: str = "",
    prefix: str = "dlsnode",
    cpus: int = 0,
) -> Testbed:
    """The test bed ``start`` would make (checked: names, counts, the link, the CPUs)."""
    if not 1 <= count <= MAX_HOSTS:
        raise UserError(f"--hosts: 1 to {MAX_HOSTS} emulated hosts, not {count}")
    if not 1 <= slots <= 256:
        raise UserError(f"--slots: 1 to 256 slots per host, not {slots}")
    if not 0 <= cpus <= usable_cores():
        raise UserError(
            f"--cpus: 0 (every host on all of this machine's CPUs) to {usable_cores()} CPUs a "
            f"host, not {cpus}"
        )
    if not _NAME.match(f"{prefix}{count}"):
        raise UserError(
            f"--prefix {prefix!r}: host names are a lower-case letter, then letters and digits "
            "(at most 16 with the host's number)"
        )
    if link:
        Link.parse(link)
    if not _PATH.match(str(directory.absolute())):
        raise UserError(
            f"{str(directory)!r}: give the test bed a directory path of letters, digits and "
            "'._+-/' only: it is written into sshd's and ssh's settings and /etc/hosts, where a "
            "space, a quote or a line break would change them"
        )
    hosts = tuple(f"{prefix}{k}" for k in range(1, count + 1))
    return Testbed(dir=str(directory.absolute()), hosts=hosts, slots=slots, link=link, cpus=cpus)


def check_can_start() -> None:
    if os.geteuid() != 0:
        raise UserError("emulated hosts need root (network and UTS namespaces, sshd): run as root")
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("nsenter", "util-linux")):
        if shutil.which(tool) is None:
            raise UserError(f"emulated hosts need {tool}: apt-get install {package}")
    if not Path("/usr/sbin/sshd").exists() or shutil.which("ssh-keygen") is None:
        raise UserError("emulated hosts need OpenSSH's server: scripts/install-openssh.sh")


def start(bed: Testbed) -> None:
    """Make the hosts and start their ssh servers; on any failure, remove what was made."""
    check_can_start()
    if bed.link:
        from dlscale.launchers.network import check_can_emulate

        check_can_emulate(Link.parse(bed.link))
    remove_abandoned()
    if RECORD.exists():
        other = Testbed.read(RECORD)
        raise UserError(
            f"emulated hosts already run ({', '.join(other.hosts)}, files in {other.dir}): "
            "one test bed at a time; stop it first: "
            + shell_command(["dlscale", "hosts", "stop", other.dir])
        )
    try:
        _make(bed)
    except BaseException:
        stop(bed)
        raise


def _make(bed: Testbed) -> None:
    root = Path(bed.dir)
    root.mkdir(parents=True, exist_ok=True)
    make_directory(root, "the test bed's directory")  # a link or a file there is refused
    make_directory(root / "log")
    write_atomic(RECORD, bed.to_json())
    write_atomic(root / "hosts.json", bed.to_json())
    _make_keys(bed)
    link = Link.parse(bed.link) if bed.link else None
    sw, nic = bed.switch, INTERFACE  # no name holds a space: each command is split on them
    for command in (
        f"ip netns add {sw}",
        f"ip -n {sw} link set lo up",
        f"ip -n {sw} link add br0 type bridge",
        f"ip -n {sw} link set br0 up",
        f"ip link add {nic} type veth peer name login netns {sw}",
        f"ip -n {sw} link set login master br0",
        f"ip -n {sw} link set login up",
        f"ip addr add {LOGIN_ADDRESS}/24 dev {nic}",
        f"ip link set {nic} up",
    ):
        run_ip(tuple(command.split()))
    for k, host in enumerate(bed.hosts, start=1):
        ns, port = bed.namespace(host), f"p{k}"
        for command in (
            f"ip netns add {ns}",
            f"ip -n {ns} link set lo up",
            f"ip -n {sw} link add {port} type veth peer name {nic}",
            f"ip -n {sw} link set {nic} netns {ns}",
            f"ip -n {sw} link set {port} master br0",
            f"ip -n {sw} link set {port} up",
            f"ip -n {ns} addr add {host_address(k)}/24 dev {nic}",
            f"ip -n {ns} link set {nic} up",
            f"ip -n {ns} route add default via {LOGIN_ADDRESS}",
        ):
            run_ip(tuple(command.split()))
        for shaped in shaping(link, ns, nic) + shaping(link, sw, port) if link else []:
            run_ip(shaped)
        write_node_etc(NETNS_ETC / ns, _hosts_text(bed))
    _write_block(_names_block(bed))
    SSH_CONFIG.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(SSH_CONFIG, _ssh_config(bed))
    write_atomic(root / "hostfile", "".join(f"{h} slots={bed.slots}\n" for h in bed.hosts))
    for host in bed.hosts:
        _start_sshd(bed, host)
    for host, address in bed.addresses.items():
        _wait_for_ssh(bed, host, address)


def _make_keys(bed: Testbed) -> None:
    keys = bed.ssh_dir
    make_directory(keys)
    os.chmod(keys, 0o700)
    for name in ("host_ed25519", "id_ed25519"):
        for stale in (keys / name, keys / f"{name}.pub"):
            stale.unlink(missing_ok=True)
        keygen = ("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "dlscale-hosts")
        _run((*keygen, "-f", str(keys / name)))
    write_atomic(keys / "authorized_keys", (keys / "id_ed25519.pub").read_text())
    host_key = (keys / "host_ed25519.pub").read_text().split()[:2]
    write_atomic(
        keys / "known_hosts",
        "".join(f"{h},{a} {' '.join(host_key)}\n" for h, a in bed.addresses.items()),
    )


def _hosts_text(bed: Testbed) -> str:
    login = " ".join(dict.fromkeys((socket.gethostname(), socket.gethostname().split(".")[0])))
    lines = ["127.0.0.1 localhost", "::1 localhost", f"{LOGIN_ADDRESS} {login}"]
    lines += [f"{address} {host}" for host, address in bed.addresses.items()]
    return "\n".join(lines) + "\n"


def _names_block(bed: Testbed) -> str:
    lines = [f"{BEGIN} ({bed.dir}; dlscale hosts stop removes this block)"]
    lines += [f"{address} {host}" for host, address in bed.addresses.items()]
    return "\n".join([*lines, END]) + "\n"


def _write_block(block: str) -> None:
    """Replace the test bed's block in ``/etc/hosts`` (in place: it is often a bind mount)."""
    text = HOSTS_FILE.read_text() if HOSTS_FILE.exists() else ""
    kept = re.sub(rf"{re.escape(BEGIN)}.*?{re.escape(END)}\n?", "", text, flags=re.S)
    if kept and not kept.endswith("\n"):
        kept += "\n"
    if kept + block != text:
        refuse_link(HOSTS_FILE)  # written in place (often a bind mount): never through a link
        with HOSTS_FILE.open("w") as out:
            out.write(kept + block)


def _ssh_config(bed: Testbed) -> str:
    keys = bed.ssh_dir
    names = " ".join([*bed.hosts, *bed.addresses.values()])
    return (
        f"# written by dlscale hosts start {bed.dir}; dlscale hosts stop removes it\n"
        f"Host {names}\n"
        "    User root\n"
        f"    IdentityFile {keys / 'id_ed25519'}\n"
        f"    UserKnownHostsFile {keys / 'known_hosts'}\n"
        "    StrictHostKeyChecking yes\n"
        "    BatchMode yes\n"
        "    ConnectTimeout 10\n"
        "    ServerAliveInterval 5\n"  # a host cut off: its ssh session ends in 15 s, not hours
        "    ServerAliveCountMax 3\n"
        "    LogLevel ERROR\n"
    )


def _start_sshd(bed: Testbed, host: str) -> None:
    root, keys = Path(bed.dir), bed.ssh_dir
    config = root / f"sshd-{host}.conf"
    write_atomic(
        config,
        f"ListenAddress {bed.addresses[host]}\n"
        f"HostKey {keys / 'host_ed25519'}\n"
        f"AuthorizedKeysFile {keys / 'authorized_keys'}\n"
        f"PidFile {root / f'sshd-{host}.pid'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        "MaxStartups 200\nMaxSessions 200\nLogLevel ERROR\n"
        "ClientAliveInterval 5\nClientAliveCountMax 3\n",  # and the host's end of it,
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    # ip netns exec would mount the namespace's own /sys, without /sys/fs/cgroup (slurmd needs
    # it): enter the network namespace, and give the host its name, its /etc/hosts and its
    # resolv.conf (without it, every process over ssh waited 10 s for this machine's
    # unreachable name server on a name outside the hosts file: torch.distributed's store)
    script = (
        'mount --bind "$4/hosts" /etc/hosts && mount --bind "$4/resolv.conf" /etc/resolv.conf'
        ' && hostname "$1" && exec /usr/sbin/sshd -f "$2" -E "$3"'
    )
    log, etc = root / "log" / f"sshd-{host}.log", NETNS_ETC / bed.namespace(host)
    net = ("nsenter", f"--net=/run/netns/{bed.namespace(host)}", "--")
    enter = (*net, "unshare", "--uts", "--mount", "--propagation", "private", "--")
    # a CPU share: sshd and everything started over ssh (orted, slurmd, the ranks) inherit it
    cpus = bed.cpus_of(host)
    confine = ("taskset", "-c", ",".join(map(str, cpus))) if cpus else ()
    _run((*confine, *enter, "sh", "-c", script, "sh", host, str(config), str(log), str(etc)))


def _wait_for_ssh(bed: Testbed, host: str, address: str) -> None:
    if error := await_listener((address, 22), START_TIMEOUT_S):
        raise UserError(
            f"the ssh server of emulated host {host} ({address}) did not answer in "
            f"{START_TIMEOUT_S:.0f} s ({error}); its log: {Path(bed.dir) / 'log'}"
        )


def stop(bed: Testbed) -> None:
    """Kill every process in the hosts, delete them, and remove every file made outside
    ``DIR``. Safe on a test bed half made, or already stopped."""
    try:
        live = set(namespaces())
    except UserError:
        live = {bed.namespace(h) for h in bed.hosts} | {bed.switch}
    for host in bed.hosts:
        ns = bed.namespace(host)
        if ns in live:
            _kill_all(ns)
    for ns in [*(bed.namespace(h) for h in bed.hosts), bed.switch]:
        if ns in live:
            with contextlib.suppress(UserError):
                run_ip(("ip", "netns", "delete", ns))
        shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)
    with contextlib.suppress(UserError):
        if _link_exists(INTERFACE):
            run_ip(("ip", "link", "delete", INTERFACE))
    with contextlib.suppress(OSError):
        _write_block("")
    SSH_CONFIG.unlink(missing_ok=True)
    with contextlib.suppress(OSError, ValueError):
        if Testbed.read(RECORD).dir == bed.dir:
            RECORD.unlink()


def _kill_all(namespace: str) -> None:
    """SIGTERM every process in ``namespace``, then SIGKILL what is left after 5 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        deadline = time.monotonic() + 5.0
        while True:
            pids = [int(p) for p in run_ip(("ip", "netns", "pids", namespace)).split()]
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)


def remove_abandoned() -> None:
    """Stop a test bed whose owner is gone (a test run killed with ``-9``), and the namespaces
    of one with no record at all."""
    try:
        bed = Testbed.read(RECORD)
    except (OSError, ValueError):
        with contextlib.suppress(UserError):
            names = [n for n in namespaces() if n.startswith(PREFIX)]
            if names:
                hosts = tuple(n[len(PREFIX) :] for n in names if n != f"{PREFIX}sw")
                stop(Testbed(dir="", hosts=hosts, slots=1, link=""))
        RECORD.unlink(missing_ok=True)
        return
    owner = bed.owner
    if owner and not is_alive(owner["pid"] or 0, owner["start"]):
        stop(bed)


def owned_by(bed: Testbed, pid: int) -> Testbed:
    return replace(bed, owner={"pid": pid, "start": process_start(pid)})


def _link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists() or bool(
        subprocess.run(("ip", "link", "show", name), capture_output=True).returncode == 0
    )


def _run(command: tuple[str, ...]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines() or [f"exit {done.returncode}"]
        raise UserError(f"emulated hosts: `{' '.join(command[:4])} ...` failed: {said[-1]}")
