"""One MWMS worker for figure 1: the trainer's step function, K steps per tf.function call.

    TF_CONFIG=... python -m tfmw.bench.mwms_step ['<cases JSON>']   (default: figure 1's full plan)

Each case is a trainer config (model, allReduceDtype, gradientAccumulationSteps, precision,
jitCompile, stepsPerExecution K) run through the trainer's own functions: the policy set and
the model and optimizer built as set_up/build_state do (entrypoint.training.precision), the
training function from trainer.step_functions (replica_step under strategy.run, K steps per
call), called with K as a tensor the way run_steps calls it. Data is synthetic and
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


def trainer_config(case: dict) -> dict:
    """The case as the trainer's validated config (entrypoint.training.config.check, defaults
    filled in: Adam at 1e-3), so the step below is built from the settings a user writes."""
    from entrypoint.training.config import check

    return check(
        {
            "model": {"name": case["model"], "args": case.get("args", {})},
            "data": {"synthetic": {"inputShape": list(case["input_shape"])}},
            "batchSizePerReplica": case["batch"],
            "gradientAccumulationSteps": int(case.get("micro", 1)),
            "allReduceDtype": case.get("dtype", "float32"),
            "precision": case.get("precision", "float32"),
            "jitCompile": bool(case.get("jit", False)),
            "stepsPerExecution": int(case["k"]),
        }
    )


def run_case(tf, strategy, case: dict) -> dict:
    from types import SimpleNamespace

    from entrypoint.training import precision
    from entrypoint.training.config import replica_input_batch
    from entrypoint.training.trainer import build_state, step_functions

    began = time.perf_counter()  # the case's whole cost: build, trace, compile, warm-up, timed calls
    config = trainer_config(case)
    per_replica = replica_input_batch(config)  # every micro-batch of a step
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
    # Keras' policy is process-wide and a layer takes the one current at its construction: set
    # for this case's model only (the trainer sets it once, before build_state), then float32.
    precision.set_policy(config["precision"])
    try:
        model, optimizer, _ = build_state(strategy, config, SimpleNamespace(input_shape=shape, num_classes=classes))
    finally:
        precision.set_policy(precision.FLOAT32)
    loss_sum = tf.Variable(0.0, dtype=tf.float64, trainable=False)
    # The trainer's training function: replica_step (allReduceDtype, micro-batches, jitCompile)
    # under strategy.run, K steps per call in a graph loop when stepsPerExecution K > 1.
    train_steps, _ = step_functions(strategy, model, optimizer, config, loss_sum, global_batch)
    k = config["stepsPerExecution"]
    n = tf.constant(k)  # as run_steps passes it: a tensor, one trace

    for _ in range(case["warmup_calls"]):  # tracing, XLA's compile, the first collectives
        train_steps(iterator, n)
    loss_sum.numpy()
    calls = case["calls"]
    started, cpu_started = time.perf_counter(), time.process_time()
    for _ in range(calls):
        train_steps(iterator, n)  # as the trainer's loop calls it: no read of the loss per call
    loss_sum.numpy()  # the host waits for the last call
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
        "case_seconds": time.perf_counter() - began,
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

    _threads_from_env(tf)
    strategy = make_strategy(tf, nccl)
    for case in cases:
        result = run_case(tf, strategy, case)
        print(case_line(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
