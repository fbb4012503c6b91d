"""Whether a rank runs where its launcher's plan put it.

A plan that names each rank's host (a host list, an emulated network, Slurm's node list) gives
every rank its peers' addresses before any starts: rank 0's address is where the others
rendezvous, a parameter server's is where workers push. When the tool that starts the ranks
places them otherwise (a host file in another order, a scheduler's other distribution), the
ranks would wait for peers at the wrong addresses until the run's timeout. A rank checks its
own address first: it binds a socket to it, which succeeds only where the address is this
host's, and otherwise ends at once, naming both hosts.
"""

from __future__ import annotations

import errno
import socket

from dlscale.contract.errors import UserError

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def check_placement(rank: int, hosts: tuple[str, ...]) -> None:
    """Raise :class:`UserError` when rank ``rank``'s planned host is not this host."""
    if rank >= len(hosts) or hosts[rank] in LOOPBACK:
        return
    planned = hosts[rank]
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((planned, 0))
    except socket.gaierror:
        return  # a name this host does not resolve: the engine says so in its own words
    except OSError as error:
        if error.errno != errno.EADDRNOTAVAIL:
            return
        here = socket.gethostname()
        raise UserError(
            f"rank {rank} was planned on {planned} but started on {here}, which does not have "
            "that address: the launcher placed the ranks otherwise than the plan (the hosts "
            "fill in the order given, each up to its slots)"
        ) from None
