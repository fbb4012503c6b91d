"""A Keras training script under MultiWorkerMirroredStrategy, as TensorFlow's multi-worker
tutorial writes it (TF_CONFIG from the cluster, the global batch = per-worker batch x workers,
model built and compiled in the strategy's scope, model.fit), not for dlscale: dlscale's tests
run it unmodified.

    TF_CONFIG='{"cluster": {"worker": [...]}, "task": {...}}' python keras_mwms_train.py
"""

import argparse

import numpy as np
import tensorflow as tf


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--steps-per-epoch", type=int, default=20)
    args = parser.parse_args()

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = args.batch_size * strategy.num_replicas_in_sync

    rng = np.random.default_rng(0)
    images = rng.standard_normal((512, 32, 32, 3)).astype("float32")
    labels = rng.integers(0, 10, 512)
    dataset = (
        tf.data.Dataset.from_tensor_slices((images, labels))
        .shuffle(512, seed=0)
        .repeat()
        .batch(global_batch)
    )

    with strategy.scope():
        model = tf.keras.Sequential(
            [
                tf.keras.layers.Conv2D(8, 3, activation="relu", input_shape=(32, 32, 3)),
                tf.keras.layers.GlobalAveragePooling2D(),
                tf.keras.layers.Dense(10),
            ]
        )
        model.compile(
            optimizer=tf.keras.optimizers.SGD(learning_rate=0.01),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=2)


if __name__ == "__main__":
    main()
