"""A platform's own TF_CONFIG, run for real (slow: real TensorFlow, the real launcher and
trainer as processes on loopback): TFJob's Master + Worker + Evaluator and Volcano's chief +
worker + evaluator train through the launcher, and the evaluator evaluates the final checkpoint.

The TF_CONFIGs come from tests/support/platforms.py (each platform's code); only the addresses
are mapped to loopback ports, in place, so the keys, their order, the roles and
"environment" are the platform's own."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from platforms import tfjob_tf_config, volcano_tf_config

from entrypoint import loglines

pytestmark = pytest.mark.slow

TRAINER = [
    sys.executable,
    "-m",
    "entrypoint.training",
    "--set",
    "model.name=mlp",
    "--set",
    "data.synthetic.inputShape=[8,8]",
    "--set",
    "steps=40",
    "--set",
    "checkpoint.everySteps=20",
    "--set",
    "export.enabled=false",
    "--set",
    "evaluation.examples=256",
    "--set",
    "evaluation.pollSeconds=0.5",
]
LAUNCHER = [sys.executable, "-m", "entrypoint", "run", "--", *TRAINER]


def loopback(raw: str) -> str:
    """The same TF_CONFIG with every address replaced by a free 127.0.0.1 port, in place."""
    config = json.loads(raw)
    socks = []
    for members in config["cluster"].values():
        for i in range(len(members)):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            members[i] = f"localhost:{s.getsockname()[1]}"
    for s in socks:
        s.close()
    return json.dumps(config)


def env_for(tmp_path: Path, raw: str) -> dict:
    return dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="2",
        CUDA_VISIBLE_DEVICES="",
        OMP_NUM_THREADS="1",
        TF_NUM_INTEROP_THREADS="1",
        TF_NUM_INTRAOP_THREADS="1",
        TFMW_SHARED_DIR=str(tmp_path / "shared"),
        TFMW_RUN_ID="platform",
        TF_CONFIG=raw,
    )


def retask(raw: str, task_type: str, index: int) -> str:
    config = json.loads(raw)
    config["task"] = {"type": task_type, "index": index}
    return json.dumps(config)


def run_group(tmp_path: Path, base: str, roles: list[tuple[str, int]], timeout: float = 300) -> dict[str, str]:
    """Start the launcher once per (task type, index) with the platform's TF_CONFIG for that
    task; return each one's output. Every process must exit 0."""
    procs = {}
    for task_type, index in roles:
        log = open(tmp_path / f"{task_type}-{index}.log", "w")
        procs[f"{task_type}-{index}"] = (
            subprocess.Popen(
                LAUNCHER,
                cwd=tmp_path,
                env=env_for(tmp_path, retask(base, task_type, index)),
                stdout=log,
                stderr=subprocess.STDOUT,
            ),
            log,
        )
    deadline = time.monotonic() + timeout
    outputs = {}
    for name, (proc, log) in procs.items():
        try:
            code = proc.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            for other, _ in procs.values():
                other.kill()
            code = "timeout"
        log.close()
        outputs[name] = (tmp_path / f"{name}.log").read_text()
        assert code == 0, f"{name} exited {code}:\n{outputs[name]}"
    return outputs


@pytest.mark.parametrize("platform", ["tfjob-master", "volcano-chief"])
def test_a_platforms_chief_worker_and_evaluator_train_and_evaluate(tmp_path, platform):
    if platform == "tfjob-master":
        raw = tfjob_tf_config("mnist", "ml", {"Master": 1, "Worker": 1, "Evaluator": 1}, "Master", 0)
        roles = [("master", 0), ("worker", 0), ("evaluator", 0)]
    else:
        raw = volcano_tf_config("mnist", [("chief", 1), ("worker", 1), ("evaluator", 1)], "chief", 0)
        roles = [("chief", 0), ("worker", 0), ("evaluator", 0)]
    outputs = run_group(tmp_path, loopback(raw), roles)
    chief_out = outputs[f"{roles[0][0]}-0"]
    done = [
        line.fields
        for out in (chief_out, outputs["worker-0"])
        for line in loglines.find(out.splitlines(), loglines.DONE)
    ]
    assert len(done) == 2 and {d["steps"] for d in done} == {"40"}
    assert len({d["weights_digest"] for d in done}) == 1  # one collective of two
    start = loglines.find(chief_out.splitlines(), loglines.START)[0].fields
    assert start["worker"] == "0/2"  # the chief (master) is task 0 of 2
    record = json.loads((tmp_path / "shared" / "platform" / "COMPLETED").read_text())
    assert record["workers"] == 2
    # the evaluator: outside the group, it evaluated the final checkpoint and ended
    evaluations = [
        line.fields
        for line in loglines.find(outputs["evaluator-0"].splitlines(), loglines.EVAL)
        if "step" in line.fields
    ]
    assert evaluations and evaluations[-1]["step"] == "40" and evaluations[-1]["final"] == "true"
    assert "evaluator task: evaluating checkpoints outside the training group" in outputs["evaluator-0"]
    result = json.loads((tmp_path / "shared" / "platform" / "eval.json").read_text())
    assert result["step"] == 40 and result["final"] is True and 0.0 <= result["accuracy"] <= 1.0
    assert any((tmp_path / "shared" / "platform" / "tensorboard" / "eval").iterdir())
