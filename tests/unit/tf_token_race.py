"""A worker of TF1's synchronous parameter server that pushed its gradient but has not yet taken
its token, and a fast worker that goes on: run by tests/unit/test_tf_ps_sync.py in a process of
its own (TensorFlow's in-process servers live until their process ends).

One ps task and two workers, in-process, a scalar model, ``SyncReplicasOptimizer`` as
frameworks/tensorflow/ps_sync.py builds it, with its ``StepBarrier`` unless ``--no-barrier``.
The slow worker's step is run in two parts (its push, then its take), which is what a worker
paused between them looks like to the others. Prints one JSON line: what the fast worker's
second step gave (``timed out`` or the token it took) and the token the slow worker then took.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from dlscale.frameworks.tensorflow.ps_sync import StepBarrier, tf, v1
from dlscale.launchers.local import free_ports

BLOCKS_MS = 3000
"""How long a step that must block (it waits for a token or an item that never comes) is
given before it is said to have timed out."""
ENDS_MS = 120_000
"""How long a step that must end is given: a loaded machine's RPCs, never a timing test."""


def worker_graph(worker: int, cluster: Any, barrier: bool) -> dict[str, Any]:
    graph = tf.Graph()
    with graph.as_default():
        place = v1.train.replica_device_setter(
            worker_device=f"/job:worker/task:{worker}", cluster=cluster
        )
        with v1.device(place):
            weight = v1.Variable(1.0, name="w")
            grads = v1.gradients(weight * weight, [weight])
            hold = StepBarrier(worker, 2) if barrier else None
            if hold:
                grads = hold.before_the_push(grads)
            optimizer = v1.train.SyncReplicasOptimizer(
                v1.train.GradientDescentOptimizer(0.1), replicas_to_aggregate=2,
                total_num_replicas=2,
            )  # fmt: skip
            step = v1.train.get_or_create_global_step()
            train = optimizer.apply_gradients([(grads[0], weight)], global_step=step)
            arrived = hold.arrived() if hold else tf.no_op()
            take = train.op.inputs[1].op  # the token's dequeue, after this worker's pushes
            return {
                "graph": graph,
                "step": [train, arrived],
                "push": [arrived, *take.control_inputs],
                "take": train,
                "init": v1.global_variables_initializer(),
                "local": optimizer.local_step_init_op,
                "chief": optimizer.get_chief_queue_runner() if worker == 0 else None,
            }


def started_servers() -> tuple[Any, list[Any]]:
    """The cluster and its three servers, on free ports; new ports where another process took
    one between its pick and its bind (up to 5 tries)."""
    for attempt in range(5):
        ps, w0, w1 = (f"localhost:{port}" for port in free_ports(3))
        cluster = tf.train.ClusterSpec({"ps": [ps], "worker": [w0, w1]})
        try:
            return cluster, [
                tf.distribute.Server(cluster, job_name=job, task_index=index, start=True)
                for job, index in [("ps", 0), ("worker", 0), ("worker", 1)]
            ]
        except (tf.errors.OpError, RuntimeError):
            if attempt == 4:
                raise
    raise AssertionError("unreachable")


def main(barrier: bool) -> dict[str, Any]:
    cluster, servers = started_servers()
    graphs = [worker_graph(w, cluster, barrier) for w in (0, 1)]
    sessions = []
    for w, (server, g) in enumerate(zip(servers[1:], graphs, strict=True)):
        config = v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{w}"])
        sessions.append(v1.Session(server.target, graph=g["graph"], config=config))
    fast, slow = sessions
    fast.run(graphs[0]["init"])
    coordinator = tf.train.Coordinator()
    graphs[0]["chief"].create_threads(fast, coord=coordinator, daemon=True, start=True)
    for session, g in zip(sessions, graphs, strict=True):
        session.run(g["local"])
    first: list[Any] = []
    thread = threading.Thread(target=lambda: first.append(fast.run(graphs[0]["step"])[0]))
    thread.start()
    slow.run(graphs[1]["push"])  # the slow worker pushed its step 1 ...
    thread.join()  # ... and the update of step 1 is applied: the fast worker took its token
    # the slow worker has not taken its token yet: with the barrier the fast worker's step
    # must block (and the slow worker's take then end); without it the fast one's ends
    second = ran(fast, graphs[0]["step"], BLOCKS_MS if barrier else ENDS_MS)
    slow_took = ran(slow, graphs[1]["take"], ENDS_MS if barrier else BLOCKS_MS)
    return {"first": int(first[0]), "second": second, "slow_took": slow_took}


def ran(session: Any, fetch: Any, wait_ms: int) -> int | str:
    """The token a step took, or ``timed out`` after ``wait_ms``."""
    try:
        out = session.run(fetch, options=v1.RunOptions(timeout_in_ms=wait_ms))
    except tf.errors.DeadlineExceededError:
        return "timed out"
    return int(out[0] if isinstance(out, list) else out)


if __name__ == "__main__":
    print(json.dumps(main(barrier="--no-barrier" not in sys.argv[1:])), flush=True)
    sys.stdout.flush()
    import os

    os._exit(0)  # the servers' threads would keep the process alive
