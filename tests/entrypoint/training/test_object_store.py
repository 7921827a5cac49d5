"""Shared storage given as a URI (storage.type=objectStore) goes through tf.io.gfile, not
the local file system. TensorFlow's in-memory `ram://` file system stands in for gs://
here (no object store is reachable): the same gfile code path, in one process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


@pytest.mark.slow
@pytest.mark.beside  # nothing timed: it runs beside the cluster tests
def test_single_worker_run_on_a_uri_completes_and_touches_no_local_path(tmp_path):
    # Train, then (same process: ram:// lives in memory) check the run directory's contents.
    script = textwrap.dedent("""
        import json, os, sys
        os.environ.update(TFMW_SHARED_DIR="ram://shared", TFMW_RUN_ID="uri", TF_CONFIG="")
        from entrypoint.training.__main__ import main
        code = main(["--set", "model.name=mlp", "--set", "steps=6", "--set", "checkpoint.everySteps=3",
                     "--set", "data.synthetic.inputShape=[8,8]", "--set", "logEverySteps=3"])
        import tensorflow as tf
        run = "ram://shared/uri"
        marker = json.loads(tf.io.gfile.GFile(run + "/COMPLETED").read())
        print("RESULT", code, marker["steps"], marker["model"],
              tf.io.gfile.exists(run + "/model/saved_model.pb"),
              tf.train.latest_checkpoint(run + "/checkpoints"))
        # a finished run on a URI is recognised as finished
        print("AGAIN", main(["--set", "model.name=mlp"]))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT")).split()
    assert result[1:4] == ["0", "6", "ram://shared/uri/model"]
    assert result[4] == "True"
    assert result[5].endswith("ckpt-6")
    assert "tfmw completed run=uri" in proc.stdout
    assert next(line for line in proc.stdout.splitlines() if line.startswith("AGAIN")) == "AGAIN 0"
    assert list(tmp_path.iterdir()) == [], "a URI must never become a local directory"
