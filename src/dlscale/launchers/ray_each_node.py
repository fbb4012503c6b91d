"""Run a command once on every live node of a Ray cluster, each node's output labelled ``N: ``
(``dlscale doctor --launcher ray``): ``python -m dlscale.launchers.ray_each_node ADDRESS ARGV``.

Each node's run is a Ray task pinned to that node. The task is defined here, in the module run
as ``__main__``, so Ray ships it by value: it runs on a node where dlscale is not installed,
and the command's failure there (``No module named 'dlscale'``) is that node's answer, as a
JSON object ``dlscale doctor`` reads (no dlscale version, the error).
"""

from __future__ import annotations

import json
import sys
from typing import Any

TIMEOUT_S = 300.0


def on_node(argv: list[str]) -> dict[str, Any]:
    """Run ``argv`` here; what it printed, or what went wrong, as the node's facts."""
    import platform
    import socket
    import subprocess

    facts: dict[str, Any] = {"hostname": socket.gethostname(), "python": platform.python_version()}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as error:
        return {**facts, "dlscale_version": None, "node_check_error": str(error)[:300]}
    for line in reversed(done.stdout.splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    said = [line for line in done.stderr.splitlines() if line.strip()]
    return {**facts, "dlscale_version": None, "node_check_error": (said or ["no output"])[-1]}


def main(address: str, argv: list[str]) -> int:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from dlscale.contract.errors import ERROR_PREFIX, UserError
    from dlscale.launchers.ray_cluster import alive_nodes, connect

    try:
        ray = connect(address, 0)
    except UserError as error:
        print(f"{ERROR_PREFIX}{error}", file=sys.stderr)
        return 2
    try:
        task = ray.remote(num_cpus=0)(on_node)
        nodes = sorted(alive_nodes(ray), key=lambda node: node["NodeManagerAddress"])
        refs = [
            task.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            ).remote(argv)
            for node in nodes
        ]
        for index, (node, ref) in enumerate(zip(nodes, refs, strict=True)):
            try:
                facts = ray.get(ref, timeout=TIMEOUT_S)
            except Exception as error:  # a node lost since it was listed, a task that timed out
                said = next((line for line in str(error).splitlines() if line.strip()), "")
                facts = {
                    "hostname": node["NodeManagerAddress"],
                    "dlscale_version": None,
                    "node_check_error": f"Ray did not run the check there: {said[:300]}",
                }
            print(f"{index}: {json.dumps(facts, default=str)}")
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
