"""One MWMS worker of the restore measurement (restore_read.py): the same checkpoint restored two
ways, alternately, `rounds` times each after a warm-up.

    TF_CONFIG=... python -m tfmw.bench.restore_worker '<plan JSON>'

- every: each worker reads the whole checkpoint (the trainer's `restore_latest`:
  `tf.train.Checkpoint.restore(path).expect_partial()`);
- chief: only the chief reads it, then sends every variable to the others over the collective
  with the broadcast MultiWorkerMirroredStrategy itself uses for variables' initial values
  (`collective_ops.broadcast_send` / `broadcast_recv`, TF distribute/collective_all_reduce_strategy.py
  `_get_variable_creator_initial_value`): each receiver gets each byte once, no reduction.
  (`strategy.extended.broadcast_to` is MirroredStrategy's, a copy to this worker's own devices,
  never across workers; an all-reduce with zeros from the others moves about twice the bytes
  and adds them up.)

Each round starts from zeroed variables with the checkpoint's files dropped from the page cache
(posix_fadvise DONTNEED: a restore reads them again, not from memory), between two all-reduce
barriers: its time is the group's. Each worker prints one `tfmw bench restore=<json>` line with
its times and a checksum of its variables after each way (the driver checks they all agree).
"""

from __future__ import annotations

import json
import os
import sys
import time

from entrypoint import loglines
from tfmw.bench.mwms_step import _threads_from_env, make_strategy

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

RESTORE = "restore"
GROUP_KEY = 1_000_003  # far from the strategy's own collective keys (they count up from 1)


def drop_from_page_cache(prefix: str) -> None:
    folder, base = os.path.split(prefix)
    for name in os.listdir(folder):
        if name.startswith(base + "."):
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def build(plan: dict):
    """(tf, strategy, checkpoint, its variables): the model and Adam's slots under the strategy,
    every variable set to distinct non-zero values, the same on every worker."""
    import tensorflow as tf
    import tf_keras as keras

    from entrypoint.training.models import build_model

    _threads_from_env(tf)
    strategy = make_strategy(tf, gpus=False)
    with strategy.scope():
        model = build_model(plan["model"], plan["shape"], 10, plan.get("args", {}))
        optimizer = keras.optimizers.Adam()
        optimizer.build(model.trainable_variables)  # its slots: a checkpoint's ~2/3 with Adam
        step = tf.Variable(7, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    variables = [*model.variables, *optimizer.variables(), step]
    for i, v in enumerate(variables):
        v.assign(tf.cast(tf.fill(v.shape, (i % 7) + 1), v.dtype))
    return tf, strategy, checkpoint, variables


def main(argv: list[str]) -> int:
    plan = json.loads(argv[0])
    tf, strategy, checkpoint, variables = build(plan)
    from tensorflow.python.ops import collective_ops

    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    workers = strategy.num_replicas_in_sync
    chief = task == 0
    prefix = os.path.join(plan["dir"], "ckpt-1")
    device = strategy.extended.worker_devices[0]

    def barrier() -> None:
        strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None).numpy()

    if chief:
        checkpoint.write(prefix)
    barrier()
    size = sum(os.path.getsize(os.path.join(plan["dir"], n)) for n in os.listdir(plan["dir"]))
    instance = [0]

    def every_reads() -> None:
        checkpoint.restore(prefix).expect_partial()

    def chief_reads() -> None:
        if chief:
            checkpoint.restore(prefix).expect_partial()
        with tf.device(device):
            for v in variables:
                instance[0] += 1
                if chief:
                    collective_ops.broadcast_send(v.read_value(), v.shape, v.dtype, workers, GROUP_KEY, instance[0])
                else:
                    v.assign(collective_ops.broadcast_recv(v.shape, v.dtype, workers, GROUP_KEY, instance[0]))

    times: dict[str, list[float]] = {"every": [], "chief": []}
    sums: dict[str, float] = {}
    for _ in range(plan["rounds"] + 1):  # the first round of each way is a warm-up
        for way, restore in (("every", every_reads), ("chief", chief_reads)):
            for v in variables:
                v.assign(tf.zeros_like(v))
            drop_from_page_cache(prefix)
            barrier()
            started = time.monotonic()
            restore()
            barrier()
            times[way].append(time.monotonic() - started)
            sums[way] = float(sum(tf.reduce_sum(tf.cast(v, tf.float64)).numpy() for v in variables))
    result = {
        "worker": task,
        "workers": workers,
        "bytes": size,
        "variables": len(variables),
        "every_s": times["every"][1:],
        "chief_s": times["chief"][1:],
        "checksum": sums,
    }
    print(loglines.payload_line(loglines.BENCH, RESTORE, result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
