"""The CPU image's Python environment, built from its hash lock the way the Dockerfile builds
it (`pip install --no-deps --require-hashes -r requirements/image-cpu.lock`), imports
tensorflow, tf_keras and tensorboard and runs one MultiWorkerMirroredStrategy step across two
worker processes on loopback.

Slow: the first run downloads the locked wheels (tensorflow-cpu is a few hundred MB) into a
venv cached under .tools/image-env/cpu-<lock hash>/, so later runs reuse it; a changed lock
gets a new venv. Needs CPython 3.11, the Python the lock is resolved for.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from repo import REPO as REPO_ROOT

LOCK = REPO_ROOT / "requirements" / "image-cpu.lock"
CACHE = REPO_ROOT / ".tools" / "image-env"
INSTALL_TIMEOUT_SECONDS = 1800
STEP_TIMEOUT_SECONDS = 300

# One training step under MWMS, written as a user's script would: tf_keras layers, a custom
# strategy.run step, gradients all-reduced across the workers. Prints the weights after it.
STEP_SCRIPT = textwrap.dedent("""\
    import json, sys
    import tensorflow as tf
    import tf_keras
    import tensorboard  # the chart's TensorBoard Deployment runs it from this image

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(__import__("os").environ["TF_CONFIG"])["task"]["index"]
    with strategy.scope():
        model = tf_keras.Sequential([tf_keras.layers.Dense(1, kernel_initializer="ones", input_shape=(2,))])
        optimizer = tf_keras.optimizers.SGD(0.1)

    @tf.function
    def step(x, y):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x) - y) ** 2)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        return strategy.reduce("SUM", strategy.run(replica_step, (x, y)), axis=None)

    # Each worker sees different data: equal weights afterwards mean the gradients were all-reduced.
    x = tf.constant([[1.0, 2.0]]) * (task + 1)
    y = tf.constant([[0.0]])
    loss = step(x, y)
    print(json.dumps({"tf": tf.__version__, "keras": tf_keras.__version__, "loss": float(loss),
                      "kernel": model.get_weights()[0].ravel().tolist()}))
    """)


def lock_key() -> str:
    return hashlib.sha256(LOCK.read_bytes()).hexdigest()[:16]


def cpu_env() -> Path:
    """The venv for this lock: reused when complete, else (re)built in place under a file lock.

    Built where it stays (a venv's console scripts name their interpreter by absolute path, so
    a venv cannot be moved); the `complete` stamp is written last, so a run interrupted
    mid-install is rebuilt next time rather than trusted.
    """
    venv = CACHE / f"cpu-{lock_key()}"
    stamp = venv / "complete"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"cpu-{lock_key()}.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)  # a concurrent run waits for this build
        if stamp.is_file():
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        install = subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-cache-dir",
                "--no-deps",
                "--require-hashes",
                "-r",
                str(LOCK),
            ],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_SECONDS,
        )
        if install.returncode != 0:
            pytest.fail(f"installing {LOCK.name} failed:\n{install.stderr[-3000:]}")
        stamp.write_text(LOCK.name + "\n")
    return venv


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@pytest.mark.slow
@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the image lock is resolved for CPython 3.11")
@pytest.mark.beside  # nothing timed: it runs beside the cluster tests
def test_cpu_lock_environment_runs_one_mwms_step_across_two_workers(tmp_path):
    python = cpu_env() / "bin" / "python"
    # Nothing from the project venv leaks in: a bare environment with the image's variables.
    base_env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "TF_USE_LEGACY_KERAS": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    script = tmp_path / "step.py"
    script.write_text(STEP_SCRIPT)
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    workers = []
    for index in range(2):
        env = base_env | {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})}
        workers.append(
            subprocess.Popen(
                [str(python), str(script)],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = []
    try:
        for worker in workers:
            out, err = worker.communicate(timeout=STEP_TIMEOUT_SECONDS)
            assert worker.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    locked = {
        line.split("==")[0]: line.split("==")[1].split()[0]
        for line in LOCK.read_text().splitlines()
        if "==" in line and not line.startswith(" ")
    }
    for result in results:
        assert result["tf"] == locked["tensorflow-cpu"] and result["keras"] == locked["tf-keras"]
    # All-reduced: both workers hold the same weights, moved away from the initial ones.
    assert results[0]["kernel"] == results[1]["kernel"]
    assert results[0]["kernel"] != [1.0, 1.0]
    assert results[0]["loss"] == results[1]["loss"] > 0


@pytest.mark.slow
@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the image lock is resolved for CPython 3.11")
@pytest.mark.beside  # nothing timed: it runs beside the cluster tests
def test_cpu_lock_environment_serves_tensorboard_as_the_chart_starts_it(tmp_path):
    # The chart's TensorBoard Deployment runs `tensorboard --logdir=... --bind_all`; TF 2.21
    # no longer depends on tensorboard, so the lock must carry it and its command must serve.
    tensorboard = cpu_env() / "bin" / "tensorboard"
    port = free_ports(1)[0]
    (tmp_path / "logs").mkdir()
    server = subprocess.Popen(
        [str(tensorboard), f"--logdir={tmp_path / 'logs'}", "--host=127.0.0.1", f"--port={port}"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + STEP_TIMEOUT_SECONDS
        while True:
            assert server.poll() is None, server.stdout.read()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/logdir", timeout=5) as response:
                    body = json.loads(response.read())
                break
            except OSError:
                assert time.monotonic() < deadline, "tensorboard did not answer"
                time.sleep(0.5)
        assert body == {"logdir": str(tmp_path / "logs")}
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the image lock is resolved for CPython 3.11")
@pytest.mark.beside  # nothing timed: it runs beside the cluster tests
def test_the_object_stores_the_chart_admits_are_the_ones_the_images_tensorflow_registers(tmp_path):
    # The chart refuses s3:// and hdfs:// at render (templates/_validate_storage.tpl) because the
    # image's TensorFlow has no such file system; if the lock ever gains one, revisit that.
    result = subprocess.run(
        [
            str(cpu_env() / "bin" / "python"),
            "-c",
            "import json, tensorflow as tf; print(json.dumps(sorted(tf.io.gfile.get_registered_schemes())))",
        ],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_SECONDS,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    schemes = set(json.loads(result.stdout.strip().splitlines()[-1]))
    assert {"file", "gs"} <= schemes
    assert not {"s3", "hdfs"} & schemes
