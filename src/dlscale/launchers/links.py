"""An emulated node's link (``network = "RATE[:LATENCY]"``): the setting read, and the tc
commands that shape an interface to it (launchers/network.py builds the namespaces; the test
bed of launchers/testbed.py shapes its hosts' links the same way)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from dlscale.contract.errors import UserError

_RATE = re.compile(r"^([0-9]{1,15}(?:\.[0-9]{1,15})?)\s*([kmgt]?)bit(?:/s)?\Z")
_DELAY = re.compile(r"^([0-9]{1,15}(?:\.[0-9]{1,15})?)\s*(us|ms|s)\Z")
_RATE_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_DELAY_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
FORMAT = (
    "RATE[:LATENCY] with RATE like 100mbit, 1gbit, 10gbit or 'unshaped' (the veth's own speed) "
    "and LATENCY the one-way delay between two nodes like 100us or 1ms"
)


@dataclass(frozen=True)
class Link:
    """What ``network = "RATE[:LATENCY]"`` asks of every node's link."""

    rate_bit_s: int | None
    """Bits per second each way; ``None``: unshaped (the veth's own speed)."""
    latency_s: float
    """Added one-way delay between two nodes (seconds)."""

    @classmethod
    def parse(cls, text: str) -> Link:
        rate_text, _, delay_text = text.strip().lower().partition(":")
        what = f"network = {text!r}"
        rate = None if rate_text == "unshaped" else parse_rate(rate_text, what)
        latency = parse_latency(delay_text, what) if delay_text else 0.0
        return cls(rate, latency)


PLANNED = "a rate like 100mbit, 25gbit or 3.6tbit, a latency like 5us or 1ms"
"""What a planned link's figures look like (``dlscale predict``: no emulated node's setting)."""


def parse_rate(text: str, what: str, most: int = 10**12, form: str = FORMAT) -> int:
    """A link's rate like ``100mbit`` or ``25Gbit`` in bit/s (decimal units, as tc reads
    them), 8 kbit/s to ``most`` (tc's 1000 Gbit/s); ``what`` names the setting in the error,
    ``form`` what it takes."""
    match = _RATE.match(text.strip().lower())
    if not match:
        raise UserError(f"{what}: cannot read the rate; give {form}")
    rate = round(float(match[1]) * _RATE_UNITS[match[2]])
    if not 8_000 <= rate <= most:
        raise UserError(f"{what}: the rate must be 8kbit to {most / 1e9:.0f}gbit")
    return rate


def parse_latency(text: str, what: str, form: str = FORMAT) -> float:
    """A one-way delay like ``100us`` or ``1ms`` in seconds, at most 10 s."""
    match = _DELAY.match(text.strip().lower())
    if not match:
        raise UserError(f"{what}: cannot read the latency; give {form}")
    latency = float(match[1]) * _DELAY_UNITS[match[2]]
    if not (math.isfinite(latency) and latency <= 10.0):
        raise UserError(f"{what}: the latency must be at most 10 s")
    return latency


def check_network(value: Any) -> None:
    """The ``network`` option's check: empty (no emulation) or a :class:`Link`."""
    if value:
        Link.parse(value)


def burst_bytes(rate_bit_s: int) -> int:
    """The token bucket's burst at ``rate_bit_s``: the bytes of 4 ms at the rate (the bucket
    must not cap below the rate between the kernel's timer ticks), at least two full frames; no
    more, or a slow link would send a long run of steps' gradients at once (64 KiB is half a
    second at 1 Mbit/s). Measured here: 1.0, 19.1, 951 Mbit/s TCP goodput at 1, 20, 1000. A
    message under it passes unshaped, at the loopback's speed (docs/perfmodel.md)."""
    return max(4096, rate_bit_s // 8 // 250)


def shaping(link: Link, namespace: str, device: str) -> list[tuple[str, ...]]:
    """The tc commands that shape ``device`` (in ``namespace``) on its way out: a token bucket
    at the link's rate and, for a latency, netem's delay of half the one-way latency inside."""
    tc = ("tc", "-n", namespace, "qdisc", "add", "dev", device)  # no space in either name
    out: list[tuple[str, ...]] = []
    parent: tuple[str, ...] = ("root",)
    if link.rate_bit_s is not None:
        burst = burst_bytes(link.rate_bit_s)
        shape = f"root handle 1: tbf rate {link.rate_bit_s}bit burst {burst} latency 100ms"
        out.append((*tc, *shape.split()))
        parent = ("parent", "1:1")
    if link.latency_s > 0:
        delay = f"{link.latency_s / 2 * 1e6:.3f}us"
        out.append((*tc, *parent, "handle", "10:", "netem", "delay", delay, "limit", "100000"))
    return out
