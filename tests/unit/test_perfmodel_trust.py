"""How far to trust a forward prediction (dlscale.perfmodel.trust): each strategy's validated
error, engine by engine, on one kind of network."""

import pytest

from dlscale.contract.errors import UserError
from dlscale.perfmodel.trust import (
    Validated,
    interval,
    kind_words,
    kinds,
    trust_words,
    validated,
)


def _row(backend, algorithm="ring", error=0.1, overlap=0.05, network="", nodes=1, **more):
    return {"backend": backend, "algorithm": algorithm, "launcher": more.pop("launcher", "local"),
            "network": network, "nodes": nodes, "error": error, "noisy": False,
            "overlap_error": overlap if algorithm == "ring" else None,
            "servers": more.pop("servers", None), "model": more.pop("model", "resnet20"),
            **more}  # fmt: skip


ROWS = [
    _row("torch-ddp", error=0.01), _row("torch-ddp", error=-0.03), _row("torch-ddp", error=0.02),
    _row("horovod-torch", error=0.2, overlap=0.25),
    _row("horovod-torch", error=0.9, noisy=True),  # flagged: left out beside a quiet one
    _row("torch-ps", "ps-sync", error=-0.06, servers=1),
    _row("mxnet-kv", "ps-sync", error=0.4, servers=2),
    _row("torch-ddp", error=0.5, network="1gbit", nodes=2, launcher="torchrun"),
]  # fmt: skip
LOCAL = ("local", "", 1)


def test_each_strategy_takes_its_algorithms_engines_on_the_same_network_kind():
    ring = validated(ROWS, "ring", LOCAL)
    on = ("local launcher", ("resnet20",))
    assert ring == [Validated("torch-ddp", on[0], 3, 0.02, on[1]),
                    Validated("horovod-torch", on[0], 1, 0.2, on[1])]  # fmt: skip
    overlap = validated(ROWS, "ring-overlap", LOCAL)
    assert [(v.backend, v.median_abs_error) for v in overlap] == [
        ("torch-ddp", 0.05), ("horovod-torch", 0.25)]  # fmt: skip
    # a parameter server at the servers asked for: mxnet-kv ran 2
    assert [v.backend for v in validated(ROWS, "ps-sync", LOCAL)] == ["torch-ps"]
    assert [v.backend for v in validated(ROWS, "ps-sync", LOCAL, servers=2)] == ["mxnet-kv"]
    assert validated(ROWS, "ps-async", LOCAL) == []
    assert validated(ROWS, "tree", LOCAL) == []  # no engine runs a tree
    emulated = ("torchrun", "1gbit", 2)
    (far,) = validated(ROWS, "ring", emulated)
    assert (
        far.median_abs_error == 0.5 and far.network == "torchrun launcher, emulated 1gbit, 2 nodes"
    )
    assert kinds(ROWS) == [LOCAL, emulated]
    # a row whose overlap bound replayed its engine's cycle validates its ring, not the ideal
    replayed = [*ROWS, _row("horovod-tf", error=0.04, overlap=0.01, overlap_from="cycle replayed")]
    assert [v.backend for v in validated(replayed, "ring", LOCAL)][-1] == "horovod-tf"
    assert "horovod-tf" not in [v.backend for v in validated(replayed, "ring-overlap", LOCAL)]


def test_every_noisy_point_counts_when_no_point_is_quiet():
    (only,) = validated([_row("jax-dp", error=-0.3, noisy=True)], "ring", LOCAL)
    assert only.points == 1 and only.median_abs_error == pytest.approx(0.3)


def test_the_words_say_the_error_or_that_it_was_never_validated():
    ring = validated(ROWS, "ring", LOCAL)
    assert trust_words("ring", ring, []) == (
        "ring: torch-ddp 2.0% over 3 points of resnet20, horovod-torch 20.0% over 1 point of "
        "resnet20"
    )
    assert trust_words("ring", ring[:1], [], where=True) == (
        "ring: torch-ddp 2.0% over 3 points of resnet20 on local launcher"
    )
    assert trust_words("tree", [], []) == "tree: never validated on this network"
    assert trust_words("ps-async", [], ["local launcher"]) == (
        "ps-async: never validated on this network (validated on: local launcher)"
    )
    assert trust_words("ps-async", [], [], where=True) == "ps-async: never validated"
    assert kind_words(("mpirun", "", 4)) == "mpirun launcher, 4 nodes"


def test_the_interval_spans_every_quiet_validating_points_error():
    """A point of error e measured 1 / (1 + e) of its prediction: the interval runs from the
    most over-predicted point to the most under-predicted one, over every engine of the
    pattern on the network kind, always holding the prediction itself."""
    low, high, points = interval(ROWS, "ring", LOCAL)
    assert (low, high, points) == (pytest.approx(1 / 1.2), pytest.approx(1 / 0.97), 4)
    low, high, points = interval(ROWS, "ring-overlap", LOCAL)
    assert (low, high, points) == (pytest.approx(1 / 1.25), 1.0, 4)  # every one over-predicted
    assert interval(ROWS, "ps-sync", LOCAL, servers=2)[2] == 1
    assert interval(ROWS, "tree", LOCAL) is None and interval(ROWS, "hierarchical", None) is None
    assert interval(ROWS, "ring", None)[0] == pytest.approx(1 / 1.5)  # every network kind
    with pytest.raises(UserError, match="unknown pattern"):
        interval(ROWS, "ps-async-overlap", LOCAL)  # an asynchronous server overlaps nothing
