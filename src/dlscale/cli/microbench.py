"""``dlscale microbench``: collectives over message sizes on an engine's communication library,
started by any launcher like a training run, checked for exact results, stored with their time,
algorithm bandwidth and bus bandwidth, and the network's alpha and beta fitted for each
pattern from its collective (docs/perfmodel.md)."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from rich.table import Table

from dlscale.cli import peak
from dlscale.cli.arguments import whole, whole_list
from dlscale.cli.tables import cell, console, literal, say
from dlscale.contract.errors import UserError
from dlscale.contract.text import byte_size, excerpt
from dlscale.microbench import COLLECTIVES, Settings, parse_sizes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend", default="torch-ddp", help="whose library (dlscale ls backends)"
    )
    parser.add_argument("--workers", default="2", help="processes, or a list: 2,4")
    parser.add_argument(
        "--launcher", default="local", help="how the ranks start (dlscale ls launchers)"
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--sizes", default="4..256M", help="4..256M (x4 steps) or a list: 4,1M")
    parser.add_argument(
        "--collectives", default=",".join(COLLECTIVES), help=f"of {', '.join(COLLECTIVES)}"
    )
    parser.add_argument(
        "--iterations", type=whole(1, 10_000), default=20, help="timed calls of small messages"
    )
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="a launcher's or backend's option, e.g. nnodes=2, network=1gbit",
    )  # fmt: skip
    parser.add_argument("--results", default="dlscale-results", help="where results are stored")
    parser.add_argument("--json", action="store_true", help="one JSON record per row")
    peak.add_arguments(parser)


def main(args: argparse.Namespace) -> int:
    if args.peak:  # this machine's CPU matmul peak, MFU's denominator: no ranks launched
        return peak.main(args)
    peak.refuse_without_peak(args)
    from dlscale.config.study import parse_set
    from dlscale.contract.backends import BACKENDS
    from dlscale.contract.launchers import LAUNCHERS
    from dlscale.contract.run_config import RunConfig
    from dlscale.preflight import check_points

    settings = Settings(
        collectives=tuple(c.strip() for c in args.collectives.split(",") if c.strip()),
        sizes=parse_sizes(args.sizes),
        max_iterations=args.iterations,
    )
    counts = whole_list(args.workers)
    if counts is None:
        raise UserError(f"--workers {excerpt(args.workers)}: give a count or a list like 2,4")
    spec = BACKENDS.get(args.backend)
    if spec.collectives is None:
        able = ", ".join(name for name, other in BACKENDS if other.collectives)
        raise UserError(f"{args.backend} has no collectives benchmark; backends that do: {able}")
    overrides = {**dict(spec.collectives_options), **parse_set(args.overrides)}
    common = {"backend": args.backend, "launcher": args.launcher, "device": args.device}
    configs = [
        RunConfig.make(workers=count, model="tiny", dataset="synthetic", **common, **overrides)
        for count in counts
    ]
    if LAUNCHERS.get(args.launcher).create().detaches(configs[0]):
        raise UserError("dlscale microbench waits for its ranks: leave wait = true")
    kernel_check = spec.collectives_check  # what its kernel cannot run under: said first
    if kernel_check is not None:
        for config in configs:
            kernel_check(config)
    results = Path(args.results)
    check_points(tuple(configs), results, microbench=settings)
    failed = 0
    for config in configs:
        stored = measure(config, settings, results)
        failed += stored["error"] is not None
        _show(stored, args.json)
    return 1 if failed else 0


def measure(config: Any, settings: Settings, results: Path) -> dict[str, Any]:
    """Run the collectives of one config and store ``microbench.json`` in its directory."""
    from dlscale.contract.files import write_json_atomic
    from dlscale.launchers.launch_run import launch
    from dlscale.microbench import not_measured
    from dlscale.microbench.aggregate import collective_rows
    from dlscale.runner import launch_error, rank_records
    from dlscale.store.results import RunStore

    stamp = time.strftime("%Y%m%dT%H%M%S")
    store = RunStore(results)  # another microbench of the same in the same second: name-2
    run_id = store.reserve_new(f"microbench-{config.backend}-w{config.workers}-"
                               f"{config.launcher}-{stamp}")  # fmt: skip
    run_dir = store.run_dir(run_id)
    task = {"task": "microbench", "microbench": settings.to_dict()}
    try:
        _, outcome, started = launch(
            config, run_dir, command=["dlscale", "microbench", *sys.argv[2:]], study="microbench",
            on_warning=lambda message: say(console(stderr=True), f"dlscale: warning: {message}"),
            task=task,
        )  # fmt: skip
    except UserError:  # refused before a rank started (its hosts, say): no empty directory left
        with contextlib.suppress(OSError):
            run_dir.rmdir()
        raise
    assert not isinstance(outcome, str)  # a launcher that detaches is refused before
    per_rank = rank_records(config, run_dir)
    measuring = len(config.layout().training_ranks)  # a parameter server's others serve
    rows = collective_rows(per_rank, measuring)
    error = launch_error(outcome, per_rank)  # with what the failed rank said, as in training
    from dlscale.microbench.aggregate import wrong_results  # which ranks, which elements

    wrong = wrong_results(rows)
    if error is None and wrong:
        error = wrong
    fits = fit_patterns(rows, measuring, unshaped_below(config.to_dict()))
    missing = (
        not_measured(settings.collectives, {r["collective"] for r in rows}, measuring,
                     config.backend)
        if outcome.ok else {}
    )  # fmt: skip
    stored = {
        "run_id": run_dir.name, "config": config.to_dict(), "settings": settings.to_dict(),
        "processes": measuring, "rows": rows, "fit": fits.get("ring"), "fits": fits,
        "not_measured": missing,
        "error": error,
        "started_at": started, "duration_s": outcome.duration_s,
    }  # fmt: skip
    store.check_held(run_id)  # removed or swapped for a link meanwhile: one line, not written
    write_json_atomic(run_dir / "microbench.json", "microbench", stored)
    return stored


def unshaped_below(config: dict[str, Any]) -> int:
    """The bytes under which the run's emulated link passes a message unshaped (its token
    bucket's burst, :func:`~dlscale.launchers.links.burst_bytes`): torchrun's ``network``, or
    the link of this machine's emulated hosts where the run's hosts are theirs; 0 without a
    rate (real hosts)."""
    from dlscale.launchers.links import Link, burst_bytes
    from dlscale.perfmodel.validate import network_key

    network = network_key(config)[1] or _emulated_hosts_link(config)
    rate = Link.parse(network).rate_bit_s if isinstance(network, str) and network else None
    return burst_bytes(rate) if rate else 0


def _emulated_hosts_link(config: dict[str, Any]) -> str:
    """The link of ``dlscale hosts start``'s hosts when the run's host list names only them."""
    from dataclasses import fields

    from dlscale.launchers.host_list import listed_hosts
    from dlscale.launchers.options import HostListOptions
    from dlscale.launchers.testbed_record import running_link

    given = config.get("options", {}).get("launcher", {})
    names = {f.name for f in fields(HostListOptions)}
    try:
        listed = listed_hosts(HostListOptions(**{k: v for k, v in given.items() if k in names}))
    except UserError:  # the run itself said what was wrong with it
        return ""
    return running_link(name for name, _ in listed or ())


def fit_patterns(
    rows: list[dict[str, Any]], processes: int, smallest: int = 0
) -> dict[str, dict[str, Any]]:
    """alpha and beta of each fit (:data:`~dlscale.perfmodel.costs.FITS`) from the rows of
    the collective it is fitted from, where there are 2 sizes or more and 2 processes or more
    (or one for ``ps``: one worker's push and pull through the servers is that pattern's cost
    at p = 1, and an asynchronous worker's own, where a ring or a tree moves nothing):
    the ``ps`` pattern from rows whose messages went through parameter servers (with the
    servers each row's message was held by), the others from rows whose did not; only sizes
    of ``smallest`` bytes or more (an emulated link's burst: a smaller message passes it
    unshaped, a regime the network it stands for does not have; ``fitted_from_bytes``).
    ``bandwidth_bit_s`` is ``None`` when a fit found no bandwidth term (beta 0: the small
    messages took as long as the large ones, as a library's fixed per-call cost can make
    them), never an infinity that JSON cannot hold."""
    from dlscale.perfmodel.costs import COLLECTIVES, FITS
    from dlscale.perfmodel.fit import fit_network

    fits = {}
    for pattern, collective in FITS.items():
        served = COLLECTIVES[collective].through_servers
        timed = [
            r for r in rows
            if r["collective"] == collective and r["bytes"] >= smallest
            and (_servers(r) > 0) == served
        ]  # fmt: skip
        if len(timed) < 2 or processes < (1 if served else 2):
            continue
        found = fit_network(pattern, [processes] * len(timed), [r["bytes"] for r in timed],
                            [r["time_s"] for r in timed],
                            [max(1, _servers(r)) for r in timed])  # fmt: skip
        bandwidth = found.network.bandwidth_bit_s
        fits[pattern] = {
            "pattern": pattern, "collective": collective,
            "alpha_s": found.network.alpha_s, "beta_s_per_byte": found.network.beta_s_per_byte,
            "bandwidth_bit_s": bandwidth if math.isfinite(bandwidth) else None,
            "median_error": found.median_error, "max_error": found.max_error,
            "fitted_from_bytes": smallest,
        }  # fmt: skip
    return fits


def _servers(row: dict[str, Any]) -> int:
    """The parameter servers a row's message went through (0: none, or a row from before the
    key, or a hand-edited one that is no count)."""
    servers = row.get("servers")
    return servers if isinstance(servers, int) and not isinstance(servers, bool) else 0


def _fitted_from(fit: dict[str, Any]) -> str:
    """Where an emulated link's burst left the smaller sizes out of the fit, from which size."""
    smallest = fit.get("fitted_from_bytes")
    if not isinstance(smallest, int) or isinstance(smallest, bool) or smallest <= 0:
        return ""
    return f"; from {byte_size(smallest)} up (smaller messages pass the emulated link's burst)"


def _say_not_measured(stored: dict[str, Any]) -> None:
    """One line on stderr per reason, naming the requested collectives that have no row: not
    a failure (the exit status stays 0)."""
    reasons: dict[str, list[str]] = {}
    for collective, why in stored.get("not_measured", {}).items():
        reasons.setdefault(why, []).append(collective)
    for why, collectives in reasons.items():
        say(console(stderr=True), f"dlscale: not measured: {', '.join(collectives)} ({why})")


def _show(stored: dict[str, Any], as_json: bool) -> None:
    if as_json:
        for row in stored["rows"]:
            print(json.dumps({"kind": "collective", "run_id": stored["run_id"], **row}))
        print(json.dumps({"kind": "fit", "run_id": stored["run_id"], "fit": stored["fit"],
                          "fits": stored["fits"], "error": stored["error"]}))  # fmt: skip
        _say_not_measured(stored)
        return
    config = stored["config"]
    title = (
        f"{config['backend']} collectives, {stored['processes']} processes, "
        f"launcher {config['launcher']} ({stored['run_id']})"
    )
    table = Table(title=literal(title, "table.title"), title_justify="left")
    for column in ("collective", "size", "time us", "algbw GB/s", "busbw GB/s", "exact"):
        table.add_column(column, justify="left" if column == "collective" else "right")
    for row in stored["rows"]:
        table.add_row(
            cell(row["collective"]), byte_size(row["bytes"]), f"{row['time_s'] * 1e6:,.1f}",
            f"{row['algbw_bytes_s'] / 1e9:.3g}", f"{row['busbw_bytes_s'] / 1e9:.3g}",
            "yes" if row["correct"] else f"NO ({row['max_error']:g})",
        )  # fmt: skip
    out = console()
    out.print(table)
    for pattern, fit in stored["fits"].items():
        bandwidth = fit["bandwidth_bit_s"]
        rate = "no bandwidth term" if bandwidth is None else f"{bandwidth / 1e9:.2f} Gbit/s"
        say(out, (
            f"{pattern} fit ({fit['collective']}): alpha {fit['alpha_s'] * 1e6:.1f} us, beta "
            f"{fit['beta_s_per_byte'] * 1e9:.4f} ns/B ({rate}), "
            f"median error {fit['median_error']:.1%}, largest {fit['max_error']:.1%}"
            + _fitted_from(fit)
        ))  # fmt: skip
    _say_not_measured(stored)
    if stored["error"]:
        say(console(stderr=True), f"dlscale: microbench failed: {stored['error']}")
