"""What a run's ``strategy`` record (and, where the engine saw its messages sent, its
``messages`` record) says of its synchronization, as the metrics the performance model reads:
``sync_pattern``, ``sync_servers``, ``sync_message_bytes`` and, for an engine that sends once a
cycle (Horovod), ``sync_message_ready_ms``, ``sync_cycle_ms`` and ``sync_fusion_bytes``
(docs/metrics.md). What is not the shape the model needs is left out, never passed on."""

from __future__ import annotations

from typing import Any

from dlscale.contract.algorithms import MESSAGES_FACT, PATTERN_FACT
from dlscale.contract.records import Messages
from dlscale.contract.shapes import MAX_QUANTITY
from dlscale.perfmodel.patterns import PATTERNS


def sync_metrics(facts: dict[str, Any], seen: Messages | None) -> dict[str, Any]:
    """The synchronization pattern the engine named (``sync_pattern``; one the performance
    model knows, else none), a parameter server's servers (``sync_servers``) and the bytes of
    each message a synchronized step sends (``sync_message_bytes``: those the engine saw sent,
    ``seen``, else those it listed, where they are whole positive numbers), with how they went
    out where the engine saw them (:func:`_cycle`)."""
    pattern = facts.get(PATTERN_FACT)
    if not isinstance(pattern, str) or pattern not in PATTERNS:
        return {}
    servers = facts.get("servers")
    ps = PATTERNS[pattern].served and isinstance(servers, int) and servers >= 1
    messages = seen.message_bytes if seen is not None else facts.get(MESSAGES_FACT)
    if not _byte_counts(messages):
        messages = None
    return {
        "sync_pattern": pattern,
        "sync_servers": servers if ps else None,
        "sync_message_bytes": messages,
        **_cycle(seen if messages is not None else None),
    }


def _cycle(seen: Messages | None) -> dict[str, Any]:
    """How a step's messages went out, where the engine saw them (Horovod): each one's ready
    time before backward's end (``sync_message_ready_ms``: one finite number of ms >= 0 a
    message, else none), the cycle it sends in (``sync_cycle_ms``) and its fusion threshold
    (``sync_fusion_bytes``)."""
    if seen is None:
        return {}
    ready, cycle, fusion = seen.ready_ms, seen.cycle_ms, seen.fusion_bytes
    whole = isinstance(ready, list) and len(ready) == len(seen.message_bytes)
    return {
        "sync_message_ready_ms": ready if whole and all(_quantity(r) for r in ready) else None,
        "sync_cycle_ms": cycle if _quantity(cycle) and cycle else None,
        "sync_fusion_bytes": fusion if _quantity(fusion) and type(fusion) is int else None,
    }


def _quantity(value: Any) -> bool:
    """A finite number from 0 to :data:`MAX_QUANTITY` (not a flag)."""
    return type(value) in (int, float) and 0 <= value <= MAX_QUANTITY


def _byte_counts(value: Any) -> bool:
    """``value`` is a non-empty list of whole byte counts above 0."""
    if not isinstance(value, list) or not value:
        return False
    return all(type(m) is int and 0 < m <= MAX_QUANTITY for m in value)
