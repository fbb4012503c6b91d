"""A bare JAX training loop: the reference jax-single's harness overhead is measured against.

What a JAX user writes: the Flax model, a ``jax.jit`` step (``value_and_grad``, optax's SGD with
momentum), a constant batch, configured as a dlscale JAX process is (one CPU device; with fewer
threads than CPUs, pinned to that many). No loss is read inside the timed loop (dlscale
reads a window's losses after its clock stops), so the reference is as fast as JAX's
asynchronous dispatch lets it be. Prints one JSON line: {"throughput_img_s": ...}.
"""

from __future__ import annotations

import json
import time

import numpy as np
from bare_args import bare_parser

from dlscale.contract.models import MODELS
from dlscale.contract.registry import load_object
from dlscale.frameworks.jax.env import import_jax


def main() -> None:
    parser = bare_parser()
    args = parser.parse_args()
    jax = import_jax(threads=args.threads, precision="float32")
    import optax

    spec = MODELS.get(args.model)
    model = load_object(spec.builders["jax"])(spec.default_classes)
    rng = np.random.default_rng(0)
    size = spec.input_size
    x = jax.device_put(rng.standard_normal((args.batch, 3, size, size)).astype(np.float32))
    y = jax.device_put(rng.integers(0, spec.default_classes, args.batch).astype(np.int32))
    variables = model.init(jax.random.PRNGKey(0), x, train=False)
    params, stats = variables["params"], variables.get("batch_stats", {})
    optimizer = optax.sgd(0.1, momentum=0.9)
    state = optimizer.init(params)

    @jax.jit
    def step(params, stats, state):
        def loss_fn(p):
            logits, updates = model.apply(
                {"params": p, "batch_stats": stats}, x, train=True, mutable=["batch_stats"]
            )
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
            return loss, updates["batch_stats"]

        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, state = optimizer.update(grads, state)
        return optax.apply_updates(params, updates), stats, state, loss

    for _ in range(args.warmup):  # the first call compiles
        params, stats, state, loss = step(params, stats, state)
    jax.block_until_ready((params, stats, state))
    start = time.perf_counter()
    for _ in range(args.steps):  # dispatched back to back, as a user's loop that reads no loss
        params, stats, state, loss = step(params, stats, state)
    jax.block_until_ready((params, stats, state, loss))
    elapsed = time.perf_counter() - start
    print(json.dumps({"throughput_img_s": args.steps * args.batch / elapsed}))


if __name__ == "__main__":
    main()
