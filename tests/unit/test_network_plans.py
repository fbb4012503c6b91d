"""The emulated network (``network = "1gbit:100us"``) as data: its grammar, the namespaces,
links and shaping it would make, and the torchrun plan that runs each node inside one. Nothing
is made here (tests/cluster/test_network.py builds real namespaces)."""

import json
import shlex
from pathlib import Path

import pytest

from dlscale.config import RunConfig
from dlscale.contract.backends import BACKENDS
from dlscale.contract.errors import UnsupportedPoint, UserError
from dlscale.launchers import network
from dlscale.launchers.links import Link
from dlscale.launchers.network import EmulatedNetwork
from dlscale.launchers.torchrun import TorchrunLauncher

SPEC = Path("/r/x/spec.json")


@pytest.mark.parametrize(
    ("text", "rate", "latency"),
    [
        ("1gbit", 10**9, 0.0),
        ("1Gbit:100us", 10**9, 100e-6),
        ("10gbit/s:1ms", 10**10, 1e-3),
        ("2.5mbit", 2_500_000, 0.0),
        ("unshaped", None, 0.0),
        ("unshaped:0.5ms", None, 0.5e-3),
    ],
)
def test_the_network_grammar_reads_a_rate_and_a_one_way_latency(text, rate, latency):
    assert Link.parse(text) == Link(rate, pytest.approx(latency))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("fast", "cannot read the rate"),
        ("1gb", "cannot read the rate"),
        ("nanbit", "cannot read the rate"),
        ("-1gbit", "cannot read the rate"),
        ("0bit", "8kbit to 1000gbit"),
        ("5000gbit", "8kbit to 1000gbit"),
        ("1gbit:100", "cannot read the latency"),
        ("1gbit:nanms", "cannot read the latency"),
        ("1gbit:1e400s", "cannot read the latency"),
        ("1gbit:11s", "at most 10 s"),
        ("1gbit;reboot", "cannot read the rate"),
    ],
)
def test_a_bad_network_is_one_line_before_anything_runs(text, says):
    with pytest.raises(UserError, match=says) as caught:
        RunConfig.make(backend="torch-ddp", workers=2, launcher="torchrun", nnodes=2, network=text)
    assert not isinstance(caught.value, UnsupportedPoint)  # a typo, not a skipped grid point


def test_only_torchrun_takes_a_network():
    with pytest.raises(UnsupportedPoint, match="network: not an option of"):
        RunConfig.make(backend="torch-ddp", workers=2, network="1gbit")


def _plan(text: str, nnodes: int = 2, backend: str = "torch-ddp", workers: int = 4):
    cfg = RunConfig.make(
        backend=backend, workers=workers, model="tiny", launcher="torchrun", nnodes=nnodes,
        network=text,
    )  # fmt: skip
    ports = (29500, 29501, 29502, 29503, 29600)  # the backend's, then the rendezvous's
    return TorchrunLauncher().plan(cfg, SPEC, "/py", ports=ports, cores=8)


def test_each_node_runs_in_its_namespace_at_its_own_address():
    plan = _plan("1gbit:100us")
    (net,) = plan.setups
    assert isinstance(net, EmulatedNetwork) and net.record == Path("/r/x/network.json")
    assert plan.addresses.hosts == ("10.99.0.100", "10.99.0.100", "10.99.0.101", "10.99.0.101")
    for node, entry in enumerate(plan.entries):
        assert entry.argv[:5] == ("ip", "netns", "exec", net.namespace(node), "/py")
        args = " ".join(entry.argv)
        assert "--rdzv-endpoint 10.99.0.100:29600" in args
        assert f"--local-addr 10.99.0.{100 + node}" in args
        assert entry.env["GLOO_SOCKET_IFNAME"] == "dls0" == entry.env["HOROVOD_GLOO_IFACE"]
    assert net.name.startswith("dlscale-") and net.namespace(1) == f"{net.name}-1"
    # another run's directory, other namespaces: runs side by side never share one
    other = TorchrunLauncher().plan(
        RunConfig.make(backend="torch-ddp", workers=2, launcher="torchrun", nnodes=2,
                       network="1gbit"),
        Path("/r/y/spec.json"), "/py", ports=(1, 2), cores=8,
    )  # fmt: skip
    assert other.setups[0].name != net.name


def test_every_link_is_shaped_both_ways_with_half_the_latency_each_way():
    (net,) = _plan("20mbit:1ms").setups
    commands = [shlex.join(c) for c in net.commands()]
    sw = net.switch
    for node in range(2):
        ns = net.namespace(node)
        assert f"ip -n {sw} link add p{node} type veth peer name dls0 netns {ns}" in commands
        assert f"ip -n {ns} addr add 10.99.0.{node + 100}/24 dev dls0" in commands
        for where, device in ((ns, "dls0"), (sw, f"p{node}")):
            tbf = f"tc -n {where} qdisc add dev {device} root handle 1: tbf rate 20000000bit"
            assert f"{tbf} burst 10000 latency 100ms" in commands  # 4 ms at 20 Mbit/s
            netem = f"tc -n {where} qdisc add dev {device} parent 1:1 handle 10: netem"
            assert f"{netem} delay 500.000us limit 100000" in commands
    # the machine's own namespace is never touched: every command names a namespace
    assert all(" -n dlscale-" in c or c.startswith("ip netns add dlscale-") for c in commands)
    described = net.describe()
    assert described[-1].endswith("/hosts: 10.99.0.101 " + described[-1].split()[-1])


def test_an_unshaped_network_has_no_qdisc_and_a_latency_only_one_has_netem_at_the_root():
    (plain,) = _plan("unshaped").setups
    assert not [c for c in plain.commands() if c[0] == "tc"]
    (late,) = _plan("unshaped:2ms").setups
    (first, *_) = [shlex.join(c) for c in late.commands() if c[0] == "tc"]
    assert first.endswith("root handle 10: netem delay 1000.000us limit 100000")


def test_a_network_needs_two_nodes_and_at_most_150():
    with pytest.raises(UserError, match="set nnodes = 2 or more"):
        _plan("1gbit", nnodes=1)
    with pytest.raises(UserError, match="2 to 150 nodes"):
        EmulatedNetwork(link=Link(None, 0.0), nodes=151, name="dlscale-x", record=SPEC)


def test_other_engines_get_the_namespace_addresses_of_their_ranks():
    plan = _plan("1gbit", backend="tf-ps", workers=2)  # chief, worker, ps: 2 ranks a node
    assert plan.addresses.hosts == ("10.99.0.100", "10.99.0.100", "10.99.0.101", "10.99.0.101")
    cfg = RunConfig.make(backend="tf-ps", workers=2, launcher="torchrun", nnodes=2, network="1gbit")
    process = plan.layout.processes[2]  # each rank sets its own, from the plan's addresses
    env = BACKENDS.get("tf-ps").cluster_env(process, plan.layout, plan.addresses, cfg)
    cluster = json.loads(env["TF_CONFIG"])["cluster"]
    addresses = [a for role in cluster.values() for a in role]
    assert sorted(a.split(":")[0] for a in addresses) == list(plan.addresses.hosts)


def test_emulating_needs_root_and_says_so(monkeypatch):
    monkeypatch.setattr(network.os, "geteuid", lambda: 1000)
    with pytest.raises(UserError, match="needs root"):
        network.check_can_emulate(Link(10**9, 0.0))
