"""How far to trust ``dlscale predict``'s forward predictions: the validated error of each
strategy's algorithm, engine by engine, on the prediction's kind of network, from the measured
points and microbench runs of one results directory (what ``dlscale predict --validate`` shows
of it: :mod:`dlscale.perfmodel.trust`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dlscale.perfmodel import trust
from dlscale.perfmodel.links import Link


def validation_rows(
    results: Path, link_of: Callable[[dict[str, Any]], Link | None]
) -> list[dict[str, Any]]:
    """Every stored point of ``results`` the model predicts, on the network ``link_of`` gives
    it, beside its measurement (:func:`dlscale.perfmodel.validate.compare`)."""
    from dlscale.metrics.scaling import add_scaling
    from dlscale.perfmodel.validate import compare
    from dlscale.store.results import RunStore

    return compare(add_scaling(RunStore(results).results()), link_of)


def stored_rows(results: Path, warn: bool = True) -> list[dict[str, Any]]:
    """:func:`validation_rows` on the networks ``results``' own microbench runs fitted; none
    where there is no such directory or no usable fit (a damaged microbench file is one
    warning, unless ``warn`` is off: the caller read them already)."""
    from dlscale.perfmodel.networks import fitted_networks, link_lookup
    from dlscale.store.results import print_warning

    if not results.is_dir():
        return []
    said = print_warning if warn else None
    fitted = fitted_networks(results, on_problem=said, on_skipped=said)
    if not fitted:
        return []
    link_of, _ = link_lookup(fitted)
    return validation_rows(results, link_of)


@dataclass(frozen=True)
class Trust:
    """The validation rows of ``source`` and the network kind a prediction is made on
    (``kind``: ``(launcher, network, nodes)`` of the microbench it took its network from;
    ``None``: a network given by bandwidth and latency, which every measured kind is shown
    for, each named)."""

    source: Path
    rows: list[dict[str, Any]]
    kind: tuple[Any, ...] | None

    def of(self, strategy: str, servers: int) -> list[trust.Validated]:
        kinds = [self.kind] if self.kind is not None else trust.kinds(self.rows)
        return [v for k in kinds for v in trust.validated(self.rows, strategy, k, servers)]

    def interval(self, strategy: str, servers: int) -> tuple[float, float, int] | None:
        """The span of what the points validating ``strategy`` measured against their
        predictions (:func:`~dlscale.perfmodel.trust.interval`), on the prediction's network
        kind (a given network: every kind)."""
        return trust.interval(self.rows, strategy, self.kind, servers)

    def record(self, strategy: str, servers: int) -> list[dict[str, Any]]:
        """The JSON of :meth:`of`: an empty list where the strategy was never validated."""
        return [asdict(v) for v in self.of(strategy, servers)]

    def lines(self, strategies: list[str], servers: int) -> list[str]:
        """The words: a heading, then one line per strategy."""
        if not self.rows:
            return [
                f"how far to trust it: never validated here: {self.source} has no measured "
                "point of 2 workers or more with a microbench of its network (`dlscale predict "
                "--validate DIR` compares the model with what was measured; docs/perfmodel.md)"
            ]
        where = (
            f"on this network ({trust.kind_words(self.kind)})"
            if self.kind is not None
            else "on every network measured there (the prediction's was given)"
        )
        heading = (
            f"how far to trust it: the median absolute error of the engines validated {where} "
            f"in {self.source} (`dlscale predict --validate` lists them):"
        )
        lines, never = [heading], []
        for strategy in strategies:
            found = self.of(strategy, servers)
            elsewhere = [
                trust.kind_words(k)
                for k in trust.kinds(self.rows)
                if k != self.kind and trust.validated(self.rows, strategy, k, servers)
            ]
            if found or elsewhere:
                words = trust.trust_words(strategy, found, elsewhere, self.kind is None)
                lines.append("  " + words)
            else:
                never.append(strategy)
        if never:
            lines.append(f"  never validated here: {', '.join(never)}")
        return lines
