"""The messages a Horovod step sends: fused within its cycle from the gradients' ready times
(frameworks/horovod/fusion), and Horovod's fused responses read from its timeline
(frameworks/horovod/timeline) on timelines written here as Horovod writes them: each tensor a
``pid``, its ``ALLREDUCE`` activity ending with the tensor's dtype and shape; the tensors of
one response overlap in time."""

import json
from pathlib import Path

import pytest

from dlscale.frameworks.horovod import timeline
from dlscale.frameworks.horovod.fusion import StepMessages, cycle_messages, typical_step
from dlscale.frameworks.horovod.timeline import fused_steps

TENSORS = {"fc.bias": (10,), "fc.weight": (10, 64), "conv.weight": (64, 64, 3, 3), "bn.bias": (64,)}
PIDS = {name: pid for pid, name in enumerate(TENSORS, start=1)}


def _names() -> list[dict]:
    return [
        {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"allreduce.{name}"}}
        for name, pid in PIDS.items()
    ]


def _response(start: int, end: int, names: list[str], dtype: str = "float32") -> list[dict]:
    """One response's events: each tensor's negotiation, then its ALLREDUCE with an inner
    GLOO_ALLREDUCE, as Horovod nests them."""
    events = []
    for name in names:
        pid = PIDS[name]
        events += [
            {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": start - 50, "pid": pid},
            {"ph": "X", "name": "0", "ts": start - 40, "pid": pid, "dur": 0},
            {"ph": "E", "ts": start - 10, "pid": pid},
            {"ph": "B", "name": "ALLREDUCE", "ts": start, "pid": pid},
            {"ph": "B", "name": "GLOO_ALLREDUCE", "ts": start + 1, "pid": pid},
            {"ph": "E", "ts": end - 1, "pid": pid},
            {
                "ph": "E",
                "ts": end,
                "pid": pid,
                "args": {"dtype": dtype, "shape": json.dumps(list(TENSORS[name]))},
            },
        ]
    return events


def _write(path: Path, events: list[dict], *, closed: bool = True) -> Path:
    text = "[\n" + ",\n".join(json.dumps(e) for e in events) + ("]" if closed else ",\n")
    path.write_text(text)
    return path


def _bytes(*names: str) -> int:
    total = 0
    for name in names:
        count = 1
        for dim in TENSORS[name]:
            count *= dim
        total += 4 * count
    return total


def test_fused_tensors_are_one_message_and_steps_are_cut_where_a_tensor_comes_again(tmp_path):
    step1 = (
        _response(1000, 1400, ["fc.bias", "fc.weight"])  # fused: one message
        + _response(1400, 2000, ["conv.weight"])  # starts as the last one ended: its own
        + _response(2100, 2200, ["bn.bias"])
    )
    step2 = _response(9000, 9900, ["fc.bias", "fc.weight", "conv.weight", "bn.bias"])
    path = _write(tmp_path / "t.json", _names() + step1 + step2)
    steps = fused_steps(path)
    assert steps == [
        [_bytes("fc.bias", "fc.weight"), _bytes("conv.weight"), _bytes("bn.bias")],
        [_bytes(*TENSORS)],
    ]
    assert sum(steps[0]) == sum(steps[1]) == _bytes(*TENSORS)
    assert typical_step(steps) == steps[0]  # of two middle counts, the higher
    assert typical_step([]) == []


def test_a_step_the_timeline_holds_only_part_of_is_left_out(tmp_path):
    whole = _response(1000, 1200, ["fc.bias", "fc.weight"]) + _response(
        1300, 1400, ["conv.weight", "bn.bias"]
    )
    cut = _response(2000, 2100, ["fc.bias", "fc.weight"])  # the timeline stopped in it
    path = _write(tmp_path / "t.json", _names() + whole + cut)
    assert fused_steps(path) == [[_bytes("fc.bias", "fc.weight"), _bytes("conv.weight", "bn.bias")]]


def test_a_timeline_cut_short_while_written_gives_its_complete_events(tmp_path):
    events = _names() + _response(1000, 1100, list(TENSORS)) + _response(2000, 2100, list(TENSORS))
    text = "[\n" + ",\n".join(json.dumps(e) for e in events)
    path = tmp_path / "t.json"
    path.write_text(text[: len(text) - 30])  # the last event half written, no closing bracket
    assert fused_steps(path) == [[_bytes(*TENSORS)]]
    assert fused_steps(_write(tmp_path / "open.json", events, closed=False)) == [
        [_bytes(*TENSORS)],
        [_bytes(*TENSORS)],
    ]


def test_what_horovod_does_not_write_is_left_out(tmp_path):
    hostile = [
        *_names(),
        "not an event",
        {"ph": "E", "ts": 5, "pid": 99, "args": {"dtype": "float32", "shape": "[1]"}},  # no B
        {"ph": "B", "name": "ALLREDUCE", "ts": "soon", "pid": 1},
        {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": ["<b>x</b>"]}},
        {"ph": "M", "name": "process_name", "pid": 8, "args": ["<b>x</b>"]},  # args not a dict
    ]
    events = hostile + _response(1000, 1100, ["fc.bias"], dtype="float8")  # unknown dtype
    bad_shape = _response(2000, 2100, ["fc.weight"])
    bad_shape[-1]["args"]["shape"] = "[-1, 10]"
    assert fused_steps(_write(tmp_path / "t.json", events + bad_shape)) == []
    for text in ("", "{}", "nothing", "[", '[{"ph": "B"'):
        (tmp_path / "x.json").write_text(text)
        assert fused_steps(tmp_path / "x.json") == []
    assert fused_steps(tmp_path / "missing.json") == []


def test_a_timeline_over_the_limit_is_not_read(tmp_path, monkeypatch):
    path = _write(tmp_path / "t.json", _names() + _response(1000, 1100, list(TENSORS)))
    assert fused_steps(path) == [[_bytes(*TENSORS)]]
    monkeypatch.setattr(timeline, "MAX_BYTES", path.stat().st_size - 1)
    assert fused_steps(path) == []


def test_bytes_follow_the_dtype_and_a_scalar_is_one_element():
    assert timeline.tensor_bytes({"dtype": "float16", "shape": "[64, 3]"}) == 384
    assert timeline.tensor_bytes({"dtype": "int32", "shape": "[]"}) == 4
    assert timeline.tensor_bytes({"dtype": "float64", "shape": "[2, 0]"}) == 0
    f32 = {"dtype": "float32"}
    for args in (None, {}, f32, {**f32, "shape": "[1.5]"}, {**f32, "shape": "[true]"},
                 {**f32, "shape": "{"}, {"dtype": "<b>", "shape": "[1]"}):  # fmt: skip
        assert timeline.tensor_bytes(args) is None


def _sizes(ready, cycle, threshold):
    return [nbytes for nbytes, _ in cycle_messages(ready, cycle, threshold)]


def test_tensors_ready_within_a_cycle_of_a_messages_first_are_fused_up_to_the_threshold():
    ms = 1e-3
    ready = [(10.0, 40), (10.0 + 0.4 * ms, 2), (10.0 + 0.9 * ms, 8), (10.0 + 1.2 * ms, 16)]
    assert _sizes(ready, ms, 2**20) == [50, 16]  # a cycle from 10.0: 3 of them
    assert _sizes(list(reversed(ready)), ms, 2**20) == [50, 16]  # by time, not order
    # each message ready when its last tensor was
    assert cycle_messages(ready, ms, 2**20) == [(50, 10.0 + 0.9 * ms), (16, 10.0 + 1.2 * ms)]
    assert _sizes(ready, ms, 42) == [42, 24]  # 40+2 fills it; 8 opens the next
    assert _sizes(ready, ms, 0) == [40, 2, 8, 16]  # fusion off: each alone
    assert _sizes(ready, 10.0, 2**20) == [66]  # a long cycle takes them all
    assert cycle_messages([], ms, 2**20) == []
    # a chain of tensors each within a cycle of the one before is not one message: the window
    # is counted from the message's first tensor
    chain = [(i * 0.6 * ms, 1) for i in range(5)]
    assert _sizes(chain, ms, 2**20) == [2, 2, 1]
    # a step's messages with how long before its last tensor each was ready, in ms
    steps = StepMessages(ms, 2**20)
    steps.add(ready)
    ((sizes, ready_ms),) = steps.steps()
    assert sizes == [50, 16] and ready_ms == pytest.approx([0.3, 0.0])


def test_a_step_that_synchronized_nothing_is_not_kept_and_only_the_last_are():
    steps = StepMessages(1e-3, 2**20)
    steps.add([])  # a no-sync step of the probe
    assert steps.steps() == []
    for i in range(600):
        steps.add([(0.0, i + 1)])
    kept = steps.steps()
    assert len(kept) == 512 and kept[0] == ([89], [0.0]) and kept[-1] == ([600], [0.0])
