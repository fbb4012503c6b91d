"""The messages a compiled JAX step really sends, read from its optimized HLO.

XLA may combine the gradient's all-reduces into one instruction with many operands (a tuple
``all-reduce``), but its CPU runtime then runs one collective per operand, one after another
(``xla/backends/cpu/runtime/all_reduce_thunk.cc``: a ``comm.AllReduce`` per source buffer), so
on gloo every gradient array is a message of its own, each paying its latency. The step's
messages are therefore the operands of every all-reduce in the compiled program, in the order
they appear: what :data:`dlscale.contract.algorithms.MESSAGES_FACT` records for jax-dp.
"""

from __future__ import annotations

import math
import re

ITEM_BYTES = {
    "pred": 1,
    "s8": 1,
    "u8": 1,
    "s16": 2,
    "u16": 2,
    "f16": 2,
    "bf16": 2,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "s64": 8,
    "u64": 8,
    "f64": 8,
    "c64": 8,
    "c128": 16,
}
"""Bytes per element of XLA's primitive types (``f32[16,3,3,3]``)."""

_INSTRUCTION = re.compile(r"=\s*(?P<shape>.*?)\s+all-reduce(?:-start)?\(")
_ARRAY = re.compile(r"\b(?P<type>[a-z][a-z0-9]*)\[(?P<dims>[\d,]*)\]")


def all_reduce_messages(hlo_text: str) -> list[int]:
    """The bytes of each array every all-reduce of ``hlo_text`` (an optimized HLO module, as
    ``compiled.as_text()`` prints it) reduces, in the program's order; an asynchronous pair
    (``all-reduce-start`` / ``-done``) counts once."""
    messages = []
    for line in hlo_text.splitlines():
        found = _INSTRUCTION.search(line)
        if found is None:
            continue
        for array in _ARRAY.finditer(found["shape"]):
            if array["type"] not in ITEM_BYTES:
                raise ValueError(f"an all-reduce of an unknown XLA type {array['type']!r}")
            dims = [int(d) for d in array["dims"].split(",") if d]
            messages.append(math.prod(dims) * ITEM_BYTES[array["type"]])
    return messages
