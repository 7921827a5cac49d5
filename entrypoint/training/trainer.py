"""The MultiWorkerMirroredStrategy training loop (custom `strategy.run` loop, tf_keras layers).

Why a custom loop and not model.fit: see docs/training.md ("Why a custom loop"). In short,
it gives explicit control of the step counter, the checkpoint boundary, the group-wide
stop flag and the heartbeat, and it avoids Keras 3's multi-worker fit failure.

Imported only after the config has been validated (TensorFlow takes seconds to import).
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # user models written against tf.keras get Keras 2

import numpy as np
import tensorflow as tf
import tf_keras as keras
from tensorflow.python.checkpoint import checkpoint_management
from tensorflow.python.eager import context

from .. import loglines, mtbf
from ..cluster import Cluster
from ..membership import ELASTIC_REPLICAS_ENV, member_micro_batches
from ..rundir import Heartbeat, RunDir, is_uri, makedirs, read_completed, write_completed

# A non-chief's checkpoint and export scratch: one fixed path per pod, overwritten by every
# save (keep=1), never a fresh directory per attempt (those leaked across restarts). Named in
# entrypoint.scratch, which the launcher clears at each attempt's start.
from ..scratch import EXPORT_STAGING, scratch_checkpoints, scratch_export
from . import checkpoints, devices, execution, interval, leaving, precision, threads
from .config import ConfigError, RunEnv, replica_input_batch
from .data import build_input, elastic_input
from .failures import TrainingError, error_summary, is_retryable, xla_refusal
from .models import build_model
from .positions import batches_consumed, deal, local_replicas

_LOG_LOCK = threading.Lock()


def log(line: str) -> None:
    """Print one `tfmw` line (built by entrypoint.loglines.line) and flush it at once: the
    supervisor and the tests follow these lines as they come. One write under a lock: the
    background checkpoint thread logs too, and print() writes the line and its newline apart."""
    with _LOG_LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


@dataclass
class TrainingResult:
    """What train() returns to __main__, which prints `tfmw done` from it (or exits 143)."""

    steps: int
    final_loss: float | None  # None: unknown
    examples_per_sec: float | None  # None: nothing trained in this process
    model_path: str
    weights_digest: str
    stopped: bool  # True: the group agreed to stop (SIGTERM) before the last step
    # The end's parts, in seconds (after the last step): the export, the group's last
    # barrier, the chief's COMPLETED marker. Empty when stopped.
    ending_seconds: dict[str, float] = field(default_factory=dict)


def make_strategy(config: dict) -> tuple[tf.distribute.Strategy, str]:
    """MWMS with the collective implementation chosen for the hardware (TF_CONFIG already set)."""
    gpus = tf.config.list_physical_devices("GPU")
    choice = devices.choose_collective(config["collective"], config["allReduceDtype"], len(gpus))
    impl = {
        "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
        "ring": tf.distribute.experimental.CommunicationImplementation.RING,
    }[choice]
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=impl, timeout_seconds=config["timeoutSeconds"]
    )
    if config.get("heartbeatTimeoutSeconds"):
        configure_heartbeat(config["heartbeatTimeoutSeconds"])
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options), choice


def communication_options(strategy) -> tf.distribute.experimental.CommunicationOptions:
    """The options the strategy was created with (NCCL on GPU workers, RING on CPU, the timeout):
    an explicit all-reduce passes them so it runs exactly like the strategy's own."""
    return (
        getattr(strategy.extended, "_communication_options", None) or tf.distribute.experimental.CommunicationOptions()
    )


# allReduceDtype -> the dtype gradients travel in; None: float32, the optimizer's own all-reduce.
REDUCE_DTYPES = {"float32": None, "bfloat16": tf.bfloat16, "float16": tf.float16}


def replica_step(
    model, optimizer, loss_fn, global_batch: int, reduce_dtype, options, micro_batches: int = 1, jit: bool = False
):
    """The per-replica training step (run by strategy.run); returns this replica's loss.

    The loss is this replica's share of the global mean (sum over its examples / global batch),
    so the SUM of the gradients over replicas is the gradient of the global mean loss.
    reduce_dtype None: apply_gradients all-reduces the float32 gradients itself (unchanged).
    Otherwise the gradients are cast to reduce_dtype, summed across replicas with one explicit
    all-reduce (the strategy's CommunicationOptions), cast back to each variable's dtype and
    applied without a second aggregation (docs/training.md, "allReduceDtype").

    micro_batches k > 1 (gradientAccumulationSteps): the replica's batch holds k micro-batches;
    their gradients are summed locally, one after another (a while loop: one micro-batch's
    activations alive at a time), each micro-batch's loss already divided by the whole step's
    global batch, so the sum is the gradient of the same global mean and the update rule is
    unchanged; then the one all-reduce and update as above (docs/training.md,
    "gradientAccumulationSteps").

    precision (entrypoint.training.precision): the logits are cast to float32 before the loss;
    under mixed_float16 the optimizer is a LossScaleOptimizer, the gradient is taken of the
    scaled loss and unscaled before anything else sees it.

    jit (jitCompile): the forward and backward pass (loss_and_grads) is compiled with XLA, and
    only it: the all-reduce and the update stay outside the compiled function. On CPU workers
    MWMS aggregates through merge_call, which XLA cannot hold (TF distribute
    collective_all_reduce_strategy.py `_use_merge_call`: merge_call is dropped under XLA only
    when every device is a GPU; mirrored_run.py lifts a compiled fn out of XLA otherwise), and
    tf_keras itself compiles only the per-variable update after the aggregation
    (optimizer.py `_distributed_apply_gradients_fn` -> `_update_step_xla`). The compiled part
    is where the FLOPs are; the collective is communication either way."""
    scaled = precision.scales_loss(optimizer)

    def loss_and_grads(x, y, share: float = 1.0):
        with tf.GradientTape() as tape:
            logits = tf.cast(model(x, training=True), tf.float32)
            loss = tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=global_batch)
            if model.losses:
                # the regularization once per step: a k-th of it with each micro-batch
                regularization = tf.cast(tf.add_n(model.losses), tf.float32)
                loss += tf.nn.scale_regularization_loss(regularization) * share
            target = optimizer.get_scaled_loss(loss) if scaled else loss
        grads = tape.gradient(target, model.trainable_variables)
        return loss, optimizer.get_unscaled_gradients(grads) if scaled else grads

    if jit:
        loss_and_grads = tf.function(loss_and_grads, jit_compile=True)

    def accumulated(x, y):
        variables = model.trainable_variables
        micro_x = tf.reshape(x, tf.concat([[micro_batches, -1], tf.shape(x)[1:]], 0))
        micro_y = tf.reshape(y, tf.concat([[micro_batches, -1], tf.shape(y)[1:]], 0))

        def body(i, loss, sums):
            micro_loss, grads = loss_and_grads(micro_x[i], micro_y[i], 1.0 / micro_batches)
            sums = [
                total if g is None else total + tf.convert_to_tensor(g) for total, g in zip(sums, grads, strict=True)
            ]
            return i + 1, loss + micro_loss, sums

        start = (tf.constant(0), tf.constant(0.0), [tf.zeros_like(v) for v in variables])
        _, loss, sums = tf.while_loop(lambda i, *_: i < micro_batches, body, start)
        return loss, sums

    def step_fn(x, y):
        if micro_batches == 1:
            loss, grads = loss_and_grads(x, y)
        else:
            loss, grads = accumulated(x, y)
        if reduce_dtype is None:
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss
        pairs = [(g, v) for g, v in zip(grads, model.trainable_variables, strict=True) if g is not None]
        # Dense: an IndexedSlices gradient (an embedding) would be all-gathered, not summed in reduce_dtype.
        low = [tf.cast(tf.convert_to_tensor(g), reduce_dtype) for g, _ in pairs]
        summed = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, low, options=options)
        optimizer.apply_gradients(
            [(tf.cast(g, v.dtype), v) for g, (_, v) in zip(summed, pairs, strict=True)], skip_gradients_aggregation=True
        )
        return loss

    return step_fn


def local_loss(strategy, per_replica_loss):
    """This worker's losses summed over its local replicas (float64), with no cross-worker
    collective: the group sum is taken only where it is read (log lines, checkpoint boundaries)."""
    values = strategy.experimental_local_results(per_replica_loss)
    return tf.add_n([tf.cast(v, tf.float64) for v in values])


def collective_dtypes(concrete_function) -> list[str]:
    """The dtypes of the all-reduce ops in a traced function's graph (its nested functions
    included), one entry per op, sorted: what actually crosses the wire each call."""
    graph_def = concrete_function.graph.as_graph_def()
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    return sorted(tf.dtypes.as_dtype(n.attr["T"].type).name for n in nodes if n.op.startswith("CollectiveReduce"))


def configure_heartbeat(seconds: float) -> None:
    """Set the coordination service's heartbeat timeout: how long a silent (stopped, cut-off)
    peer goes unnoticed. MWMS configures the service itself only when nobody did before it,
    with TensorFlow's defaults; this is the same call with the timeout set."""
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.distribute import multi_worker_util

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    cluster_spec = resolver.cluster_spec()
    jobs = [
        coordination_config_pb2.CoordinatedJob(name=job, num_tasks=cluster_spec.num_tasks(job))
        for job in ("chief", "worker")
        if job in cluster_spec.jobs
    ]
    context.context().configure_coordination_service(
        service_type="standalone",
        service_leader=multi_worker_util.coordination_leader(cluster_spec),
        heartbeat_timeout_in_ms=int(seconds * 1000),
        coordinated_jobs=jobs,
    )


def _scalar_metadata() -> bytes:
    from tensorflow.core.framework import summary_pb2

    metadata = summary_pb2.SummaryMetadata()
    metadata.plugin_data.plugin_name = "scalars"  # what TensorBoard's scalar dashboard reads
    return metadata.SerializeToString()


def write_scalar(tag: str, value: float) -> None:
    """tf.summary.scalar without the tensorboard package (TF 2.21 no longer depends on it)."""
    tf.summary.write(tag, tf.constant(value, dtype=tf.float32), metadata=_scalar_metadata())


def make_optimizer(config: dict):
    if config["optimizer"] == "sgd":
        return keras.optimizers.SGD(learning_rate=config["learningRate"], momentum=0.9)
    return keras.optimizers.Adam(learning_rate=config["learningRate"])


def weights_digest(model) -> str:
    """sha256 over every trainable weight (shape and bytes, in model order)."""
    digest = hashlib.sha256()
    for variable in model.trainable_variables:
        value = np.ascontiguousarray(variable.numpy())
        digest.update(str(value.shape).encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


@dataclass
class Restored:
    step: int  # 0: nothing restored
    path: str  # the checkpoint restored ('' if none)
    kept: list  # the checkpoints the state file now names, oldest first (the writer's list)


def _read_text(path: str) -> str | None:
    try:
        if not tf.io.gfile.exists(path):
            return None
        with tf.io.gfile.GFile(path, "r") as f:
            return f.read()
    except (tf.errors.OpError, UnicodeDecodeError):
        return "\x00unreadable"  # present but unreadable: parse_state calls it unparsable


def _listdir(path: str) -> list[str]:
    try:
        return tf.io.gfile.listdir(path)
    except tf.errors.NotFoundError:
        return []


def plan_checkpoints(directory: str) -> checkpoints.Plan:
    """The checkpoints in `directory` (a mounted path or an object-store URI), as the restore
    and the evaluator read them."""
    return checkpoints.plan(directory, _listdir, _read_text)


def restore_latest(checkpoint: tf.train.Checkpoint, directory: str, is_chief: bool) -> Restored:
    """Restore the newest intact checkpoint in the chief's directory (docs/training.md, "Recovery").

    Normally the `checkpoint` state file decides: CheckpointWriter names a checkpoint there
    (atomic rename) only after its files are complete. When the state file is missing, empty,
    unparsable or names a checkpoint that is missing or does not restore, every complete
    ckpt-<N> in the directory is tried, newest first; one `tfmw recovered` line says what was
    wrong and which checkpoint was used, and the chief rewrites the state file to name it.
    Every worker reads the same files and so makes the same choice (checked by the caller).
    Complete checkpoints none of which restores are a permanent error, never a silent restart
    from step 0.
    """
    plan = plan_checkpoints(directory)
    problem = plan.state_problem()
    failed: list[str] = []
    for path in plan.candidates():
        try:
            checkpoint.restore(path).expect_partial()
        except (tf.errors.OpError, ValueError, IndexError, AssertionError) as err:
            # IndexError: a truncated data file; ValueError/AssertionError: not this model's checkpoint
            if is_retryable(err):
                raise
            log(
                loglines.line(
                    loglines.WARNING, checkpoint=path, text=f"unreadable ({type(err).__name__}); trying an older one"
                )
            )
            failed.append(path)
            problem = problem or (
                f"state file names {os.path.basename(path)}, which does not restore ({type(err).__name__})"
            )
            continue
        step = int(checkpoint.step.numpy())
        kept = plan.kept_until(path, failed)
        if problem:
            log(loglines.line(loglines.RECOVERED, checkpoint=path, step=step, reason=problem))
            if is_chief:
                # Atomic (write-then-rename), relative paths: the next start follows it directly.
                checkpoint_management.update_checkpoint_state_internal(
                    directory, path, all_model_checkpoint_paths=kept, save_relative_paths=True
                )
        return Restored(step, path, kept)
    if failed:
        raise TrainingError(
            f"checkpoint: none of the {len(failed)} complete checkpoints in {directory} restores "
            f"(newest {os.path.basename(failed[0])}); a checkpoint of another model or config? "
            "Use a new training.runId, or move the checkpoints away to start from step 0"
        )
    if plan.state.problem != "is missing":
        # A state file without any complete checkpoint: nothing to lose, but say so.
        log(
            loglines.line(
                loglines.RECOVERED, checkpoint="-", step=0, reason=f"{problem}; no complete checkpoint in {directory}"
            )
        )
    return Restored(0, "", [])


@dataclass
class _Save:
    """One save on its way to the state file: what its publish needs and what it reports."""

    step: int
    prefix: str
    started: float  # monotonic: the boundary's save began
    returned: threading.Event = field(default_factory=threading.Event)  # the foreground is back
    stall: float = 0.0  # the step loop's stall (the foreground part)
    copied: float | None = None  # monotonic: the copy the background writes was taken
    outcome: str | None = None  # None: not published (yet); "published"; else the one-line cause


class CheckpointWriter:
    """The chief saves into the shared checkpoint directory; the others into a fixed scratch
    directory of their pod, or nowhere (see `scratch_needed`): MWMS needs every worker to take
    part in a save that reads ON_READ variables, but only the chief's copy is kept (workers
    writing the same shared files would collide).

    In the background by default (checkpoint.async): the boundary's stall is TensorFlow's copy
    of the variables to host memory (`tf.train.CheckpointOptions(enable_async=True)`); its own
    thread then writes the files and, only once they are complete, calls `_publish`
    (`experimental_write_callbacks`, run after the save on that thread: TF
    checkpoint/checkpoint.py `_write`, async_checkpoint_helper.py `_async_save`). The next
    save waits for the previous one (the helper joins its queue first), and `finish` waits
    for the last before the group leaves: no checkpoint is ever published half written, and a
    stop's checkpoint is published before the process exits.

    Atomic by construction: a checkpoint's files are written first, and only then does the
    `checkpoint` state file (what restore reads) name it, through TensorFlow's
    write-then-rename `update_checkpoint_state`. A kill at any moment leaves the previous
    state file, which names only complete checkpoints.
    """

    # Test hook (docs/failure-model.md): pause between writing a checkpoint's files and
    # publishing it, so a fault test can kill the chief mid-write on purpose, not by luck.
    PAUSE_ENV = "TFMW_FAULT_CHECKPOINT_PAUSE_SECONDS"

    def __init__(
        self,
        checkpoint,
        run: RunDir,
        cluster: Cluster,
        keep: int,
        kept: list,
        *,
        background: bool = False,
        writes: bool = True,
    ):
        self.cluster = cluster
        self.checkpoint = checkpoint
        chief = cluster.is_chief
        # writes False: a non-chief whose save has no collective to take part in skips it.
        self.writes = chief or writes
        self.directory = run.checkpoints if chief else scratch_checkpoints()
        self.keep = keep if chief else 1
        # The chief continues the list the restore left in the state file; the others start afresh.
        self.kept = list(kept) if chief else []
        self.pause = float(os.environ.get(self.PAUSE_ENV) or 0)
        if not chief and self.writes:
            os.makedirs(self.directory, exist_ok=True)
        self.background = background
        self._options = (
            tf.train.CheckpointOptions(enable_async=True, experimental_write_callbacks=[self._publish])
            if background
            else None
        )
        self._saves: dict[str, _Save] = {}  # by prefix: the callback gets only the path
        self._last: _Save | None = None
        self.stalls: list[float] = []  # this attempt's save stalls, oldest first
        self.write_seconds = 0.0  # the last published save's whole write (the auto interval's floor)

    def save(self, step: int) -> float:
        """Save at `step`; returns the step loop's stall in seconds. Raises (retryable) when the
        previous background save was not published."""
        if not self.writes:
            return 0.0
        self.checkpoint.step.assign(step)
        if self.cluster.is_chief:
            log(loglines.line(loglines.CHECKPOINT, "writing", step=step))
        current = _Save(step, os.path.join(self.directory, f"ckpt-{step}"), time.monotonic())
        previous, self._last = self._last, current
        if not self.background:
            self.checkpoint.write(current.prefix)
            current.copied = time.monotonic()
            self._commit(current)
            current.stall = time.monotonic() - current.started
            self.stalls.append(current.stall)
            return current.stall
        self._saves[current.prefix] = current
        try:
            self.checkpoint.write(current.prefix, options=self._options)
        except Exception as err:
            self._saves.pop(current.prefix, None)
            self._last = None
            if is_retryable(err):
                raise
            # TF re-raises here a previous background write's error (async_checkpoint_helper
            # `_check_async_thread_error`): a failed write fails the attempt, which restarts
            # from the last published checkpoint.
            raise unpublished(previous.step if previous else step, error_summary(err)) from err
        finally:
            current.copied = time.monotonic()
            current.stall = current.copied - current.started
            current.returned.set()
        self.stalls.append(current.stall)
        if previous is not None:  # the write above waited for it: its outcome is known
            self._raise_unless_published(previous)
        return current.stall

    def _publish(self, save_path) -> None:
        """The background thread's last act of a save, once its files are complete: publish it.
        Never raises (an exception here would only be seen by the next write): the outcome is
        recorded, and `save`/`finish` fail the attempt on it."""
        current = self._saves.pop(os.fsdecode(save_path), None)
        if current is None:
            return
        try:
            current.returned.wait()  # the foreground's stall goes into the saved line
            self._commit(current)
        except Exception as err:
            current.outcome = error_summary(err)

    def _commit(self, current: _Save) -> None:
        """Name the complete checkpoint in the state file, retire the old ones, say so."""
        if self.pause and self.cluster.is_chief:
            time.sleep(self.pause)
        prefix = current.prefix
        self.kept = [p for p in self.kept if p != prefix] + [prefix]
        retired, self.kept = self.kept[: -self.keep], self.kept[-self.keep :]
        # The state file is written by atomic rename, with paths relative to the directory (as
        # CheckpointManager does) so the shared volume may be mounted anywhere on restore.
        checkpoint_management.update_checkpoint_state_internal(
            self.directory, prefix, all_model_checkpoint_paths=self.kept, save_relative_paths=True
        )
        for old in retired:  # only after the new state no longer names them
            for path in tf.io.gfile.glob(old + ".*"):
                tf.io.gfile.remove(path)
        current.outcome = PUBLISHED
        now = time.monotonic()
        self.write_seconds = now - current.started
        if self.cluster.is_chief:
            stall = current.stall if self.background else now - current.started
            # seconds: the step loop's stall (the launcher's goodput "checkpoint");
            # write_seconds: the whole save; age_seconds: training since the copy, not in it.
            log(
                loglines.line(
                    loglines.CHECKPOINT,
                    "saved",
                    step=current.step,
                    path=prefix,
                    seconds=f"{stall:.3f}",
                    write_seconds=f"{now - current.started:.3f}",
                    age_seconds=f"{now - current.copied:.3f}" if self.background else "0.000",
                )
            )

    def _raise_unless_published(self, save: _Save) -> None:
        if save.outcome != PUBLISHED:
            raise unpublished(save.step, save.outcome or "its background write did not complete")

    def finish(self) -> None:
        """Wait for the save in flight and fail (retryable) unless it was published: before the
        group leaves or the process exits (os._exit would drop it: __main__._exit)."""
        if self.background:
            self.checkpoint.sync()  # joins the queue; it does not re-raise the thread's error
        if self._last is not None:
            self._raise_unless_published(self._last)

    def close(self) -> None:
        """On every way out of the loop: let a save in flight finish (a failure is already on
        its way up), so a complete checkpoint is still published."""
        if self.background:
            self.checkpoint.sync()


PUBLISHED = "published"


def unpublished(step: int, cause: str) -> Exception:
    """A save whose checkpoint was not published: retryable (the attempt restarts from the last
    published checkpoint), with its cause on one line."""
    return tf.errors.UnavailableError(
        None, None, f"checkpoint ckpt-{step} was not published: {cause}; resuming from the last published checkpoint"
    )


def scratch_needed(model, optimizer, agreement: StopAgreement) -> bool:
    """Must the non-chief workers write their own copy of each checkpoint and of the export?

    Only when a variable is synchronized ON_READ (BatchNormalization's moving statistics): its
    saved value is a cross-worker all-reduce (TF distribute/values_util.py
    `get_on_read_saveable` -> `_get_cross_replica` -> strategy.reduce), which every worker must
    join in the same order as the chief's save; ON_WRITE (mirrored) variables save the local
    copy with no collective (values_util.py `get_on_write_saveable`), so without ON_READ a
    non-chief's save is pure local I/O that nobody reads and is skipped (0 bytes). The same
    holds for the SavedModel export (saved_model/save.py writes the variables outside the save
    context). One vote of the group ("any worker has one"), so every worker decides alike."""
    from tensorflow.python.distribute import distribute_utils

    optimizer_vars = optimizer.variables
    variables = list(model.variables) + list(optimizer_vars() if callable(optimizer_vars) else optimizer_vars)
    return agreement.any_wants_stop(any(distribute_utils.is_sync_on_read(v) for v in variables))


def export_model(model, run: RunDir, cluster: Cluster, scratch: bool = True) -> str:
    """Only the chief's copy lands in <run>/model, renamed into place so a reader never sees half
    a model. The others save too when `scratch` (scratch_needed: the export's collectives),
    into their pod's fixed scratch path, removed after; else not at all."""
    target = run.model
    if not cluster.is_chief:
        if scratch:
            copy = scratch_export()
            shutil.rmtree(copy, ignore_errors=True)
            model.save(copy, save_format="tf", include_optimizer=False)
            shutil.rmtree(copy, ignore_errors=True)
        return target
    if cluster.is_chief and is_uri(target):
        # An object store has no atomic directory rename: the chief saves in place, and the
        # COMPLETED marker, written only after this returns, is what says the model is whole.
        if tf.io.gfile.exists(target):
            tf.io.gfile.rmtree(target)
        model.save(target, save_format="tf", include_optimizer=False)
        return target
    staging = tempfile.mkdtemp(prefix=EXPORT_STAGING, dir=run.root)
    model.save(staging, save_format="tf", include_optimizer=False)
    if os.path.exists(target):
        shutil.rmtree(target)
    os.replace(staging, target)
    return target


def diverged(what: str, value, step: int) -> TrainingError:
    """A NaN or infinite loss or weight is a permanent failure (exit 4): training diverged, and
    a restart from the last checkpoint would diverge again."""
    return TrainingError(
        f"{what} is {value} at or before step {step}: training diverged; lower "
        "training.config.learningRate or check the data"
    )


def weights_finite(model, optimizer) -> bool:
    """Every float variable of the model (weights, BatchNorm statistics) and the optimizer is
    finite. Eager, at checkpoint boundaries and before the export only (one host read)."""
    optimizer_vars = optimizer.variables
    variables = list(model.variables) + list(optimizer_vars() if callable(optimizer_vars) else optimizer_vars)
    checks = [tf.reduce_all(tf.math.is_finite(v)) for v in variables if v.dtype.is_floating]
    return bool(tf.reduce_all(tf.stack(checks)).numpy()) if checks else True


def finite_or_none(value):
    """A float for a JSON record, or None (JSON null) where it is unknown or not finite."""
    return value if value is not None and math.isfinite(value) else None


def steps_for_epochs(epochs: int, total_examples: int, global_batch: int) -> int:
    """Steps for `epochs` passes over the whole data set at the global batch size (at least 1)."""
    return max(1, -(-epochs * total_examples // global_batch))


class Throughput:
    """Steady-state examples/s over the logging windows, without the first (graph tracing)
    window unless it is the only one; checkpoint and export time are never counted."""

    def __init__(self):
        self.examples = self.seconds = 0.0
        self.warmup_examples = self.warmup_seconds = 0.0

    def add(self, examples: float, seconds: float, warmup: bool) -> None:
        if warmup:
            self.warmup_examples, self.warmup_seconds = examples, seconds
        else:
            self.examples += examples
            self.seconds += seconds

    def rate(self) -> float | None:
        """None: nothing was trained (a restart at the last step only exports)."""
        if self.seconds > 0:
            return self.examples / self.seconds
        return self.warmup_examples / self.warmup_seconds if self.warmup_seconds > 0 else None


class StopAgreement:
    """All-reduce (sum, i.e. "any") of each worker's "stop now" flag, at checkpoint boundaries only."""

    def __init__(self, strategy, workers: int):
        self.strategy = strategy
        self.workers = workers

        @tf.function
        def agree(flag):
            # strategy.reduce across workers is an all-reduce: every worker gets the same sum.
            per_replica = strategy.run(lambda: tf.identity(flag))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        self._agree = agree

    def flags(self, wants_stop: bool, bad: bool, value: float = 0.0) -> tuple[bool, bool, float]:
        """(any worker wants to stop, any worker found non-finite values, the sum over workers of
        `value`): one all-reduce. The sum is meaningful only when no worker is bad."""
        local = self.strategy.num_replicas_in_sync // self.workers  # each worker's value once per local replica
        total = self._agree(
            tf.constant(
                [1.0 if wants_stop else 0.0, 1.0 if bad else 0.0, value if math.isfinite(value) else 0.0],
                dtype=tf.float64,
            )
        ).numpy()
        return bool(total[0] > 0.5), bool(total[1] > 0.5), float(total[2]) / local

    def sum_over_workers(self, value) -> float:
        """The sum over workers of each worker's float64 scalar tensor (one all-reduce; NaN and
        infinities propagate, so every worker sees the same non-finite sum)."""
        local = self.strategy.num_replicas_in_sync // self.workers
        return float(self._agree(tf.cast(value, tf.float64)).numpy()) / local

    def sum_and_count(self, value, flag: bool) -> tuple[float, int]:
        """(the sum over workers of each worker's float64 scalar tensor, how many workers raised
        `flag`): one all-reduce, as sum_over_workers."""
        local = self.strategy.num_replicas_in_sync // self.workers
        pair = tf.stack([tf.cast(value, tf.float64), tf.constant(1.0 if flag else 0.0, tf.float64)])
        total = self._agree(pair).numpy() / local
        return float(total[0]), int(round(float(total[1])))

    def any_wants_stop(self, wants_stop: bool) -> bool:
        return bool(self._agree(tf.constant(1.0 if wants_stop else 0.0)).numpy() > 0.5)

    def total(self, value: float) -> float:
        """Sum of value over all replicas (each worker passes its own value once per replica)."""
        return float(self._agree(tf.constant(float(value))).numpy())

    def same_everywhere(self, value: int) -> bool:
        """True when every worker holds the same (integer) value, e.g. the restored step.

        If the values differ, at least one worker's differs from the mean; that worker's
        vote turns the second all-reduce into "no" for everyone."""
        mean = float(self._agree(tf.constant(float(value))).numpy()) / self.strategy.num_replicas_in_sync
        return not self.any_wants_stop(abs(value - mean) > 0.25)


# Test hook: log the dtypes of the all-reduces in the traced training step once (after step 1).
DEBUG_COLLECTIVES_ENV = "TFMW_DEBUG_COLLECTIVES"


@dataclass
class Session:
    """What the steps of one run share, built once by `set_up`."""

    config: dict
    cluster: Cluster
    env: RunEnv
    run: RunDir
    spec: object  # data.InputSpec: this worker's shard
    model: object
    optimizer: object
    checkpoint: object  # tf.train.Checkpoint of the model, the optimizer, `step` and `loss`
    agreement: StopAgreement
    writer: CheckpointWriter
    heartbeat: Heartbeat
    summaries: object  # TensorBoard writer (a no-op one off the chief)
    iterator: object
    train_step: object  # tf.function (iterator, n): n global steps, adding this worker's losses to loss_sum
    eval_step: object  # tf.function: the group's mean loss on one global batch
    loss_sum: object  # this worker's summed loss since the last log line, on the device
    start_step: int  # the restored step (0: none)
    total: int  # the last step
    global_batch: int
    schedule: interval.Schedule  # when to checkpoint
    mtbf_source: str  # how the launcher estimated the MTBF the auto interval uses
    logged_interval: float | None = None  # the auto interval last logged


@dataclass
class LoopState:
    """The step loop's running state: the step, the current logging window, what is reported."""

    step: int
    window_first: int  # the step the current logging window started after
    window_start: float  # monotonic time it started
    paused: float = 0.0  # checkpoint seconds in the window: not training throughput
    final_loss: float | None = None
    steady: Throughput = field(default_factory=Throughput)
    stopped: bool = False  # the group agreed to stop (SIGTERM) at a checkpoint boundary


def build_state(strategy, config: dict, spec):
    """The model, its optimizer and the checkpoint holding them, in the strategy's scope."""
    with strategy.scope():
        model = build_model(config["model"]["name"], spec.input_shape, spec.num_classes, config["model"]["args"])
        optimizer = precision.wrap_optimizer(make_optimizer(config), config["precision"])
        # `loss`: the mean loss of the latest window when the checkpoint was written, so a
        # restart at the last step (a crash before the export) still records a final loss.
        checkpoint = tf.train.Checkpoint(
            model=model,
            optimizer=optimizer,
            step=tf.Variable(0, dtype=tf.int64, trainable=False),
            loss=tf.Variable(float("nan"), dtype=tf.float32, trainable=False),
        )
    return model, optimizer, checkpoint


def total_steps(config: dict, spec, agreement: StopAgreement, workers: int, global_batch: int) -> int:
    """config['steps'], or the steps of config['epochs'] over the whole group's data."""
    if not config.get("epochs"):
        return config["steps"]
    # Shards can differ in size: every worker must run the same number of steps, so the
    # count comes from the group's total number of examples (an all-reduce), not this shard.
    replicas = agreement.strategy.num_replicas_in_sync
    examples = agreement.total(spec.examples_per_worker) / replicas * workers
    return steps_for_epochs(config["epochs"], int(round(examples)), global_batch)


def step_functions(strategy, model, optimizer, config: dict, loss_sum, global_batch: int):
    """(train_steps, eval_step): the tf.functions the loop and the finish call on the iterator.

    train_steps(it, n) runs n global steps (n <= stepsPerExecution, a tensor: one trace for
    every n) in one call, each the same step as the others, adding this worker's losses to
    loss_sum; with stepsPerExecution 1 it is the one step, with no loop around it."""
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)
    step_fn = replica_step(
        model,
        optimizer,
        loss_fn,
        global_batch,
        REDUCE_DTYPES[config["allReduceDtype"]],
        communication_options(strategy),
        config["gradientAccumulationSteps"],
        jit=config["jitCompile"],
    )

    def one_step(it):
        x, y = next(it)
        loss_sum.assign_add(local_loss(strategy, strategy.run(step_fn, args=(x, y))))

    if config["stepsPerExecution"] == 1:

        @tf.function
        def train_steps(it, n):
            del n  # always 1
            one_step(it)

    else:

        @tf.function
        def train_steps(it, n):
            for _ in tf.range(n):  # a while loop in the graph: no return to Python between steps
                one_step(it)

    @tf.function
    def eval_step(it):
        def step_fn(x, y):
            logits = tf.cast(model(x, training=False), tf.float32)
            return tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=global_batch)

        x, y = next(it)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step_fn, args=(x, y)), axis=None)

    return train_steps, eval_step


def group_input(config: dict, shared_dir: str, cluster: Cluster, replicas: int):
    """(config, this worker's input). Elastic training (TFMW_ELASTIC_REPLICAS=N, set by the
    launcher: entrypoint.membership) keeps the global batch of the N configured workers: each of
    the M' members takes k' = N x k / M' micro-batches per step (the config's
    gradientAccumulationSteps becomes k'), dealt from the N workers' own streams (positions.deal),
    so a step trains the same examples whatever the members are."""
    configured = elastic_replicas(os.environ)
    if configured is None:
        return config, build_input(config, shared_dir, cluster.num_workers, cluster.worker_index)
    micro = config["gradientAccumulationSteps"]
    members = cluster.num_workers
    local = replicas // members
    ranges = deal(configured, local * micro, members, cluster.worker_index)
    spec = elastic_input(config, shared_dir, configured, ranges, local * micro)
    each = member_micro_batches(configured, micro, members)
    log(loglines.line(loglines.ELASTIC, members=f"{members}/{configured}", micro_batches=f"{micro}->{each}"))
    return dict(config, gradientAccumulationSteps=each), spec


def elastic_replicas(environ) -> int | None:
    """TFMW_ELASTIC_REPLICAS: the configured group size N of an elastic run (unset: not elastic)."""
    raw = environ.get(ELASTIC_REPLICAS_ENV)
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{ELASTIC_REPLICAS_ENV}={raw!r} must be a whole number of workers (the launcher sets it)")
    return int(raw)


def size_thread_pools(plan: threads.ThreadPlan) -> None:
    """TensorFlow's pools sized to the container's CPUs (entrypoint/training/threads.py), before
    anything creates the eager context (they are fixed from then on); logged once."""
    if plan.intra_op is not None:
        tf.config.threading.set_intra_op_parallelism_threads(plan.intra_op)
    if plan.inter_op is not None:
        tf.config.threading.set_inter_op_parallelism_threads(plan.inter_op)
    log(
        loglines.line(
            loglines.THREADS,
            intra_op=plan.intra_op or "tf",
            inter_op=plan.inter_op or "tf",
            data=plan.data or "tf",
            why=plan.why,
        )
    )


def set_up(config: dict, cluster: Cluster, env: RunEnv) -> Session:
    """Join the group, build the model, restore the newest checkpoint, open the data at the
    restored step; refuse when the workers restored different steps."""
    size_thread_pools(threads.this_process())
    devices.set_up(tf, config, os.environ, log)  # GPU memory: also before the eager context
    log(loglines.line(loglines.CONNECTING, worker=f"{cluster.worker_index}/{cluster.num_workers}"))
    connecting = time.monotonic()
    strategy, collective = make_strategy(config)  # returns once every worker has joined the group
    log(
        loglines.line(
            loglines.CONNECTED,
            worker=f"{cluster.worker_index}/{cluster.num_workers}",
            seconds=f"{time.monotonic() - connecting:.2f}",
        )
    )
    run = RunDir.of(env.shared_dir, env.run_id)
    makedirs(run.checkpoints)
    config, rounded = execution.rounded(config)  # the loop acts only between calls of K steps
    for note in rounded:
        log(loglines.line(loglines.WARNING, text=note))
    precision.set_policy(config["precision"])  # before any layer is built
    tf.random.set_seed(config["seed"])
    keras.utils.set_random_seed(config["seed"])

    replicas = strategy.num_replicas_in_sync
    config, spec = group_input(config, env.shared_dir, cluster, replicas)
    # One step = one optimizer update: every micro-batch of every replica (the effective batch).
    per_replica = replica_input_batch(config)
    global_batch = per_replica * replicas
    model, optimizer, checkpoint = build_state(strategy, config, spec)
    restored = restore_latest(checkpoint, run.checkpoints, cluster.is_chief)
    start_step = restored.step
    # This worker's sum of its replicas' losses since the last log line, kept on the device: a
    # NaN or infinite loss at any step makes it non-finite. It is read only at log and checkpoint
    # boundaries (no host sync per step), and summed across workers only there (no collective
    # for the loss on the other steps).
    loss_sum = tf.Variable(0.0, dtype=tf.float64, trainable=False)
    agreement = StopAgreement(strategy, cluster.num_workers)
    total = total_steps(config, spec, agreement, cluster.num_workers, global_batch)
    log(
        loglines.line(
            loglines.START,
            run=env.run_id,
            worker=f"{cluster.worker_index}/{cluster.num_workers}",
            replicas=replicas,
            global_batch=global_batch,
            micro_batches=config["gradientAccumulationSteps"],
            collective=collective,
            precision=config["precision"],
            jit=str(config["jitCompile"]).lower(),
            steps_per_execution=config["stepsPerExecution"],
            model=config["model"]["name"],
            data=spec.describe,
            resume_step=start_step,
            steps=total,
        )
    )

    # distribute_datasets_from_function calls the fn once per worker, which batches per replica, and
    # dequeues one batch per local replica every step: the worker's stream resumes after
    # start_step x local replicas batches (positions.py), by arithmetic, not by replay.
    def worker_dataset(ctx):
        replicas_here = local_replicas(ctx.num_replicas_in_sync, ctx.num_input_pipelines)
        return spec.dataset_fn(per_replica, batches_consumed(start_step, replicas_here))

    dist_dataset = strategy.distribute_datasets_from_function(worker_dataset)
    iterator = iter(dist_dataset)
    train_step, eval_step = step_functions(strategy, model, optimizer, config, loss_sum, global_batch)

    scratch = scratch_needed(model, optimizer, agreement)
    writer = CheckpointWriter(
        checkpoint,
        run,
        cluster,
        config["checkpoint"]["keep"],
        restored.kept,
        background=config["checkpoint"]["async"],
        writes=scratch,
    )
    if not agreement.same_everywhere(start_step):
        # Workers would run different numbers of steps and deadlock in a collective.
        raise ConfigError(
            f"shared storage: workers restored different checkpoints (this worker: step "
            f"{start_step} from {run.checkpoints}); every worker must mount the same "
            "shared storage (storage.type emptyDir is per pod)"
        )
    group_mtbf, mtbf_source = mtbf.from_env(os.environ)
    schedule, first_interval = interval.schedule_for(config["checkpoint"], group_mtbf, time.monotonic())
    summaries = (
        tf.summary.create_file_writer(run.tensorboard)
        if cluster.is_chief and config["tensorboard"]["enabled"]
        else tf.summary.create_noop_writer()
    )
    session = Session(
        config,
        cluster,
        env,
        run,
        spec,
        model,
        optimizer,
        checkpoint,
        agreement,
        writer,
        Heartbeat(env.heartbeat_file),
        summaries,
        iterator,
        train_step,
        eval_step,
        loss_sum,
        start_step,
        total,
        global_batch,
        schedule,
        mtbf_source,
    )
    log_interval(session, first_interval)
    return session


def check_finite(s: Session, step: int, wants_stop: bool = False) -> tuple[bool, float]:
    """Group-wide, before anything stores the weights: no non-finite loss since the last
    log line, no non-finite weight. Returns whether any worker wants to stop (SIGTERM) and
    the sum of the losses since the last log line."""
    pending = float(s.loss_sum.numpy())  # this worker's; the group sum comes with the flags
    bad = None
    if not math.isfinite(pending):
        bad = diverged("loss", pending, step)
    elif not weights_finite(s.model, s.optimizer):
        bad = TrainingError(
            f"weights are not finite (NaN or infinite) after step {step}: training "
            "diverged; lower training.config.learningRate or check the data"
        )
    stop, any_bad, pending = s.agreement.flags(wants_stop, bad is not None, pending)
    if any_bad:  # every worker fails together, none goes on to save or export
        raise bad or TrainingError(
            f"another worker found a non-finite loss or weights at step {step}: "
            "training diverged; lower training.config.learningRate or check the data"
        )
    return stop, pending


def log_window(s: Session, state: LoopState, due_here: bool = False) -> bool:
    """Close a logging window: the group's mean loss and this window's throughput, as a
    `tfmw progress` line and TensorBoard scalars. Returns whether every worker's clock says a
    checkpoint is due (`due_here`: this worker's).

    Every worker logs at the same steps: the one collective for the loss, whose sum is the
    same (NaN included) on every worker, so all fail or all go on together. The time-based
    checkpoint's vote rides on it: clocks differ, and every worker must checkpoint at the same
    step (all, not any: the slowest clock's interval, which includes the chief's write floor)."""
    step, steps = state.step, state.step - state.window_first
    window_sum, due_count = s.agreement.sum_and_count(s.loss_sum.value(), due_here)
    if not math.isfinite(window_sum):
        raise diverged("loss", window_sum, step)
    state.final_loss = window_sum / steps
    s.loss_sum.assign(0.0)
    elapsed = max(time.monotonic() - state.window_start - state.paused, 1e-9)
    throughput = steps * s.global_batch / elapsed
    state.steady.add(steps * s.global_batch, elapsed, warmup=state.window_first == s.start_step)
    per_worker_batch = s.global_batch // s.cluster.num_workers
    epoch = int((step - 1) * per_worker_batch // s.spec.examples_per_worker) + 1
    log(
        loglines.line(
            loglines.PROGRESS,
            step=f"{step}/{s.total}",
            epoch=epoch,
            loss=f"{state.final_loss:.4f}",
            examples_per_sec=f"{throughput:.1f}",
        )
    )
    with s.summaries.as_default(step=step):
        write_scalar("loss", state.final_loss)
        write_scalar("examples_per_sec", throughput)
    state.window_start, state.window_first, state.paused = time.monotonic(), step, 0.0
    return due_count >= s.cluster.num_workers


def at_boundary(s: Session, state: LoopState, wants_stop: bool) -> bool:
    """A checkpoint boundary: one group-wide decision before the save (a non-finite loss, also
    of the steps not logged yet, or weight fails every worker), then every worker saves.
    Returns whether any worker wants to stop: then all stop here, else all go on."""
    step = state.step
    s.heartbeat.beat(step, phase="checkpoint")
    stop, pending = check_finite(s, step, wants_stop)
    recent = pending / (step - state.window_first) if step > state.window_first else state.final_loss
    s.checkpoint.loss.assign(float("nan") if recent is None else recent)
    save_started = time.monotonic()
    s.writer.save(step)  # returns once the step loop may go on (the write may still run)
    saved = time.monotonic()
    state.paused += saved - save_started  # checkpoint time is not training throughput
    log_interval(s, s.schedule.saved(saved, s.writer.stalls, s.writer.write_seconds))
    return stop


def log_interval(s: Session, chosen: interval.Interval | None) -> None:
    """`tfmw checkpoint interval seconds=...` (chief) when the auto interval changed."""
    if chosen is None or not s.cluster.is_chief or not interval.changed(s.logged_interval, chosen.seconds):
        return
    s.logged_interval = chosen.seconds
    log(
        loglines.line(
            loglines.CHECKPOINT,
            "interval",
            seconds=f"{chosen.seconds:.1f}",
            stall=f"{chosen.cost:.3f}",
            mtbf=f"{chosen.mtbf:.0f}",
            source=s.mtbf_source,
            bound=chosen.why,
        )
    )


def run_steps(s: Session, stop_requested) -> LoopState:
    """Train from the restored step to the last one, or to the checkpoint boundary where the
    group agreed to stop (`tfmw stopped`)."""
    state = LoopState(step=s.start_step, window_first=s.start_step, window_start=time.monotonic())
    every_log = s.config["logEverySteps"]
    s.schedule.last_save = time.monotonic()  # the interval counts from the first step
    debug_collectives = os.environ.get(DEBUG_COLLECTIVES_ENV) == "1"
    per_call = s.config["stepsPerExecution"]
    s.heartbeat.beat(state.step, force=True, phase="start")
    stop_requested.training_started()
    try:
        while state.step < s.total:
            # Up to the next multiple of K: every log, checkpoint and vote step ends a call (execution.py).
            steps = tf.constant(execution.chunk(state.step, s.total, per_call))
            first = state.step == s.start_step
            call_steps(s, steps, first)
            state.step += int(steps)
            step = state.step
            if debug_collectives and first:
                dtypes = collective_dtypes(s.train_step.get_concrete_function(s.iterator, steps))
                log(loglines.line(loglines.DEBUG, train_step_collectives=",".join(dtypes) or "-"))
            s.heartbeat.beat(step)
            due = False
            if step % every_log == 0 or step == s.total:
                due = log_window(s, state, s.schedule.time_due(time.monotonic()))
            if (s.schedule.step_due(step) or due or step == s.total) and at_boundary(
                s, state, stop_requested() if step < s.total else False
            ):
                state.stopped = True
                log(
                    loglines.line(
                        loglines.STOPPED, step=f"{step}/{s.total}", reason="sigterm", checkpoint=s.run.checkpoints
                    )
                )
                break
        s.writer.finish()  # the last checkpoint is published before anyone leaves
    finally:
        stop_requested.training_finished()
        s.writer.close()
        s.summaries.flush()
    s.heartbeat.beat(state.step, force=True, phase="finish")
    return state


def call_steps(s: Session, steps, first: bool) -> None:
    """One call of the training function. The first one traces and, with jitCompile, compiles:
    a model XLA cannot compile is refused there in one line (failures.xla_refusal)."""
    if not (first and s.config["jitCompile"]):
        s.train_step(s.iterator, steps)
        return
    try:
        s.train_step(s.iterator, steps)
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as err:
        refusal = xla_refusal(str(err))
        if refusal is None:
            raise
        raise ConfigError(refusal) from None


def finish(s: Session, state: LoopState, digest: str, started: float) -> TrainingResult:
    """After the last step: export the model, wait for every worker, and (the chief) mark the
    run COMPLETED."""
    final_loss = state.final_loss
    if state.step == s.start_step:
        # Restarted at the last step (a crash between the last checkpoint and the export):
        # nothing was trained here, so check the restored weights before exporting them, and
        # take the final loss recorded in the checkpoint (an older checkpoint without one: the
        # restored model's loss on one global batch).
        check_finite(s, state.step)
        recorded = float(s.checkpoint.loss.numpy())
        final_loss = recorded if math.isfinite(recorded) else float(s.eval_step(s.iterator).numpy())
    exporting = time.monotonic()
    exported = precision.float32_outputs(s.model)  # serves float32 whatever the policy
    model_path = export_model(exported, s.run, s.cluster, s.writer.writes) if s.config["export"]["enabled"] else ""
    # Nobody leaves before every worker has exported and is done with the last collective
    # (entrypoint.training.leaving); after it no worker calls TensorFlow again, so each may
    # leave at once (__main__._exit).
    waiting = time.monotonic()
    leave_together(s, leaving.FINISHED)
    marking = time.monotonic()
    seconds = marking - started
    overall = state.steady.rate()
    if s.cluster.is_chief:
        write_completed(
            s.run,
            {
                "runId": s.env.run_id,
                "steps": state.step,
                "finalLoss": finite_or_none(final_loss),
                "model": model_path,
                "seconds": round(seconds, 3),
                "examplesPerSec": None if overall is None else round(overall, 1),
                "weightsDigest": digest,
                "workers": s.cluster.num_workers,
            },
        )
    ending = {
        "export_s": waiting - exporting,
        "barrier_s": marking - waiting,
        "completed_s": time.monotonic() - marking,
    }
    return TrainingResult(state.step, finite_or_none(final_loss), overall, model_path, digest, False, ending)


def train(config: dict, cluster: Cluster, env: RunEnv, stop_requested) -> TrainingResult:
    """Run (or resume) training to config['steps'] (or config['epochs']).

    stop_requested() is this worker's SIGTERM flag (entrypoint.training.sigterm.SigtermFlag)."""
    session = set_up(config, cluster, env)
    _SESSIONS.append(session)
    started = time.monotonic()
    state = run_steps(session, stop_requested)
    digest = weights_digest(session.model)
    if state.stopped:
        leave_together(session, leaving.STOPPED)
        return TrainingResult(state.step, state.final_loss, state.steady.rate(), "", digest, stopped=True)
    return finish(session, state, digest, started)


# The sessions of this process, never freed: freeing one (strategy, distributed iterator,
# model) runs C++ destructors that wait on RPCs to the peers, 4 s between a finished worker's
# last barrier and its done line here. Every way out of a trained run leaves with os._exit
# (__main__._exit) after the group's barrier, so nothing ever needs them freed.
_SESSIONS: list[Session] = []


def leave_together(s: Session, barrier: str) -> None:
    """Wait at the coordination service's `barrier` until every worker is done with the
    group's collectives (entrypoint.training.leaving says why). After a finished run a group
    that broke before everyone arrived is a retryable failure (the restart exports again and
    waits again); after a stop every worker has saved, so it is only logged."""
    if s.cluster.num_workers <= 1:
        return
    finished = barrier == leaving.FINISHED
    broken = leaving.leave_together(
        context.context().wait_at_barrier,
        barrier,
        leaving.barrier_timeout_ms(s.config["timeoutSeconds"]),
        is_chief=s.cluster.is_chief,
        completed=(lambda: read_completed(s.run) is not None) if finished else None,
    )
    if broken is None:
        return
    if finished:
        raise tf.errors.UnavailableError(None, None, f"the group broke before every worker had finished: {broken}")
    log(loglines.line(loglines.DEBUG, worker=s.cluster.worker_index, leaving=barrier, broken=broken))
