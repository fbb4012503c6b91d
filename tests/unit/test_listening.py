"""await_listener: a listening socket answers at once; a port nobody serves gives its refusal
once the time is up, not before."""

import socket
import time

from dlscale.runtime.listening import await_listener


def test_a_listening_port_is_taken_and_a_closed_one_refused_after_the_wait():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert await_listener(server.getsockname(), 5.0) is None
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        address = closed.getsockname()
        closed.close()  # bound, then released: nothing listens there
    start = time.monotonic()
    error = await_listener(address, 0.5)
    assert isinstance(error, ConnectionRefusedError)
    assert time.monotonic() - start >= 0.5
