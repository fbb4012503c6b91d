"""A parameter server against ring all-reduce across emulated hosts on a slow link: the papers'
network-bound question (Malik et al. 2018: Horovod's ring against TensorFlow's parameter server;
Nikolaidis et al. 2021: all-reduce against parameter servers on CPU clusters), measured side by
side in one invocation, each point beside the performance model's prediction.

Five emulated hosts (``dlscale hosts start``, every link shaped by tc at ``--link``):

- ring all-reduce among 4 workers, one per host: torch-ddp's ``all_reduce`` (Gloo) under mpirun
  with ``hosts=dlsnode1:1,...,dlsnode4:1``;
- a synchronous parameter server, the same 4 workers and one server (with ps-lite's scheduler)
  on the fifth host: mxnet-kv's ``ps_pushpull`` (``dist_sync``: every worker pushes its
  gradient, the server sums them, every worker pulls the sum).

Sizes: ResNet-50's gradient (torchvision's 25,557,032 float32 parameters: 102,228,128 bytes) and
AlexNet's (61,100,840: 244,403,360 bytes); ``--sizes`` takes others. Predicted from the link's
rate alone, no fit: ``collective_s`` of ``all_reduce`` and ``ps_pushpull`` (n bytes, 4 workers) in
:mod:`dlscale.perfmodel.costs` with beta = 8 / rate and alpha = gamma = 0 (no latency is added;
the reduction is taken as free beside the transfer).
The time of a size is the median over its timed calls of the slowest rank's time.

Needs root, mpirun, MXNet's environment (``make test`` installs all). Usage:
    python benchmarks/ps_vs_ring_hosts.py [--link 1gbit] [--sizes 102228128,244403360]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dlscale.launchers.network import Link
from dlscale.perfmodel.costs import Network, collective_s

WORKERS = 4
RING_HOSTS = ",".join(f"dlsnode{k}:1" for k in range(1, WORKERS + 1))
PS_HOSTS = RING_HOSTS + f",dlsnode{WORKERS + 1}:2"  # the scheduler and the server
ENGINES = {
    "ring all-reduce (torch-ddp, Gloo)": ("torch-ddp", "all_reduce", RING_HOSTS, ()),
    "parameter server (mxnet-kv, dist_sync, 1 server)": (
        "mxnet-kv",
        "ps_pushpull",
        PS_HOSTS,
        ("--set", "kvstore=dist_sync", "--set", "num_servers=1"),
    ),
}


def dlscale(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dlscale", *args], capture_output=True, text=True, timeout=timeout
    )


def measure(work: Path, sizes: str) -> dict[str, dict[int, float]]:
    """Each engine's median time per size (seconds), measured across the hosts."""
    times: dict[str, dict[int, float]] = {}
    for label, (backend, collective, hosts, extra) in ENGINES.items():
        started = time.monotonic()
        done = dlscale(
            "microbench", "--backend", backend, "--workers", str(WORKERS),
            "--launcher", "mpirun", "--set", f"hosts={hosts}", "--set", "interface=dls0",
            "--collectives", collective, "--sizes", sizes, "--results", str(work / backend),
            "--json", *extra,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"{label}: dlscale microbench failed: {done.stderr.strip()}")
        rows = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        times[label] = {
            r["bytes"]: r["time_s"]
            for r in rows
            if r.get("kind") == "collective" and r["collective"] == collective
        }
        print(f"# {label}: measured in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--link", default="1gbit", help="every host's link (RATE, as tc reads it)")
    parser.add_argument(
        "--sizes", default="102228128,244403360", help="message sizes in bytes (or 4M, 256M)"
    )
    args = parser.parse_args()
    link = Link.parse(args.link)
    if link.rate_bit_s is None:
        raise SystemExit("--link needs a rate: the prediction is made from it")
    if os.geteuid() != 0:
        raise SystemExit("emulated hosts need root")
    net = Network.from_link(link.rate_bit_s, 0.0)
    with tempfile.TemporaryDirectory(prefix="dlscale-ps-ring-") as tmp:
        work = Path(tmp)
        started = dlscale(
            "hosts", "start", str(work / "hosts"), "--hosts", str(WORKERS + 1),
            "--link", args.link, "--owner", str(os.getpid()),
        )  # fmt: skip
        if started.returncode != 0:
            raise SystemExit(started.stderr.strip())
        try:
            times = measure(work, args.sizes)
        finally:
            dlscale("hosts", "stop", str(work / "hosts"))
    print(f"{WORKERS} workers on {WORKERS} emulated hosts, links {args.link} (tc), unshaped CPU")
    print(f"{'engine':<50} {'MB':>6} {'measured s':>11} {'predicted s':>12} {'ratio':>6}")
    for label, by_size in times.items():
        for size, measured in sorted(by_size.items()):
            if "ring" in label:
                predicted = collective_s("all_reduce", size, WORKERS, net)
            else:
                predicted = collective_s("ps_pushpull", size, WORKERS, net)
            ratio = measured / predicted
            print(f"{label:<50} {size / 1e6:6.0f} {measured:11.2f} {predicted:12.2f} {ratio:6.2f}")
    ring, ps = (times[label] for label in ENGINES)
    for size in sorted(set(ring) & set(ps)):
        ps_s = collective_s("ps_pushpull", size, WORKERS, net)
        model = ps_s / collective_s("all_reduce", size, WORKERS, net)
        print(
            f"{size / 1e6:.0f} MB: the parameter server takes {ps[size] / ring[size]:.2f}x the "
            f"ring's time (predicted {model:.2f}x)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
