"""The evaluator: evaluate each new checkpoint of a run until the run completes.

    python -m entrypoint.training --evaluate        (the chart's evaluator pod, evaluator.enabled)
    TF_CONFIG task type "evaluator"                  (a TFJob or Volcano Evaluator replica)

TensorFlow's sidecar-evaluator pattern (tf.keras.utils.SidecarEvaluator) on the built-in
trainer's own model and data config, outside the workers' collective: it never joins the
group, it only reads what the chief publishes. Its loop, as SidecarEvaluator's, with what a
run of this chart adds:

- a checkpoint is one the `checkpoint` state file or the directory listing shows complete
  (entrypoint.training.checkpoints, the trainer's own rule), never one half written;
- each newer checkpoint is evaluated once: `tfmw eval` line, TensorBoard scalars
  `eval/loss` and `eval/accuracy` under <run>/tensorboard/eval at the checkpoint's step, the
  run's `eval.json` (atomic), and the status ConfigMap's eval* keys when the pod has API access;
- the run's COMPLETED marker ends it, once the newest checkpoint (the final one: the trainer
  checkpoints its last step) is evaluated: exit 0 with `final=true`;
- no checkpoint yet: it waits, saying so at most once a minute (WAIT_NOTICE_SECONDS), and
  never exits 0 without having evaluated;
- a run recorded Failed in the status ConfigMap ends it with exit 4 (nothing more will come).
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .. import loglines
from ..errors import EXIT_OK, EXIT_SIGTERM, EXIT_TRAINING_FAILED
from ..lifecycle import Phase, from_data
from ..rundir import MarkerUnreadable, RunDir, read_completed, write_atomic
from . import checkpoints
from .config import ConfigError, RunEnv

WAIT_NOTICE_SECONDS = 60.0
# The status ConfigMap keys the evaluator owns (docs/lifecycle.md); the launcher never writes them.
STATUS_KEYS = ("evalStep", "evalLoss", "evalAccuracy", "evalUpdatedAt")


@dataclass(frozen=True)
class Decision:
    """What to do after one look at the run: evaluate `checkpoint` (a path) or not, and
    whether the evaluator is done once it has (or now, if there is nothing to evaluate)."""

    checkpoint: str | None
    step: int | None
    done: bool


def decide(plan: checkpoints.Plan, evaluated_step: int | None, completed: bool) -> Decision:
    """Pure: the newest complete checkpoint, if newer than the last one evaluated; done when
    the run is complete and its newest checkpoint is (or is about to be) evaluated."""
    candidates = plan.candidates()
    if not candidates:
        return Decision(None, None, False)  # no checkpoint: never done without evaluating
    newest = candidates[0]
    step = plan.complete[os.path.basename(newest)]
    if evaluated_step is not None and step <= evaluated_step:
        return Decision(None, None, completed)
    return Decision(newest, step, completed)


class Notice:
    """A waiting message at most once per `every` seconds."""

    def __init__(
        self,
        log: Callable[[str], None],
        every: float = WAIT_NOTICE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.log, self.every, self.clock = log, every, clock
        self._last: float | None = None

    def say(self, text: str) -> None:
        now = self.clock()
        if self._last is None or now - self._last >= self.every:
            self._last = now
            self.log(loglines.line(loglines.EVAL, text=text))


def _status_api(environ: Mapping[str, str]):
    """(api, namespace, configmap) when the pod may write the run's status, else None."""
    from ..kubeapi import KubeAPI

    configmap, namespace = environ.get("TFMW_STATUS_CONFIGMAP"), environ.get("TFMW_NAMESPACE")
    api_dir = environ.get("TFMW_API_DIR")
    if not (configmap and namespace and api_dir):
        return None
    api = KubeAPI.from_env(environ, api_dir)
    return None if api is None else (api, namespace, configmap)


class StatusLink:
    """The evaluator's few words with the status ConfigMap: its eval* keys, and whether the
    run failed. Errors are logged once and never stop the evaluation."""

    def __init__(self, environ: Mapping[str, str], run_id: str, log: Callable[[str], None]):
        self.target = _status_api(environ)
        self.run_id = run_id
        self.log = log
        self._warned = False

    def _warn(self, err) -> None:
        if not self._warned:
            self._warned = True
            self.log(loglines.line(loglines.WARNING, text=f"status ConfigMap: {err}; evaluating on"))

    def record(self, data: dict[str, str]) -> None:
        if self.target is None:
            return
        from ..kubeapi import APIError

        api, namespace, name = self.target
        try:
            api.patch_configmap_data(namespace, name, data)
        except APIError as err:
            self._warn(err)

    def failed(self) -> str | None:
        """The run's recorded failure ('Reason: message'), or None."""
        if self.target is None:
            return None
        from ..kubeapi import APIError

        api, namespace, name = self.target
        try:
            data = api.get_configmap(namespace, name).get("data") or {}
        except APIError as err:
            self._warn(err)
            return None
        state = from_data(data)
        if state is not None and state.phase is Phase.FAILED and state.run_id == self.run_id:
            return f"{state.reason or 'Failed'}: {state.message}".rstrip(": ")
        return None


def evaluation_config(config: dict) -> dict:
    """The trainer config the evaluation data is read with: evaluation.path (held-out files
    in data.format, with data.numClasses) or the training data; never shuffled."""
    cfg = copy.deepcopy(config)
    evaluation = cfg.get("evaluation") or {}
    if evaluation.get("path"):
        cfg["data"] = dict(cfg["data"], source="files", path=evaluation["path"])
        if "numClasses" not in cfg["data"]:
            raise ConfigError("training config: evaluation.path needs data.numClasses (the files' classes)")
    cfg["data"]["shuffleBuffer"] = 0
    cfg["gradientAccumulationSteps"] = 1  # it reads batchSizePerReplica at a time, no micro-batches
    return cfg


class Evaluator:
    """Builds the trainer's model once and evaluates checkpoints into it (TensorFlow here)."""

    def __init__(self, config: dict, env: RunEnv, summaries: str):
        import tensorflow as tf
        import tf_keras as keras

        from .data import build_input
        from .models import build_model

        cfg = evaluation_config(config)
        self.examples = config["evaluation"]["examples"]
        self.batch = min(cfg["batchSizePerReplica"], self.examples)
        spec = build_input(cfg, env.shared_dir, 1, 0)
        self.examples = min(self.examples, spec.examples_per_worker)
        self.dataset = spec.dataset_fn(self.batch, 0).unbatch().take(self.examples).batch(self.batch).cache()
        self.model = build_model(cfg["model"]["name"], spec.input_shape, spec.num_classes, cfg["model"]["args"])
        # Only the model: the optimizer's slots and the counters are the trainer's business.
        self.checkpoint = tf.train.Checkpoint(model=self.model, step=tf.Variable(0, dtype=tf.int64))
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")

        @tf.function
        def batch_sums(x, y):
            logits = self.model(x, training=False)
            correct = tf.reduce_sum(
                tf.cast(tf.equal(tf.argmax(logits, axis=1, output_type=tf.int64), tf.cast(y, tf.int64)), tf.float64)
            )
            return tf.cast(loss_fn(y, logits), tf.float64), correct

        self.batch_sums = batch_sums
        self.writer = tf.summary.create_file_writer(summaries)  # `eval/*` scalars, beside training's

    def evaluate(self, path: str) -> tuple[int, float, float]:
        """(step, mean loss, accuracy) of the checkpoint at `path`."""
        self.checkpoint.restore(path).expect_partial()
        loss = correct = total = 0.0
        for x, y in self.dataset:
            batch_loss, batch_correct = self.batch_sums(x, y)
            loss += float(batch_loss)
            correct += float(batch_correct)
            total += int(y.shape[0])
        return int(self.checkpoint.step.numpy()), loss / max(total, 1), correct / max(total, 1)

    def summarise(self, step: int, loss: float, accuracy: float) -> None:
        from .trainer import write_scalar

        with self.writer.as_default(step=step):
            write_scalar("eval/loss", loss)
            write_scalar("eval/accuracy", accuracy)
        self.writer.flush()


def _evaluate_one(evaluator: Evaluator, run_dir: RunDir, decision: Decision) -> dict:
    """Evaluate one checkpoint: its record (step, loss, accuracy, ...), TensorBoard scalars written."""
    step, loss, accuracy = evaluator.evaluate(decision.checkpoint)
    evaluator.summarise(step, loss, accuracy)
    return {
        "step": step,
        "loss": round(loss, 6),
        "accuracy": round(accuracy, 6),
        "examples": evaluator.examples,
        "checkpoint": decision.checkpoint,
        "final": decision.done,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _publish(record: dict, run_dir: RunDir, status: StatusLink, log: Callable[[str], None]) -> None:
    """A result everywhere it is read: eval.json (atomic), the status ConfigMap, one line."""
    write_atomic(run_dir.eval_record, json.dumps(record, indent=2) + "\n")
    status.record(
        dict(
            zip(
                STATUS_KEYS,
                (str(record["step"]), f"{record['loss']:.4f}", f"{record['accuracy']:.4f}", record["at"]),
                strict=True,
            )
        )
    )
    log(
        loglines.line(
            loglines.EVAL,
            step=record["step"],
            loss=f"{record['loss']:.4f}",
            accuracy=f"{record['accuracy']:.4f}",
            examples=record["examples"],
            checkpoint=record["checkpoint"],
            final="true" if record["final"] else "false",
        )
    )


def run(
    config: dict,
    env: RunEnv,
    stop_requested: Callable[[], bool],
    environ: Mapping[str, str],
    poll_seconds: float | None = None,
    log: Callable[[str], None] | None = None,
) -> int:
    """Evaluate until the run completes (exit 0), fails (exit 4) or SIGTERM (exit 143)."""
    log = log or (lambda line: print(line, flush=True))
    from .trainer import plan_checkpoints  # TensorFlow is imported here: the evaluator evaluates

    run_dir = RunDir.of(env.shared_dir, env.run_id)
    poll = config["evaluation"]["pollSeconds"] if poll_seconds is None else poll_seconds
    status = StatusLink(environ, env.run_id, log)
    waiting = Notice(log)
    evaluator: Evaluator | None = None
    evaluated: int | None = None
    last: dict | None = None  # the newest result, published again as final if the run ends on it

    log(
        loglines.line(
            loglines.EVAL,
            run=env.run_id,
            checkpoints=run_dir.checkpoints,
            text="evaluator started: evaluating each new checkpoint until the run completes",
        )
    )
    while True:
        try:
            completed = read_completed(run_dir) is not None  # looked at first: the newest checkpoint then is final
        except MarkerUnreadable as err:  # not known: never "done"; looked at again next poll
            completed = False
            waiting.say(f"{err}; looking again")
        decision = decide(plan_checkpoints(run_dir.checkpoints), evaluated, completed)
        if decision.checkpoint is not None:
            if evaluator is None:
                evaluator = Evaluator(config, env, os.path.join(run_dir.tensorboard, "eval"))
            evaluated = decision.step
            last = _evaluate_one(evaluator, run_dir, decision)
            _publish(last, run_dir, status, log)
        elif decision.done and last is not None:
            # The run completed after its newest checkpoint was evaluated: that result is final.
            _publish(dict(last, final=True), run_dir, status, log)
        elif completed and evaluated is None:
            log(
                loglines.line(
                    loglines.EVAL,
                    text=f"the run completed with no complete checkpoint in {run_dir.checkpoints}: nothing to evaluate",
                )
            )
            return EXIT_TRAINING_FAILED
        elif evaluated is None:
            waiting.say(f"waiting for the first checkpoint in {run_dir.checkpoints}")
        if decision.done:
            return EXIT_OK
        failure = status.failed()
        if failure:
            log(
                loglines.line(
                    loglines.EVAL,
                    text=f"the run failed ({failure}); no checkpoint will follow, "
                    f"last evaluated step {evaluated if evaluated is not None else '-'}",
                )
            )
            return EXIT_TRAINING_FAILED
        deadline = time.monotonic() + poll
        while time.monotonic() < deadline:
            if stop_requested():
                return EXIT_SIGTERM
            time.sleep(min(0.2, poll))
