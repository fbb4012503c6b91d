"""A TensorFlow 2 custom training loop with Horovod, as Horovod's own synthetic benchmark
(examples/tensorflow2/tensorflow2_synthetic_benchmark.py) writes it: a ``tf.function`` step
of ``GradientTape``, ``hvd.DistributedGradientTape`` and ``apply_gradients``, the variables
broadcast after the first batch, and its own timing loop. A tiny model on 32x32 inputs, not
for dlscale: dlscale's tests run it unmodified.

    horovodrun -np 2 python tf_hvd_benchmark.py --batch-size 8
"""

import argparse
import os
import timeit

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser(description="TensorFlow Synthetic Benchmark")
parser.add_argument("--fp16-allreduce", action="store_true", default=False)
parser.add_argument("--batch-size", type=int, default=32, help="input batch size")
parser.add_argument("--num-warmup-batches", type=int, default=2)
parser.add_argument("--num-batches-per-iter", type=int, default=3)
parser.add_argument("--num-iters", type=int, default=3)
parser.add_argument("--no-cuda", action="store_true", default=False)
args = parser.parse_args()

hvd.init()
if args.no_cuda:
    os.environ["CUDA_VISIBLE_DEVICES"] = "-1"

model = tf.keras.Sequential(
    [
        tf.keras.layers.Conv2D(8, 3, activation="relu", input_shape=(32, 32, 3)),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(10, activation="softmax"),
    ]
)
opt = tf.optimizers.SGD(0.01)

data = tf.random.uniform([args.batch_size, 32, 32, 3])
target = tf.random.uniform([args.batch_size, 1], minval=0, maxval=9, dtype=tf.int64)


@tf.function
def benchmark_step(first_batch):
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    with tf.GradientTape() as tape:
        probs = model(data, training=True)
        loss = tf.losses.sparse_categorical_crossentropy(target, probs)
    tape = hvd.DistributedGradientTape(tape, compression=compression)
    gradients = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
    # the initial state is broadcast after the first step, once the optimizer's is made
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables(), root_rank=0)


def log(s):
    if hvd.rank() == 0:
        print(s, flush=True)


log(f"Batch size: {args.batch_size}, number of workers: {hvd.size()}")
log("Running warmup...")
benchmark_step(first_batch=True)
timeit.timeit(lambda: benchmark_step(first_batch=False), number=args.num_warmup_batches)

log("Running benchmark...")
img_secs = []
for x in range(args.num_iters):
    time = timeit.timeit(
        lambda: benchmark_step(first_batch=False), number=args.num_batches_per_iter
    )
    img_sec = args.batch_size * args.num_batches_per_iter / time
    log(f"Iter #{x}: {img_sec:.1f} img/sec per CPU, {int(opt.iterations)} steps applied")
    img_secs.append(img_sec)

img_sec_mean = np.mean(img_secs)
log(f"Img/sec per CPU: {img_sec_mean:.1f}")
log(f"Steps applied: {int(opt.iterations)}")
