"""TensorFlow and Keras: tf.distribute strategies, a parameter server and Keras ``fit``."""
