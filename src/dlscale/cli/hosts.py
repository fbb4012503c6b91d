"""dlscale hosts: emulated hosts on this machine, a test bed of a cluster (root).

``start DIR --hosts N`` makes N hosts, each in its own network namespace with its own name and
ssh server, links shaped by ``--link``; ``stop [DIR]`` removes them and everything they made.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dlscale.cli.arguments import whole


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("start", "stop", "show"))
    parser.add_argument("dir", nargs="?", type=Path, help="the test bed's files (keys, logs)")
    parser.add_argument("--hosts", type=whole(), default=2, help="how many hosts (start; 2)")
    parser.add_argument(
        "--slots", type=whole(), default=2, help="ranks per host in DIR/hostfile (2)"
    )
    parser.add_argument(
        "--link", default="", help="each host's link, RATE[:LATENCY] like 100mbit:1ms (unshaped)"
    )
    parser.add_argument("--prefix", default="dlsnode", help="host names: PREFIX1..PREFIXN")
    parser.add_argument(
        "--cpus",
        type=whole(),
        default=0,
        help="CPUs of this machine each host may use, a share of its own (0: all, shared)",
    )
    parser.add_argument(
        "--owner",
        type=whole(1, 2**31),
        help="the pid the test bed belongs to: removed once it is gone",
    )


def main(args: argparse.Namespace) -> int:
    from dlscale.contract.errors import UserError
    from dlscale.contract.text import shell_command, visible
    from dlscale.launchers import testbed

    running = testbed.RECORD.exists()
    if args.action == "start":
        if args.dir is None:
            raise UserError("dlscale hosts start DIR: say where the test bed's files go")
        bed = testbed.plan(
            args.dir,
            args.hosts,
            slots=args.slots,
            link=args.link,
            prefix=args.prefix,
            cpus=args.cpus,
        )
        if args.owner is not None:
            bed = testbed.owned_by(bed, args.owner)
        testbed.start(bed)
        print(f"emulated hosts up: {', '.join(f'{h} ({a})' for h, a in bed.addresses.items())}")
        print(f"{shell_command(['ssh', bed.hosts[0], 'hostname'])}; hostfile: "
              f"{visible(Path(bed.dir) / 'hostfile')}")  # fmt: skip
        print(f"stop: {shell_command(['dlscale', 'hosts', 'stop', bed.dir])}")
        return 0
    if not running:
        if args.action == "stop":
            print("no emulated hosts run")
            return 0
        raise UserError("no emulated hosts run: start them with dlscale hosts start DIR --hosts N")
    try:
        bed = testbed.Testbed.read(testbed.RECORD)
    except (OSError, ValueError) as error:  # damaged: stop removes what it names, and itself
        if args.action == "stop":
            testbed.check_can_start()
            testbed.remove_abandoned()
            print(f"removed a damaged record of emulated hosts ({error}) and any hosts it left")
            return 0
        raise UserError(
            f"the emulated hosts' record cannot be read ({error}): dlscale hosts stop removes "
            "it and any hosts left"
        ) from None
    if args.dir is not None and Path(bed.dir) != args.dir.absolute():
        raise UserError(f"the emulated hosts that run are {bed.dir}'s, not {args.dir}'s")
    if args.action == "stop":
        testbed.check_can_start()
        testbed.stop(bed)
        print(f"stopped {', '.join(bed.hosts)}")
        return 0
    for host, address in bed.addresses.items():
        cpus = bed.cpus_of(host)
        print(f"{host} {address} slots={bed.slots} cpus={','.join(map(str, cpus)) or 'all'}")
    print(f"files: {bed.dir}; link: {bed.link or 'unshaped'}; owner: {bed.owner or '-'}")
    return 0
