"""Horovod over PyTorch, TensorFlow, Keras and MXNet: its declaration, session and kernel."""
