"""One MWMS worker for figure 1: the trainer's step function, K steps per tf.function call.

    TF_CONFIG=... python -m tfmw.bench.mwms_step ['<cases JSON>']   (default: figure 1's full plan)

The trainer has no steps-per-execution knob, so this runs the trainer's own step function
(entrypoint.training.trainer.replica_step under strategy.run, gradients all-reduced in the
case's `dtype`, the loss summed on this worker only, as the trainer does between log lines)
inside `for _ in tf.range(K)` in one tf.function. Data is synthetic and
in memory (figure 5 measures the input pipeline separately). Every worker runs the same
cases with the same number of calls in the same order: the collectives must stay in
lockstep. Prints one `tfmw bench case=<json>` line per case (worker 0 and others alike).
"""

from __future__ import annotations

import json
import os
import sys
import time

from tfmw.bench.fig_overhead import plan
from tfmw.bench.parse import case_line

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def _threads_from_env(tf) -> None:
    # TF also reads TF_NUM_*_THREADS itself; setting them here makes the intent explicit
    # and must happen before the runtime initialises (creating the strategy does).
    intra = os.environ.get("TF_NUM_INTRAOP_THREADS")
    inter = os.environ.get("TF_NUM_INTEROP_THREADS")
    if intra:
        tf.config.threading.set_intra_op_parallelism_threads(int(intra))
    if inter:
        tf.config.threading.set_inter_op_parallelism_threads(int(inter))


def make_strategy(tf, gpus: bool):
    impl = (
        tf.distribute.experimental.CommunicationImplementation.NCCL
        if gpus
        else tf.distribute.experimental.CommunicationImplementation.RING
    )
    options = tf.distribute.experimental.CommunicationOptions(implementation=impl)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def run_case(tf, keras, strategy, case: dict) -> dict:
    from entrypoint.training.models import build_model
    from entrypoint.training.trainer import REDUCE_DTYPES, communication_options, local_loss, replica_step

    micro = int(case.get("micro", 1))  # gradientAccumulationSteps: micro-batches of `batch` per step
    per_replica = case["batch"] * micro
    global_batch = per_replica * strategy.num_replicas_in_sync
    shape = tuple(case["input_shape"])
    classes = 10
    rng = tf.random.Generator.from_seed(7)
    x_all = rng.normal((per_replica * 4, *shape))
    y_all = tf.cast(rng.uniform((per_replica * 4,), maxval=classes, dtype=tf.int32), tf.int64)

    def dataset_fn(_ctx):
        ds = tf.data.Dataset.from_tensor_slices((x_all, y_all)).repeat()
        return ds.batch(per_replica, drop_remainder=True).prefetch(2)

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
    with strategy.scope():
        model = build_model(case["model"], shape, classes, case.get("args", {}))
        optimizer = keras.optimizers.Adam(learning_rate=1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)
    k = int(case["k"])

    step_fn = replica_step(
        model,
        optimizer,
        loss_fn,
        global_batch,
        REDUCE_DTYPES[case.get("dtype", "float32")],
        communication_options(strategy),
        micro,
    )  # the trainer's step

    @tf.function
    def run_k(it):
        total = tf.constant(0.0, tf.float64)
        for _ in tf.range(k):
            x, y = next(it)
            total += local_loss(strategy, strategy.run(step_fn, args=(x, y)))
        return total

    for _ in range(case["warmup_calls"]):  # tracing and the first collectives
        run_k(iterator).numpy()
    calls = case["calls"]
    started, cpu_started = time.perf_counter(), time.process_time()
    for _ in range(calls):
        run_k(iterator).numpy()  # .numpy(): the host waits for every call, as a training loop does
    elapsed = time.perf_counter() - started
    # CPU seconds of this process (all its threads): the work done, without the time spent
    # waiting for a core on a shared machine or for the peer in a collective.
    cpu = time.process_time() - cpu_started
    params = int(sum(int(tf.size(v)) for v in model.trainable_variables))
    return {
        "id": case["id"],
        "dtype": case.get("dtype", "float32"),
        "step_seconds": elapsed / (calls * k),
        "cpu_seconds": cpu / (calls * k),
        "steps": calls * k,
        "params": params,
        "replicas": strategy.num_replicas_in_sync,
    }


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        cases = json.loads(argv[0])
    else:  # e.g. as a pod's training command on a real cluster
        cases = [c.spec() for c in plan(quick=False)]
    gpus = os.environ.get("TFMW_BENCH_GPUS", "0") not in ("", "0")
    # RING when a case all-reduces in bfloat16, which NCCL does not take (tfmw.bench.gpus.collective)
    nccl = gpus and os.environ.get("TFMW_BENCH_COLLECTIVE", "nccl") == "nccl"
    import tensorflow as tf
    import tf_keras as keras

    _threads_from_env(tf)
    strategy = make_strategy(tf, nccl)
    for case in cases:
        result = run_case(tf, keras, strategy, case)
        print(case_line(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
