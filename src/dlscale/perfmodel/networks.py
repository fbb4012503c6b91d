"""The networks that stored ``dlscale microbench`` runs measured: their rows and fits,
read back from ``microbench-*/microbench.json`` in a results directory, for ``dlscale predict``
and the report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeGuard

from dlscale.contract.errors import SchemaError
from dlscale.contract.numbers import finite_number as is_finite
from dlscale.contract.shapes import MAX_QUANTITY, TIMESTAMP
from dlscale.contract.text import excerpt
from dlscale.perfmodel.costs import COLLECTIVES, Network, measured_name
from dlscale.perfmodel.links import Link
from dlscale.perfmodel.validate import network_key, plain_key

PLAUSIBLE_BIT_S = 1e14
"""100 Tbit/s (12.5 TB/s): more than any link carries and more than one device's memory moves
(an H200's HBM: 4.8 TB/s); a stored fit beyond it is said to be implausible where it is used."""


@dataclass(frozen=True)
class Fitted:
    """A stored microbench's network, as found: how, when and by which run, and the
    :class:`~.links.Link` (its fits by name and its measured collectives) that predicts
    on it."""

    said: str
    """How it was found, in one line: which run fitted it, alpha, bandwidth, the fit's error."""
    started_at: float
    run_id: str
    link: Link

    @property
    def network(self) -> Network:
        """The ring's fit, else (a run without an all-reduce: MXNet's parameter servers) the
        first of :data:`~.costs.FITS` the run fitted (``link.fit`` says which)."""
        return self.link.network


def microbench_runs(
    results: Path, on_problem: Callable[[str], None] | None = None
) -> list[dict[str, Any]]:
    """Every readable stored microbench run in ``results``, oldest first; a damaged one, one
    from a newer dlscale, or one without a configuration or a plausible start time (seconds
    since the epoch in :data:`~dlscale.contract.shapes.TIMESTAMP_RANGE_S`) is left out, and
    ``on_problem`` hears which file and what is wrong with it, in one line."""
    from dlscale.contract.files import read_json

    runs = []
    for path in sorted(results.glob("microbench-*/microbench.json")):
        try:
            stored = read_json(path, "microbench")
            problem = _unusable_run(stored)
        except SchemaError as error:
            problem = str(error).removeprefix(f"{path}: ")
        except ValueError as error:  # a number of more digits than Python reads
            problem = f"not readable JSON ({str(error)[:80]})"
        if problem is not None:
            if on_problem is not None:
                on_problem(f"skipped {path}: {problem}")
            continue
        runs.append({**stored, "run_id": path.parent.name})
    return sorted(runs, key=lambda run: float(run["started_at"]))


def _unusable_run(stored: dict[str, Any]) -> str | None:
    """What makes a stored microbench run unusable as a whole (its rows and fits are checked
    one by one where they are used: a bad one is left out, not the run)."""
    started = stored.get("started_at")
    if started is None:
        return "no start time in it (damaged?)"
    if not (finite_number(started) and TIMESTAMP.low <= started <= TIMESTAMP.high):
        return f"started_at is {excerpt(started)}, not {TIMESTAMP.expected}"
    config = stored.get("config")
    if not isinstance(config, dict):
        return f"config is {excerpt(config)}, not an object (damaged?)"
    return None


def fitted_networks(
    results: Path,
    on_problem: Callable[[str], None] | None = None,
    on_skipped: Callable[[str], None] | None = None,
) -> dict[tuple[Any, ...], Fitted]:
    """The network of the newest microbench in ``results`` with a fit (its all-reduce's ring
    fit, else another pattern's: :func:`stored_fits`) and no error for each engine (backend),
    launcher, emulated network and node count: keyed ``(backend, *network_key)``. A newest fit
    that cannot be used (not finite, no bandwidth) is left out and ``on_problem`` hears why;
    ``on_skipped`` hears each file :func:`microbench_runs` leaves out."""
    from dlscale.perfmodel.costs import FITS

    newest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for run in microbench_runs(results, on_skipped):
        if not stored_fits(run) or run.get("error"):
            continue  # a failed or wrong run measured nothing to trust
        config = run["config"]
        newest[(plain_key(config.get("backend")), *network_key(config))] = run  # the newest stays
    found: dict[tuple[Any, ...], Fitted] = {}
    for key, run in newest.items():
        fits = stored_fits(run)
        pattern = next((p for p in FITS if p in fits), next(iter(fits)))  # the ring first
        fit = fits[pattern]
        network = stored_fit(fit)
        if network is None:
            if on_problem is not None:
                on_problem(_unusable(fit, results / run["run_id"] / "microbench.json"))
            continue
        if network.bandwidth_bit_s > PLAUSIBLE_BIT_S and on_problem is not None:
            on_problem(
                f"{results / run['run_id'] / 'microbench.json'}: its {pattern} fit gives "
                f"{network.bandwidth_bit_s / 1e12:.3g} Tbit/s, more than any link or memory "
                f"moves ({PLAUSIBLE_BIT_S / 1e12:g} Tbit/s); used as stored, but its "
                "predictions are no better than the fit: measure again (dlscale microbench "
                "with sizes that span your gradient's)"
            )
        error = fit.get("median_error")
        error_words = f"{error:.1%}" if finite_number(error) else "unknown"
        which = "" if pattern == "ring" else f" ({pattern} fit)"
        said = (
            f"fitted by {run['run_id']}{which}: alpha {network.alpha_s * 1e6:.1f} us, "
            f"{network.bandwidth_bit_s / 1e9:.3g} Gbit/s effective, fit's median error "
            f"{error_words}"
        )
        processes = int(run["processes"]) if finite_number(run.get("processes")) else 0
        patterns = {name: net for name, fit in fits.items() if (net := stored_fit(fit)) is not None}
        link = Link(network, measured_rows(run), processes, patterns, pattern)
        found[key] = Fitted(said, float(run["started_at"]), run["run_id"], link)
    return found


def measured_rows(run: dict[str, Any]) -> dict[str, tuple[tuple[float, float], ...]]:
    """A microbench run's usable (bytes, seconds) rows by collective; a parameter server's
    push and pull as ``ps_pushpull/<servers>`` (its time depends on how many served)."""
    found: dict[str, list[tuple[float, float]]] = {}
    for row in run.get("rows") or []:
        if not (
            isinstance(row, dict) and isinstance(row.get("collective"), str)
            and finite_number(row.get("bytes")) and finite_number(row.get("time_s"))
            and row["bytes"] > 0 and row["time_s"] > 0
        ):  # fmt: skip
            continue
        name, servers = row["collective"], row.get("servers")
        if name in COLLECTIVES and COLLECTIVES[name].through_servers:
            if not (isinstance(servers, int) and servers >= 1):
                continue
            name = measured_name(name, servers)
        found.setdefault(name, []).append((float(row["bytes"]), float(row["time_s"])))
    return {name: tuple(rows) for name, rows in found.items()}


def stored_fits(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A stored run's fits by pattern: its ``fits``, with ``fit`` as the ring's (a run from
    before ``fits`` has only that); what is no dict, or under a name that is no fit of
    :data:`~.costs.FITS` (a hand-edited file's: the model has no use for it, and its name
    would reach the tables), is left out."""
    from dlscale.perfmodel.costs import FITS

    fits = run.get("fits")
    found = {
        name: fit
        for name, fit in (fits.items() if isinstance(fits, dict) else ())
        if name in FITS and isinstance(fit, dict)
    }
    if isinstance(run.get("fit"), dict):
        found["ring"] = run["fit"]
    return found


def finite_number(value: Any) -> TypeGuard[float]:
    """What a stored figure must be: a real number, finite, no larger in size than
    :data:`~dlscale.contract.shapes.MAX_QUANTITY` (not a bool, a string, NaN, nor an integer
    too large for a float)."""
    return is_finite(value) and abs(value) <= MAX_QUANTITY


def _unusable(fit: dict[str, Any], path: Path) -> str:
    """Why a stored fit cannot be used, and what to do."""
    alpha, beta = fit.get("alpha_s"), fit.get("beta_s_per_byte")
    if beta == 0 and finite_number(alpha) and 0 <= alpha <= MAX_QUANTITY:
        return (
            f"{path}: its times did not grow with the size, so no bandwidth could be fitted "
            f"(alpha {alpha:.3g} s, beta 0 s/B): measure again with sizes that span your "
            "gradient's (--sizes 4..4M) and more --iterations"
        )
    return (
        f"{path}: its fit (alpha {_word(alpha)}, beta {_word(beta)}) cannot be used: alpha_s "
        f"must be a number in [0, {MAX_QUANTITY:g}] s and beta_s_per_byte one in "
        f"(0, {MAX_QUANTITY:g}] (damaged?)"
    )


def _word(value: Any) -> str:
    """A stored value in a message: as written, cut when long (a huge integer by its size)."""
    if isinstance(value, int) and abs(value) >= 10**20:
        return excerpt(value)
    return str(value)[:40]


def stored_fit(fit: Any) -> Network | None:
    """The network of a stored fit; ``None`` if it is no usable fit (missing, not finite,
    a negative latency or no bandwidth term)."""
    if not isinstance(fit, dict):
        return None
    alpha, beta = fit.get("alpha_s"), fit.get("beta_s_per_byte")
    if not (finite_number(alpha) and finite_number(beta) and alpha >= 0 and beta > 0):
        return None
    return Network(alpha_s=float(alpha), beta_s_per_byte=float(beta))


def fitted_for(fitted: dict[tuple[Any, ...], Fitted], config: dict[str, Any]) -> Fitted | None:
    """The fit for a run of ``config``: its own engine's on its network (launcher, emulated
    network, nodes) if a microbench measured it, else the newest ring fit there of an engine
    whose worker code shares its folder, so synchronizes as it does (horovod-keras on
    horovod-torch's: Horovod's all-reduce; keras-fit on tf-mwms' collectives), else of its
    framework, else of any engine."""
    key = network_key(config)
    backend = plain_key(config.get("backend"))
    own = fitted.get((backend, *key))
    if own is not None:
        return own
    # another engine's all-reduce stands in for it, never another pattern (a kvstore's ps)
    others = {k[0]: f for k, f in fitted.items() if k[1:] == key and f.link.fit == "ring"}
    folder, framework = _kin(backend)
    same_folder = [f for engine, f in others.items() if folder and _kin(engine)[0] == folder]
    same_framework = [f for engine, f in others.items() if _kin(engine)[1] == framework]
    return max(
        same_folder or same_framework or others.values(),
        key=lambda found: found.started_at,
        default=None,
    )


def _kin(backend: Any) -> tuple[Path | None, str | None]:
    """A registered backend's worker folder (:func:`~dlscale.contract.engine_code.worker_folder`:
    ``frameworks/horovod`` for every Horovod engine) and its framework; unknown here: neither."""
    from dlscale.contract.backends import BACKENDS
    from dlscale.contract.engine_code import worker_folder

    if not (isinstance(backend, str) and backend in BACKENDS):
        return None, None
    return worker_folder(backend), BACKENDS.get(backend).framework


def link_lookup(
    fitted: dict[tuple[Any, ...], Fitted],
) -> tuple[Callable[[dict[str, Any]], Link | None], dict[str, str]]:
    """``link_of(point)`` over stored fits (:func:`fitted_networks`, :func:`fitted_for`), and
    the words of each fit it has used so far, keyed "<backend> on <network>"."""
    used: dict[str, str] = {}

    def link_of(point: dict[str, Any]) -> Link | None:
        config = point["config"]
        found = fitted_for(fitted, config)
        if found is None:
            return None
        key = network_key(config)
        used[f"{config.get('backend')} on {key[1] or key[0]}"] = found.said
        nodes, workers = key[2], config.get("workers")
        if not (isinstance(nodes, int) and isinstance(workers, int) and workers > nodes > 1):
            return found.link
        inside = one_node(fitted, config.get("backend"))
        per_node = -(-workers // nodes)  # the ranks of a node share it, on the link inside
        intra = inside.network if inside is not None else None
        return replace(found.link, intra=intra, ranks_per_node=per_node)

    return link_of, used


def across_nodes(key: tuple[Any, ...]) -> bool:
    """A fit's key ``(backend, launcher, network, nodes)`` names more than one node."""
    return key[3] not in (1, "1")


def one_node(fitted: dict[tuple[Any, ...], Fitted], backend: Any = None) -> Fitted | None:
    """The newest fit of ranks on one node with no emulated link between them (the link inside
    a node: ``dlscale microbench`` on one host), ``backend``'s where it has one."""
    inside = {k: f for k, f in fitted.items() if not across_nodes(k) and not k[2]}
    own = [f for k, f in inside.items() if k[0] == backend]
    return max(own or inside.values(), key=lambda f: f.started_at, default=None)
