"""One folder per deep-learning framework: everything that imports it lives in its folder.

``torch`` (PyTorch: the single-process reference, DDP, a ring all-reduce and a parameter
server written on ``torch.distributed``), ``horovod`` (the Horovod engines, which lean on the
folders of the frameworks they run on), ``tensorflow`` (tf.distribute strategies, a parameter
server, Keras ``fit``) and ``mxnet`` (Gluon with a KVStore). Each holds its declaration (options,
roles, cluster environment: importable without the framework), its engine loop and strategies,
its data adapter, its models' twins, its environment facts and its collectives kernel.
"""
