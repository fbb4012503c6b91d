"""Keras models of a user's own, in a module of their own (dlscale run --model
keras_models:FUNCTION --backend tf-mwms), written with tf.keras as TensorFlow's guides do."""

import tensorflow as tf


def small_cnn(num_classes):
    return tf.keras.Sequential(
        [
            tf.keras.layers.Input(shape=(32, 32, 3)),
            tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
            tf.keras.layers.MaxPooling2D(4),
            tf.keras.layers.Flatten(),
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
