"""The bring-your-own-script example (tutorial style, tf_keras model.fit) across two processes."""

from __future__ import annotations

import subprocess
import sys

import pytest
from workers import REPO, base_env, start_group

pytestmark = [pytest.mark.slow, pytest.mark.beside]  # nothing timed: it runs beside the cluster tests

RELOAD_AND_PREDICT = """
import os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np, tf_keras
model = tf_keras.models.load_model(sys.argv[1])
out = model.predict(np.zeros((3, 28, 28), np.float32), verbose=0)
print("shape", out.shape, "finite", bool(np.isfinite(out).all()))
"""


def test_keras_tutorial_example_trains_on_two_workers_and_chief_saves(tmp_path):
    env = {
        "TFMW_SHARED_DIR": str(tmp_path),
        "TFMW_RUN_ID": "example",
        "EXAMPLE_EPOCHS": "2",
        "EXAMPLE_STEPS_PER_EPOCH": "8",
    }
    group = start_group([sys.executable, "examples/keras_tutorial_worker.py"], 2, str(tmp_path), env=env)
    codes = group.wait(240)
    assert codes == [0, 0], group.read_all()
    done = [[line for line in out.splitlines() if line.startswith("example done")] for out in group.outputs]
    assert all(len(d) == 1 for d in done), group.read_all()
    # Synchronous data parallelism: both workers report the same loss.
    assert done[0][0].split()[3] == done[1][0].split()[3]
    model = tmp_path / "example" / "model"
    assert (model / "saved_model.pb").exists()
    assert not (tmp_path / "example" / "workertemp_1").exists()  # the worker's temporary copy is gone

    reload = subprocess.run(
        [sys.executable, "-c", RELOAD_AND_PREDICT, str(model)],
        cwd=REPO,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert reload.returncode == 0, reload.stderr
    assert "shape (3, 10) finite True" in reload.stdout
