"""One record per synchronization pattern (dlscale.perfmodel.patterns): each priced by hand on
a network of two levels, forward prediction and validation through the same record, and a
new pattern added as one record that every part of the model then knows."""

import pytest

from dlscale.contract.errors import UserError
from dlscale.metrics.sync_facts import sync_metrics
from dlscale.perfmodel import patterns
from dlscale.perfmodel.costs import Network
from dlscale.perfmodel.links import Link
from dlscale.perfmodel.patterns import PATTERNS, Pattern, Step, variant, variants
from dlscale.perfmodel.predict import Profile, predict
from dlscale.perfmodel.validate import compare

INTRA = Network(1e-6, 1e-11)  # 1 us, 800 Gbit/s: NVLink-like
INTER = Network(1e-5, 1e-9)  # 10 us, 8 Gbit/s
TWO_LEVELS = Link(INTER, intra=INTRA, ranks_per_node=4)


def comm(name, n, p, link=TWO_LEVELS, servers=1):
    return PATTERNS[name].comm(n, p, servers, link)


def test_hierarchical_and_flat_ring_on_two_levels_by_hand():
    # 8 workers, 4 a node: reduce-scatter inside (3 us + 3/4 MB at 0.01 ns), an all-reduce of
    # the node's shards between the 2 nodes (2 x 10 us + 1 MB at 1 ns), an all-gather inside
    inside = 3e-6 + 0.75e6 * 1e-11
    assert comm("hierarchical", 1e6, 8).seconds == pytest.approx(2 * inside + 2e-5 + 1e-3)
    # a flat ring of 8 crosses the slow link at every step: 2 x 7 x 10 us + 2 x 7/8 MB at 1 ns
    assert comm("ring", 1e6, 8).seconds == pytest.approx(14e-5 + 1.75e-3)
    assert comm("ring", 1e6, 8).source == "ring fit"
    # every worker on one node: the ring runs on the link inside
    one_node = comm("ring", 1e6, 4)
    assert one_node.seconds == pytest.approx(6e-6 + 1.5e6 * 1e-11)
    assert one_node.source == "intra link"
    # one worker a node, one level: hierarchical is the ring
    flat = Link(INTER)
    assert comm("hierarchical", 1e6, 8, flat).seconds == pytest.approx(
        comm("ring", 1e6, 8, flat).seconds
    )


def test_parameter_servers_share_a_nodes_link_on_two_levels():
    # 8 workers, 4 a node, 8 servers: a server's link takes 8 x 1/8 MB, a node's 4 x 1 MB
    assert comm("ps-sync", 1e6, 8, servers=8).seconds == pytest.approx(2e-5 + 2 * 4e6 * 1e-9)
    # an asynchronous worker's own push and pull shares its node's link with 3 others
    assert comm("ps-async", 1e6, 8).seconds == pytest.approx(2e-5 + 2 * 4e6 * 1e-9)
    assert comm("ps-async", 1e6, 2, Link(INTER)).seconds == pytest.approx(2e-5 + 2e6 * 1e-9)
    # 4 asynchronous workers on one node: their pushes and the server's bound on the link inside
    async_, own = PATTERNS["ps-async"], comm("ps-async", 1e6, 4)
    assert own.seconds == pytest.approx(2e-6 + 2e6 * 1e-11) and own.source == "intra link"
    step = async_.step_s(1e-5, 2 / 3, own.seconds, 1e6, 4, 1, TWO_LEVELS)
    assert step == pytest.approx(4e6 * 1e-11)  # the server's 4 MB inside outlasts a worker's own


def test_every_pattern_validation_knows_is_predicted_forward_and_priced_the_same():
    profile = Profile(compute_s=0.05, batch=32, gradient_bytes=4e6)
    link = Link(Network.from_link(8e9, 5e-6))
    for name in variants():
        (row,) = predict(profile, name, [4], link, servers=2)
        assert row.step_s >= 0.05 * 0.99 and row.efficiency <= 1.0
    for pattern in PATTERNS.values():
        point = {
            "status": "completed", "run_id": pattern.name, "batch_size_per_worker": 32,
            "config": {"backend": "b", "model": "m", "workers": 4, "launcher": "local"},
            "metrics": {"step_time_nosync_p50_ms": 50.0, "gradient_bytes": 4e6,
                        "throughput_samples_s": 2000.0, "step_time_p50_ms": 60.0,
                        "sync_pattern": pattern.name, "sync_servers": 2},
        }  # fmt: skip
        (row,) = compare([point], lambda p: link)
        (forward,) = predict(profile, pattern.name, [4], link, servers=2)
        assert row["comm_ms"] == pytest.approx(forward.comm_s * 1e3)
        assert row["predicted_samples_s"] == pytest.approx(forward.throughput_samples_s)
        if pattern.overlaps:
            (hidden,) = predict(profile, f"{pattern.name}-overlap", [4], link, servers=2)
            assert row["overlap_samples_s"] == pytest.approx(hidden.throughput_samples_s)


def test_messages_given_as_a_count_cost_what_the_listed_messages_cost():
    profile = Profile(compute_s=0.05, batch=32, gradient_bytes=4e6, messages=40)
    link = Link(Network.from_link(8e9, 5e-6))
    (row,) = predict(profile, "ring", [8], link)
    listed = PATTERNS["ring"].comm(4e6, 8, 1, link, patterns.grouped([1e5] * 40))
    assert row.comm_s == pytest.approx(listed.seconds) and listed.source == "ring fit, 40 messages"
    one = PATTERNS["ring"].comm(4e6, 8, 1, link).seconds
    assert row.comm_s == pytest.approx(one + 39 * 2 * 7 * 5e-6)  # each further one's latency


def test_a_new_pattern_is_one_record(monkeypatch):
    """A ring run twice a step (as an engine that all-reduces its gradient in two halves of
    the model one after the other would): one record, and the engine's facts, forward
    prediction, validation and the pattern names all know it."""
    double = Pattern("double-ring", "two all-reduces a step", (Step("all_reduce", times=2),))
    monkeypatch.setitem(PATTERNS, "double-ring", double)
    assert "double-ring-overlap" in variants() and variant("double-ring-overlap")[1]
    assert sync_metrics({"pattern": "double-ring"}, None)["sync_pattern"] == "double-ring"
    link = Link(Network.from_link(8e9, 0.0))
    profile = Profile(compute_s=0.02, batch=32, gradient_bytes=1e6)
    (row,) = predict(profile, "double-ring", [2], link)
    assert row.comm_s == pytest.approx(2e-3)  # twice 1 MB at 1 ns a byte
    point = {
        "status": "completed", "run_id": "x", "batch_size_per_worker": 32,
        "config": {"backend": "b", "model": "m", "workers": 2, "launcher": "local"},
        "metrics": {"step_time_nosync_p50_ms": 20.0, "gradient_bytes": 1e6,
                    "throughput_samples_s": 2900.0, "sync_pattern": "double-ring"},
    }  # fmt: skip
    (validated,) = compare([point], lambda p: link)
    assert validated["algorithm"] == "double-ring" and validated["comm_ms"] == pytest.approx(2.0)


def test_unknown_or_impossible_pattern_names_are_one_line():
    for bad in ("butterfly", "ps-async-overlap", "<b>ring</b>", "ring-overlap-overlap"):
        with pytest.raises(UserError, match="unknown pattern") as error:
            variant(bad)
        assert "ring-overlap" in str(error.value) and "\n" not in str(error.value)
    assert sync_metrics({"pattern": ["ring"]}, None) == {}  # damaged facts: no pattern


def test_a_point_with_several_ranks_on_each_host_is_priced_on_two_levels():
    """Validation: a point of 4 workers on 2 emulated hosts takes its hosts' link from the
    microbench of its own network and the link inside a host from the newest one-host
    microbench (its engine's, else any): each host's 2 ranks share its link."""
    from dlscale.perfmodel.networks import Fitted, link_lookup

    def fitted(net, started):
        return Fitted("said", started, "run", Link(net))

    stored = {
        ("torch-ddp", "mpirun", "100mbit", 2): fitted(INTER, 3.0),
        ("torch-ddp", "local", "", 1): fitted(INTRA, 2.0),
        ("jax-dp", "local", "", 1): fitted(Network(1.0, 1.0), 4.0),  # another engine's
    }
    link_of, _ = link_lookup(stored)
    config = {"backend": "torch-ddp", "launcher": "mpirun", "workers": 4,
              "options": {"launcher": {"network": "100mbit", "nnodes": 2}}}  # fmt: skip
    link = link_of({"config": config})
    assert link.network == INTER and link.intra == INTRA and link.ranks_per_node == 2
    assert link_of({"config": {**config, "workers": 2}}).intra is None  # one rank a host
    # the ps-sync of 4 workers through 4 servers, the 2 of a host sharing its link: each way
    # max(2 x 1 MB a host, 4 x 1/4 MB a server) = 2 MB; on one level it would be 1 MB
    assert PATTERNS["ps-sync"].comm(1e6, 4, 4, link).seconds == pytest.approx(2e-5 + 4e6 * 1e-9)
