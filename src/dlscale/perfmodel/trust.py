"""How far to trust a prediction: what ``dlscale predict --validate`` measured of the model on
a pattern, engine by engine, on one kind of network (docs/perfmodel.md, "How far to trust a
prediction").

A forward prediction (``dlscale predict``) is of a pattern, not of an engine; the engines that
run it were validated one by one (:func:`~.validate.compare`: each measured point predicted on
its own pattern). A pattern's trust is those engines' median absolute errors on the same network
kind (launcher, emulated network, nodes: :func:`~.validate.network_key`), without its overlap
by their ``error``, with it (``ring-overlap``) by their ``overlap_error`` (not a row whose bound
is its engine's cycle replayed: another model), a parameter server's at the same number of
servers; its interval is the range of every such point's error (:func:`interval`). A pattern no
engine ran (``tree``, ``hierarchical``) is never validated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlscale.perfmodel.patterns import variant
from dlscale.perfmodel.validate import REPLAYED, counted, median_errors


@dataclass(frozen=True)
class Validated:
    """One engine's validated error on a strategy's algorithm and one network kind."""

    backend: str
    network: str
    """The network kind in words (:func:`kind_words`)."""
    points: int
    """The points the median is over (the quiet ones, unless every one was flagged noisy)."""
    median_abs_error: float
    models: tuple[str, ...] = ()
    """The models of those points (the error is the model's on them, not on any other)."""

    def words(self, where: bool = False) -> str:
        """``torch-ddp 0.1% over 4 points of resnet20`` (``where``: and ``on <network
        kind>``)."""
        noun = "point" if self.points == 1 else "points"
        on = f" on {self.network}" if where else ""
        models = f" of {', '.join(self.models)}" if self.models else ""
        return f"{self.backend} {self.median_abs_error:.1%} over {self.points} {noun}{models}{on}"


def kind_words(kind: tuple[Any, ...]) -> str:
    """``(launcher, network, nodes)`` in words: ``local launcher``, ``mpirun launcher, emulated
    1gbit, 2 nodes``."""
    launcher, network, nodes = kind
    words = f"{launcher} launcher"
    if network:
        words += f", emulated {network}"
    if nodes not in (1, "1", None):
        words += f", {nodes} nodes"
    return words


def row_kind(row: dict[str, Any]) -> tuple[Any, ...]:
    """A validation row's network kind: ``(launcher, network, nodes)``."""
    return (row.get("launcher"), row.get("network") or "", row.get("nodes") or 1)


def chosen_rows(
    rows: list[dict[str, Any]], name: str, kind: tuple[Any, ...] | None, servers: int = 1
) -> tuple[list[dict[str, Any]], str]:
    """The rows that validate the pattern ``name`` (``ring-overlap``: the ring with its
    overlap) on the network ``kind`` (``None``: every kind), and the error they measure it by."""
    pattern, overlap = variant(name)
    measure = "overlap_error" if overlap else "error"
    found = [
        r
        for r in rows
        if r["algorithm"] == pattern.name
        and (kind is None or row_kind(r) == kind)
        and (not pattern.served or r.get("servers") == servers)
        and r.get(measure) is not None
        and not (overlap and r.get("overlap_from") == REPLAYED)
    ]
    return found, measure


def validated(
    rows: list[dict[str, Any]], name: str, kind: tuple[Any, ...], servers: int = 1
) -> list[Validated]:
    """The engines validated on the pattern ``name`` on the network ``kind`` (a parameter
    server's at ``servers`` servers), each with its median absolute error, in the rows' order;
    empty: never validated there."""
    chosen, measure = chosen_rows(rows, name, kind, servers)
    found = []
    for backend in dict.fromkeys(str(r["backend"]) for r in chosen):
        own = [r for r in chosen if str(r["backend"]) == backend]
        median = median_errors(own)[measure]  # over counted(own)
        if median is not None:
            basis = counted(own)
            models = tuple(sorted({str(r.get("model")) for r in basis}))
            found.append(Validated(backend, kind_words(kind), len(basis), median, models))
    return found


def interval(
    rows: list[dict[str, Any]], name: str, kind: tuple[Any, ...] | None, servers: int = 1
) -> tuple[float, float, int] | None:
    """What a prediction of ``name`` on ``kind`` is to be multiplied by to span what every
    validating point measured (quiet points, as the medians count them; every engine's):
    ``(low, high, points)`` with ``low <= 1 <= high``, a point of error ``e`` (predicted /
    measured - 1) measured ``1 / (1 + e)`` of its prediction; ``None``: never validated."""
    chosen, measure = chosen_rows(rows, name, kind, servers)
    errors = [float(r[measure]) for r in counted(chosen)]
    if not errors:
        return None
    return 1 / (1 + max(0.0, *errors)), 1 / (1 + min(0.0, *errors)), len(errors)


def kinds(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The network kinds the rows were measured on, in their order."""
    return list(dict.fromkeys(row_kind(r) for r in rows))


def trust_words(
    strategy: str, found: list[Validated], elsewhere: list[str], where: bool = False
) -> str:
    """One pattern's trust in a line: its engines' validated errors (``where``: each with its
    network kind), or that it was never validated (``elsewhere``: the network kinds where it
    was)."""
    if found:
        return f"{strategy}: " + ", ".join(v.words(where) for v in found)
    if where:  # every network kind was looked at
        return f"{strategy}: never validated"
    others = f" (validated on: {'; '.join(elsewhere)})" if elsewhere else ""
    return f"{strategy}: never validated on this network{others}"
