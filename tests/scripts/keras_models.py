"""Keras models of a user's own, in a module of their own (dlscale run --model
keras_models:FUNCTION --backend tf-mwms), written with tf.keras as TensorFlow's guides do."""

import tensorflow as tf


class FiniteOrZero(tf.keras.layers.Layer):
    """A Python ``if`` on a tensor, as users write: inside a ``tf.function`` it needs AutoGraph
    (dlscale traces its own models without it, a user's with it). The identity on finite
    inputs, so the model trains as without it."""

    def call(self, x):
        if tf.reduce_all(tf.math.is_finite(x)):
            return x
        return tf.zeros_like(x)


def small_cnn(num_classes):
    return tf.keras.Sequential(
        [
            tf.keras.layers.Input(shape=(32, 32, 3)),
            tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
            tf.keras.layers.MaxPooling2D(4),
            tf.keras.layers.Flatten(),
            FiniteOrZero(),
            tf.keras.layers.Dense(num_classes),
        ]
    )


def functional(num_classes):
    """The functional API, with a layer dlscale's own models never use."""
    inputs = tf.keras.Input(shape=(32, 32, 3))
    x = tf.keras.layers.DepthwiseConv2D(3, padding="same")(inputs)
    x = tf.keras.layers.Flatten()(x)
    return tf.keras.Model(inputs, tf.keras.layers.Dense(num_classes)(x))


def keras3_model(num_classes):
    """Keras 3's own Sequential (import keras), which the TensorFlow engines cannot train."""
    import keras

    return keras.Sequential([keras.Input(shape=(32, 32, 3)), keras.layers.Flatten(),
                             keras.layers.Dense(num_classes)])  # fmt: skip
