"""Waiting for a server to listen: a rank for its rendezvous, the test bed for an emulated
host's sshd. Each caller says in its own words what did not answer."""

from __future__ import annotations

import socket
import time


def await_listener(address: tuple[str, int], timeout_s: float) -> OSError | None:
    """Try a TCP connection to ``address`` every 0.1 s until one is taken (``None``) or
    ``timeout_s`` has passed (the last refusal, for the caller's message)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(address, timeout=min(5.0, max(timeout_s, 0.1))):
                return None
        except OSError as error:
            if time.monotonic() > deadline:
                return error
            time.sleep(0.1)
