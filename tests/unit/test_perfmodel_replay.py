"""A synchronization sent once a cycle (Horovod's), replayed on when each message was ready
(perfmodel/replay), worked by hand; its place in validation (the overlap bound of a point
whose engine saw its messages go out), and the metrics it reads from a run's records."""

import pytest

from dlscale.contract.records import Messages
from dlscale.metrics.sync_facts import sync_metrics
from dlscale.perfmodel.costs import Network
from dlscale.perfmodel.replay import cycle_exposed_s, fused

MS = 1e-3


def test_a_fast_link_sends_each_message_in_the_first_cycle_that_finds_it():
    # ready 10, 5 and 0 ms before backward's end; 2 ms a message; a 1 ms cycle:
    # -10 a (done -8), next cycle -8; nothing until -5: b (done -3); c at 0 (done 2)
    exposed = cycle_exposed_s([1, 2, 3], [10.0 * MS, 5.0 * MS, 0.0], MS, 1e9, lambda m: 2 * MS)
    assert exposed == pytest.approx(2 * MS)
    # every message out well before the end: nothing left after it
    assert cycle_exposed_s([1, 2], [10 * MS, 8 * MS], MS, 1e9, lambda m: MS) == 0.0
    assert cycle_exposed_s([], [], MS, 1e9, lambda m: MS) == 0.0


def test_a_slow_link_fuses_what_became_ready_while_it_was_sending():
    ready = [10 * MS, 6 * MS, 4 * MS]  # a, then b and c while a is being sent (6 ms)
    price = {1.0: 6 * MS, 2.0: 6 * MS, 3.0: 6 * MS, 5.0: 6 * MS}.__getitem__
    # -10 a (done -4); the next cycle wakes at once, at -4: b and c fused, done 2
    assert cycle_exposed_s([1.0, 2.0, 3.0], ready, MS, 1e9, price) == pytest.approx(2 * MS)
    # no fusion (threshold 0): b then c, 6 ms each: done 8
    assert cycle_exposed_s([1.0, 2.0, 3.0], ready, MS, 0, price) == pytest.approx(8 * MS)
    # a threshold that takes b alone: the same
    assert cycle_exposed_s([1.0, 2.0, 3.0], ready, MS, 4, price) == pytest.approx(8 * MS)


def test_a_long_cycle_waits_for_its_next_wake():
    # a 20 ms cycle: a at -10 (done -9); b ready at -5 waits for the wake at +10 (done 11)
    exposed = cycle_exposed_s([1, 2], [10 * MS, 5 * MS], 20 * MS, 1e9, lambda m: MS)
    assert exposed == pytest.approx(11 * MS)
    with pytest.raises(ValueError):
        cycle_exposed_s([1], [0.0], 0.0, 1e9, lambda m: MS)
    # a cycle too short to count in (a hand-edited 1e-320): the next message at once
    assert cycle_exposed_s([1, 2], [10 * MS, 0.0], 1e-320, 1e9, lambda m: MS) == pytest.approx(MS)


def test_fusion_keeps_the_order_and_the_threshold():
    assert fused([1, 2, 3, 4], 6) == [6, 4]
    assert fused([7, 1], 6) == [7, 1]  # a message over the threshold goes alone
    assert fused([1, 2], 0) == [1, 2]


def _point(**metrics):
    return {
        "status": "completed",
        "run_id": "r",
        "config": {"backend": "horovod-torch", "model": "tiny", "workers": 2,
                   "launcher": "local", "options": {}},
        "batch_size_per_worker": 32,
        "metrics": {"step_time_nosync_p50_ms": 20.0, "gradient_bytes": 3e6,
                    "throughput_samples_s": 3000.0, "step_time_p50_ms": 21.0,
                    "sync_pattern": "ring", "forward_time_p50_ms": 10.0, **metrics},
    }  # fmt: skip


def test_validation_replays_the_cycle_where_the_engine_saw_its_messages_go_out():
    from dlscale.perfmodel.validate import Link, compare
    from dlscale.report.model import share_words

    net = Network(alpha_s=0.0, beta_s_per_byte=2e-9)  # 2 ms a MB on the ring of 2
    sent = {"sync_message_bytes": [1_000_000, 1_000_000, 1_000_000],
            "sync_message_ready_ms": [8.0, 3.0, 0.0], "sync_cycle_ms": 1.0,
            "sync_fusion_bytes": 64 << 20}  # fmt: skip
    (row,) = compare([_point(**sent)], lambda point: Link(net))
    # -8 the first (done -6); -3 the second (done -1); 0 the third (done 2): 2 ms exposed
    assert row["overlap_samples_s"] == pytest.approx(64 / (0.020 + 0.002))
    assert row["overlap_error"] == pytest.approx(64 / 0.022 / 3000 - 1)
    assert row["overlap_from"] == "cycle replayed"
    assert share_words(row) == "cycle replayed"
    # without overlap: every message after the compute, as before
    assert row["comm_ms"] == pytest.approx(6.0) and row["messages"] == 3
    assert row["predicted_samples_s"] == pytest.approx(64 / 0.026)
    # what is not a replay's input leaves the ideal overlap (backward 50% measured)
    for bad in ({"sync_message_ready_ms": [8.0, 3.0]}, {"sync_message_ready_ms": None},
                {"sync_message_ready_ms": [8.0, float("nan"), 0.0]},
                {"sync_message_ready_ms": [8.0, -1.0, 0.0]}, {"sync_cycle_ms": 0.0},
                {"sync_cycle_ms": True}, {"sync_fusion_bytes": float("inf")},
                {"sync_fusion_bytes": "<b>x</b>"}, {"sync_cycle_ms": None}):  # fmt: skip
        (ideal,) = compare([_point(**{**sent, **bad})], lambda point: Link(net))
        assert "overlap_from" not in ideal, bad
        assert ideal["overlap_samples_s"] == pytest.approx(64 / (0.010 + max(0.010, 0.006)))
        assert share_words(ideal) == "ideal: backward 50% measured"


def test_the_metrics_take_what_the_engine_saw_and_leave_out_what_is_not_so():
    facts = {"pattern": "ring", "messages": [5, 6]}
    seen = Messages(message_bytes=[11], ready_ms=[0.5], cycle_ms=1.0, fusion_bytes=64)
    assert sync_metrics(facts, seen) == {
        "sync_pattern": "ring", "sync_servers": None, "sync_message_bytes": [11],
        "sync_message_ready_ms": [0.5], "sync_cycle_ms": 1.0, "sync_fusion_bytes": 64,
    }  # fmt: skip
    # listed, not seen: no cycle
    assert sync_metrics(facts, None) == {
        "sync_pattern": "ring", "sync_servers": None, "sync_message_bytes": [5, 6]
    }  # fmt: skip
    for bad, key in (({"ready_ms": []}, "sync_message_ready_ms"),
                     ({"ready_ms": [float("nan")]}, "sync_message_ready_ms"),
                     ({"ready_ms": [True]}, "sync_message_ready_ms"),
                     ({"cycle_ms": 0.0}, "sync_cycle_ms"), ({"cycle_ms": -1.0}, "sync_cycle_ms"),
                     ({"fusion_bytes": 1.5}, "sync_fusion_bytes"),
                     ({"fusion_bytes": None}, "sync_fusion_bytes")):  # fmt: skip
        fields = {"message_bytes": [11], "ready_ms": [0.5], "cycle_ms": 1.0, "fusion_bytes": 64}
        out = sync_metrics(facts, Messages(**{**fields, **bad}))
        assert out[key] is None and out["sync_message_bytes"] == [11], bad
    # messages that are not whole bytes: none, and nothing of their cycle
    assert sync_metrics(facts, Messages(message_bytes=[1.5], ready_ms=[0.0], cycle_ms=1.0)) == {
        "sync_pattern": "ring", "sync_servers": None, "sync_message_bytes": None
    }  # fmt: skip
    assert sync_metrics({"pattern": "<b>x</b>"}, seen) == {}
