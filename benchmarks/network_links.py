"""How close the emulated network's links come to the rate asked, and what the link does to a
DDP run: both measured side by side in one invocation.

1. Goodput: one TCP stream for 3 s from node 1 to node 0 of a real emulated network
   (:class:`dlscale.launchers.network.EmulatedNetwork`, the namespaces a run would use), for
   each rate asked; printed as Mbit/s received and the ratio to the rate (TCP/IP headers take
   ~4.5% of a 1500-byte frame, so ~0.955 is the ceiling).
2. A DDP point (tiny CNN, digits, 2 nodes of 1 rank, 2 windows of 4 steps) at each rate: img/s,
   step p50, exposed communication, and the step's floor (gradient bytes * 8 / rate: a ring of
   2 sends the whole gradient each way).

Needs root. Usage: python benchmarks/network_links.py [--rates 1mbit,20mbit,1gbit,10gbit]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dlscale.launchers.network import EmulatedNetwork, Link, address

RECEIVER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5001)); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); n = 0; t = None
while (b := c.recv(1 << 20)):
    t = t or time.monotonic(); n += len(b)
print(n * 8 / (time.monotonic() - t))
"""
SENDER = """
import socket, sys, time
s = socket.create_connection((sys.argv[1], 5001)); buf = b"x" * (1 << 20); t = time.monotonic()
while time.monotonic() - t < float(sys.argv[2]): s.sendall(buf)
"""


def goodput(rate: str, seconds: float, work: Path) -> float:
    net = EmulatedNetwork(
        link=Link.parse(rate), nodes=2, name="dlscale-bench", record=work / "n.json"
    )
    net.create()
    try:
        receiver = subprocess.Popen(
            [*net.exec_prefix(0), sys.executable, "-c", RECEIVER, address(0)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert receiver.stdout is not None and receiver.stdout.readline().strip() == "ready"
        subprocess.run(
            [*net.exec_prefix(1), sys.executable, "-c", SENDER, address(0), str(seconds)],
            check=True,
        )
        return float(receiver.communicate(timeout=60)[0])
    finally:
        net.remove()


def ddp_points(rates: list[str], work: Path) -> list[dict]:
    cmd = [
        sys.executable, "-m", "dlscale", "run", "--backend", "torch-ddp", "--model", "tiny",
        "--dataset", "digits", "--workers", "2", "--steps", "4", "--windows", "2",
        "--warmup-steps", "1", "--repeats", "1", "--launcher", "torchrun",
        "--set", "nnodes=2", "--set", f"network={','.join(rates)}",
        "--set", "machine_reference=false", "--results", str(work / "ddp"), "--json",
    ]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return [json.loads(p.read_text()) for p in (work / "ddp").glob("*/result.json")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1mbit,20mbit,1gbit,10gbit")
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    rates = args.rates.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        print("rate asked   goodput Mbit/s   goodput / rate")
        for rate in [*rates, "unshaped"]:
            bits = goodput(rate, args.seconds, work)
            asked = Link.parse(rate).rate_bit_s
            ratio = f"{bits / asked:.3f}" if asked else "-"
            print(f"{rate:12} {bits / 1e6:14.1f}   {ratio}")
        started = time.monotonic()
        results = ddp_points(rates, work)
        print(f"\nDDP, tiny CNN, 2 nodes x 1 rank ({time.monotonic() - started:.0f} s):")
        print("rate asked   img/s    step p50 ms   floor ms   exposed comm")
        order = {rate: i for i, rate in enumerate(rates)}
        for r in sorted(
            results, key=lambda r: order[r["config"]["options"]["launcher"]["network"]]
        ):
            m, rate = r["metrics"], r["config"]["options"]["launcher"]["network"]
            floor = m["gradient_bytes"] * 8 / Link.parse(rate).rate_bit_s * 1e3
            print(
                f"{rate:12} {m['throughput_samples_s']:7.1f} {m['step_time_p50_ms']:12.1f}"
                f" {floor:10.2f}   {m['exposed_comm_fraction']:.0%}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
