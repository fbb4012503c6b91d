"""A bare TensorFlow custom training loop: the reference tf-single's harness overhead is measured
against.

What a TensorFlow user writes: the Keras model, a ``tf.function`` step (GradientTape, Keras'
SGD with momentum), a constant batch; the same thread settings as a dlscale TensorFlow process
(``intra`` = threads, one inter-op thread). Prints one JSON line: {"throughput_img_s": ...}.
"""

from __future__ import annotations

import json
import time

import numpy as np
from bare_args import bare_parser

from dlscale.contract.models import MODELS
from dlscale.contract.registry import load_object
from dlscale.frameworks.tensorflow.env import import_tensorflow


def main() -> None:
    parser = bare_parser()
    args = parser.parse_args()
    tf = import_tensorflow()
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    spec = MODELS.get(args.model)
    model = load_object(spec.builders["tensorflow"])(spec.default_classes)
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
    rng = np.random.default_rng(0)
    size = spec.input_size
    x = tf.constant(rng.standard_normal((args.batch, size, size, 3)).astype(np.float32))
    y = tf.constant(rng.integers(0, spec.default_classes, args.batch))

    @tf.function
    def step() -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.reduce_mean(
                tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
            )
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    for _ in range(args.warmup):
        step().numpy()
    start = time.perf_counter()
    for _ in range(args.steps):
        step().numpy()
    elapsed = time.perf_counter() - start
    print(json.dumps({"throughput_img_s": args.steps * args.batch / elapsed}))


if __name__ == "__main__":
    main()
