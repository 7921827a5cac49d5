"""Helpers and fixtures for the host-side deploy CLI tests: a tiny throwaway chart, overlays, a kubeconfig
pointing at a closed loopback port (no Kubernetes API server exists here, none is faked)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tfmw.chart import helmkit

REPO = helmkit.REPO
HELM4 = helmkit.find_helm()
HELM3 = helmkit.find_helm3()
KUBECTL = helmkit.find_kubectl()

MINI_CHART = {
    "Chart.yaml": "apiVersion: v2\nname: mini\nversion: 0.1.0\n",
    "values.yaml": """\
workers:
  replicas: 2
  port: 2222
  tolerations: [{key: a, operator: Exists}, {key: b, operator: Exists}]
training:
  args: ["--epochs", "3"]
  runId: ""
extra:
  keep: kept
  drop: dropped
labels: {team: ml}
""",
    "values.schema.json": """\
{
  "$schema": "http://json-schema.org/draft-07/schema#",
  "type": "object",
  "properties": {
    "workers": {
      "type": "object",
      "properties": {
        "replicas": {"type": "integer", "minimum": 1},
        "port": {"type": "integer"},
        "tolerations": {"type": "array"}
      },
      "additionalProperties": false
    },
    "training": {"type": "object"},
    "extra": {"type": "object"},
    "labels": {"type": "object"}
  }
}
""",
    # Everything the templates see goes into the output, so comparing renders compares values.
    "templates/configmap.yaml": """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-values
  namespace: {{ .Release.Namespace }}
data:
  values.json: {{ toJson .Values | quote }}
""",
    "templates/statefulset.yaml": """\
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ .Release.Name }}
spec:
  replicas: {{ .Values.workers.replicas }}
  serviceName: {{ .Release.Name }}
  selector:
    matchLabels: {app.kubernetes.io/instance: {{ .Release.Name }}}
  template:
    metadata:
      labels: {app.kubernetes.io/instance: {{ .Release.Name }}}
    spec:
      containers:
        - name: worker
          image: busybox
          args: {{ toJson .Values.training.args }}
""",
}

OVERLAYS = {
    "dev.yaml": """\
workers:
  replicas: 3
  tolerations: [{key: gpu, operator: Exists}]
training:
  args: ["--epochs", "1"]
extra:
  drop: null
""",
    "prod.yaml": "workers:\n  replicas: 4\n",
    "broken.yaml": "workers:\n  replicas: 0\n",
    "typo.yaml": "workers:\n  replicaz: 2\n",
}


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def mini_chart(tmp_path) -> Path:
    return write_tree(tmp_path / "mini", MINI_CHART)


@pytest.fixture
def values_dir(tmp_path) -> Path:
    return write_tree(tmp_path / "values", OVERLAYS)


def closed_port() -> int:
    """A loopback port with nothing listening (bound then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def unreachable_kubeconfig(tmp_path) -> tuple[Path, str, str]:
    port = closed_port()
    server = f"https://127.0.0.1:{port}"
    path = tmp_path / "kubeconfig"
    path.write_text(f"""\
apiVersion: v1
kind: Config
clusters:
- name: closed-port
  cluster: {{server: "{server}", insecure-skip-tls-verify: true}}
users:
- name: nobody
  user: {{token: not-a-secret}}
contexts:
- name: tfmw-test-ctx
  context: {{cluster: closed-port, user: nobody}}
current-context: tfmw-test-ctx
""")
    return path, "tfmw-test-ctx", server


def run_cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m tfmw.cli ARGS` in the repo, as make runs it."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "tfmw.cli", *args],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_one_line_error(proc, command: str, *fragments: str) -> str:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"tfmw {command}: error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]
