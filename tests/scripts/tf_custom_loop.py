"""A TensorFlow 2 custom training loop, as TensorFlow's guide "Writing a training loop from
scratch" writes it: a ``tf.function`` train step of ``GradientTape`` and the optimizer's
``apply_gradients`` over a ``tf.data`` pipeline, epochs of its own, no strategy. Not for
dlscale: dlscale's tests run it unmodified.

    python tf_custom_loop.py --batch-size 16 --epochs 2
"""

import argparse

import numpy as np
import tensorflow as tf


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--samples", type=int, default=256)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    images = rng.standard_normal((args.samples, 32, 32, 3)).astype("float32")
    labels = rng.integers(0, 10, args.samples)
    dataset = (
        tf.data.Dataset.from_tensor_slices((images, labels))
        .shuffle(args.samples, seed=0)
        .batch(args.batch_size, drop_remainder=True)
    )
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Conv2D(8, 3, activation="relu", input_shape=(32, 32, 3)),
            tf.keras.layers.GlobalAveragePooling2D(),
            tf.keras.layers.Dense(10),
        ]
    )
    optimizer = tf.keras.optimizers.Adam(learning_rate=1e-3)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_weights)
        optimizer.apply_gradients(zip(grads, model.trainable_weights, strict=True))
        return loss

    for epoch in range(args.epochs):
        for x, y in dataset:
            loss = train_step(x, y)
        print(f"epoch {epoch} loss {float(loss):.4f}, {int(optimizer.iterations)} steps applied")


if __name__ == "__main__":
    main()
