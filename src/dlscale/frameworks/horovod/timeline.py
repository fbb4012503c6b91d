"""The messages Horovod really sent, read from its timeline (Chrome's trace format).

Horovod's background thread wakes every ``cycle_ms``, takes the tensors whose gradients are
ready on every rank and all-reduces them as one *response*: fused into one buffer of up to
``fusion_mb`` MB, else alone. Which tensors share a response depends on when backward produced
them, so only the run can say; its timeline (written by rank 0) does. In it each tensor is a
"process" (``pid``, named ``allreduce.<name>`` by the metadata events) whose ``ALLREDUCE``
activity begins (``B``) when its response starts and ends (``E``, with the tensor's ``dtype``
and ``shape``) when it is done; the background thread runs responses one after another, so the
tensors of one response have overlapping ``ALLREDUCE`` spans and the next response begins
after the last of them ended.

A step all-reduces each gradient tensor once: the responses in time order are cut into steps
where a tensor comes again. :func:`fused_steps` gives each complete step's messages (bytes per
response): a run that recorded its timeline (``horovod_timeline``) lists a typical one as its
``sync_message_bytes`` (:mod:`~dlscale.frameworks.horovod.fusion`).

The file is the run's own but is read as untrusted: at most :data:`MAX_BYTES`, event by event
(a timeline cut short by a killed process still gives its complete events), and anything that
is not what Horovod writes is left out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_BYTES = 64 * 2**20
"""The largest timeline read (ResNet-20 on 2 ranks writes about 40 KB a step)."""
ITEM_BYTES = {
    "bool": 1,
    "uint8": 1,
    "int8": 1,
    "uint16": 2,
    "int16": 2,
    "float16": 2,
    "bfloat16": 2,
    "int32": 4,
    "float32": 4,
    "int64": 8,
    "float64": 8,
}
"""Bytes per element of the dtypes Horovod names in its timeline."""


@dataclass(frozen=True)
class _Span:
    tensor: str
    start: float
    end: float
    nbytes: int


def read_events(path: Path) -> list[dict[str, Any]]:
    """The timeline's complete events, in file order; none where the file is missing, larger
    than :data:`MAX_BYTES` or not a trace."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_BYTES + 1)
    except OSError:
        return []
    if len(data) > MAX_BYTES:
        return []
    text = data.decode("utf-8", errors="replace")
    decoder = json.JSONDecoder()
    events: list[dict[str, Any]] = []
    at = text.find("[")
    if at < 0:
        return []
    at += 1
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        if at >= len(text) or text[at] == "]":
            return events
        try:
            event, at = decoder.raw_decode(text, at)
        except ValueError:  # cut short while being written
            return events
        if isinstance(event, dict):
            events.append(event)


def allreduce_spans(events: list[dict[str, Any]]) -> list[_Span]:
    """Each tensor's ``ALLREDUCE`` activities with its bytes, in order of their start."""
    names: dict[Any, str] = {}
    open_: dict[Any, list[tuple[str, float]]] = {}
    spans: list[_Span] = []
    for event in events:
        pid, phase = event.get("pid"), event.get("ph")
        if phase == "M" and event.get("name") == "process_name":
            args = event.get("args")
            name = args.get("name") if isinstance(args, dict) else None
            if isinstance(name, str):
                names[pid] = name
        elif phase == "B" and isinstance(event.get("ts"), (int, float)):
            open_.setdefault(pid, []).append((str(event.get("name")), float(event["ts"])))
        elif phase == "E" and open_.get(pid) and isinstance(event.get("ts"), (int, float)):
            activity, start = open_[pid].pop()
            nbytes = tensor_bytes(event.get("args"))
            if activity == "ALLREDUCE" and nbytes is not None and pid in names:
                spans.append(_Span(names[pid], start, float(event["ts"]), nbytes))
    return sorted(spans, key=lambda span: span.start)


def tensor_bytes(args: Any) -> int | None:
    """A tensor's bytes from an ``E`` event's ``dtype`` and ``shape`` (``"[64, 3, 3]"``);
    ``None`` where they are not a known dtype and a list of sizes."""
    if not isinstance(args, dict) or args.get("dtype") not in ITEM_BYTES:
        return None
    try:
        shape = json.loads(str(args.get("shape")))
    except ValueError:
        return None
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        return None
    count = 1
    for dim in shape:
        count *= dim
    return count * ITEM_BYTES[args["dtype"]]


def fused_steps(path: Path) -> list[list[int]]:
    """Each complete step's messages in the timeline at ``path``: the bytes of each response
    (its tensors' bytes summed), in the order they were sent. A step is complete when it
    all-reduced every tensor the timeline's fullest step did (a timeline starts between steps,
    at Horovod's start; its last step may be cut)."""
    responses: list[list[_Span]] = []
    ends = -float("inf")  # when the open response's last tensor was done
    for span in allreduce_spans(read_events(path)):
        if span.start < ends:  # begun before the open response ended: fused into it
            responses[-1].append(span)
            ends = max(ends, span.end)
        else:
            responses.append([span])
            ends = span.end
    steps: list[list[list[_Span]]] = []
    seen: set[str] = set()
    for response in responses:
        tensors = {span.tensor for span in response}
        if not steps or tensors & seen:
            steps.append([])
            seen = set()
        steps[-1].append(response)
        seen |= tensors
    if not steps:
        return []
    tensors_of = [{s.tensor for r in step for s in r} for step in steps]
    whole = max(len(t) for t in tensors_of)
    return [
        [sum(span.nbytes for span in response) for response in step]
        for step, tensors in zip(steps, tensors_of, strict=True)
        if len(tensors) == whole
    ]
