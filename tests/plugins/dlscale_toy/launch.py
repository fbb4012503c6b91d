"""``python -m dlscale_toy.launch N DELAY_S -- COMMAND...``: start N copies of COMMAND with
TOY_RANK / TOY_LOCAL_RANK / TOY_SIZE, like mpirun; the first copy to fail stops the others
and its exit code is this command's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    count, delay, sep, *command = argv
    assert sep == "--" and command
    time.sleep(float(delay))
    children = [
        subprocess.Popen(
            command,
            env={**os.environ, "TOY_RANK": str(r), "TOY_LOCAL_RANK": str(r), "TOY_SIZE": count},
        )
        for r in range(int(count))
    ]

    def stop(*_: object) -> None:
        for child in children:
            if child.poll() is None:
                child.kill()

    signal.signal(signal.SIGTERM, lambda *a: (stop(), sys.exit(143)))
    while True:
        codes = [child.poll() for child in children]
        failed = [(rank, c) for rank, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            # A killed rank's sockets close before its exit status can be read, so a peer that
            # failed on that closed connection can be seen dead first: look once more, a moment
            # later, before naming the cause.
            time.sleep(0.5)
            codes = [child.poll() for child in children]
            failed = [(rank, c) for rank, c in enumerate(codes) if c not in (None, 0)]
            # Several seen dead in one poll: one killed by a signal is the cause more often
            # than peers that then failed on a closed connection (as dlscale's watcher says).
            rank, code = min(failed, key=lambda rc: (rc[1] >= 0, rc[0]))
            # Like mpirun, say which rank failed first; ToyLauncher.blame reads this line.
            print(f"toy-launch: rank {rank} failed with code {code}", file=sys.stderr, flush=True)
            stop()
            return code if code > 0 else 128 - code
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
