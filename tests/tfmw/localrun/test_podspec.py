"""Rendered StatefulSet -> local pods (pure; no processes)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from repo import REPO

from tfmw.chart import render
from tfmw.localrun.network import free_port_range
from tfmw.localrun.podspec import LocalRunError, build_pods, find_workload, image_env


@pytest.fixture(scope="module")
def workload():
    objects = render.render("local", ["workers.replicas=3"], release="t", namespace="ns")
    return find_workload(objects, "ns")


def test_one_pod_per_replica_with_downward_api_filled(workload, tmp_path):
    pods = build_pods(workload, tmp_path, python="/venv/python")
    assert [p.name for p in pods] == ["t-tf-multiworker-0", "t-tf-multiworker-1", "t-tf-multiworker-2"]
    for pod in pods:
        assert pod.env["TFMW_POD_NAME"] == pod.name
        assert pod.env["TFMW_NAMESPACE"] == "ns"
        assert pod.fqdn == f"{pod.name}.{workload.service['metadata']['name']}.ns.svc.cluster.local"
        # both `python`s (launcher and default training command) use this venv's interpreter
        assert pod.argv[:5] == ["/venv/python", "-m", "entrypoint", "run", "--"]
        assert pod.argv[5:] == ["/venv/python", "-m", "entrypoint.training"]


def test_volume_paths_map_to_local_folders(workload, tmp_path):
    pods = build_pods(workload, tmp_path)
    shared = {p.env["TFMW_SHARED_DIR"] for p in pods}
    assert shared == {str(tmp_path / "shared")}, "shared storage is one folder for every pod"
    config = Path(pods[0].env["TFMW_TRAINING_CONFIG"])
    assert config.name == "training.yaml" and tmp_path in config.parents
    assert config in pods[0].files and "steps:" in pods[0].files[config]
    tmpdirs = {p.env["TMPDIR"] for p in pods}
    assert len(tmpdirs) == 3, "emptyDirs are per pod"


def test_command_paths_into_shipped_files_are_local_and_host_paths_stay(tmp_path):
    objects = render.render(
        "local",
        [
            "training.command={python,/opt/tf-multiworker/files/main.py,/tmp/host.py}",
            "training.files.main\\.py=print(1)",
        ],
        release="t",
        namespace="ns",
    )
    worker = build_pods(find_workload(objects, "ns"), tmp_path, python="/venv/python")[0]
    script = Path(worker.argv[6])
    assert script == tmp_path / "configmaps" / "t-tf-multiworker-files" / "main.py"
    assert worker.files[script] == "print(1)"
    # /tmp is an emptyDir in the pod, but an argument there is the local user's own path
    assert worker.argv[7] == "/tmp/host.py"


def test_the_evaluator_jobs_pod_follows_the_workers(tmp_path):
    objects = render.render("local", ["evaluator.enabled=true"], release="t", namespace="ns")
    pods = build_pods(find_workload(objects, "ns"), tmp_path, python="/venv/python")
    worker, evaluator = pods[0], pods[-1]
    assert [p.restart_policy for p in pods] == ["Always", "Always", "Never"]
    assert evaluator.name.startswith("t-tf-multiworker-evaluator-") and evaluator.ordinal == 2
    assert evaluator.argv == ["/venv/python", "-m", "entrypoint.training", "--evaluate"]
    assert evaluator.env["TFMW_SHARED_DIR"] == worker.env["TFMW_SHARED_DIR"]
    assert "TFMW_REPLICAS" not in evaluator.env


def test_secret_env_is_refused_with_one_line(workload, tmp_path):
    container = workload.container
    container.setdefault("env", []).append(
        {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    )
    try:
        with pytest.raises(LocalRunError, match="AWS_SECRET_ACCESS_KEY reads a Kubernetes Secret"):
            build_pods(workload, tmp_path)
    finally:
        container["env"].pop()


def test_envfrom_reads_the_releases_configmaps_and_refuses_what_only_a_cluster_has(tmp_path):
    objects = render.render(
        "local",
        [
            "workers.extraEnvFrom[0].configMapRef.name=t-tf-multiworker-training",
            "workers.extraEnvFrom[0].prefix=CFG_",
            "workers.extraEnvFrom[1].secretRef.name=wandb",
            "workers.extraEnvFrom[1].secretRef.optional=true",
        ],
        release="t",
        namespace="ns",
    )
    workload = find_workload(objects, "ns")
    worker = build_pods(workload, tmp_path)[0]
    assert "steps:" in worker.env["CFG_training.yaml"]  # the release's own ConfigMap, prefixed
    assert worker.env["TFMW_PORT"] == workload.env_value("TFMW_PORT")  # env wins over envFrom
    workload.container["envFrom"][1]["secretRef"].pop("optional")
    with pytest.raises(LocalRunError, match="envFrom reads the Kubernetes Secret 'wandb', which a local run cannot"):
        build_pods(workload, tmp_path)


def test_missing_statefulset_is_refused():
    with pytest.raises(LocalRunError, match="expected one StatefulSet"):
        find_workload([{"kind": "Service", "metadata": {"name": "x"}}], "ns")


def test_image_env_read_from_dockerfile():
    env = image_env((REPO / "Dockerfile").read_text())
    assert env["TF_USE_LEGACY_KERAS"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert image_env('FROM x\nENV A 1 2\nENV B=3 \\\n    C="4"\n') == {"A": "1 2", "B": "3", "C": "4"}


def test_free_port_range_skips_busy_ports():
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        port = busy.getsockname()[1]
        base = free_port_range(port, 2)
        assert base != port
        assert not (base <= port < base + 2)


def test_local_run_refuses_unknown_env_with_one_line():
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "tfmw.localrun", "--env", "nope"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "make local: unknown ENV 'nope': known environments are dev, local, prod, staging (one per values/<env>.yaml)"
    )


def test_local_run_refuses_bad_value_before_starting_anything():
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "tfmw.localrun", "--set", "workers.replicas=0"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "workers.replicas" in proc.stderr and "Traceback" not in proc.stderr
    assert "local run" not in proc.stdout


def test_local_run_takes_values_files_and_set_json_refusing_before_starting_anything(tmp_path):
    """VALUES= and SET_JSON= reach `make local`'s render: a number the file gives where text is
    needed, layered after SET_JSON's text, is refused naming the file; nothing starts."""
    import subprocess

    team = tmp_path / "team.yaml"
    team.write_text("training:\n  command: [python, main.py, --epochs, 5]\n")
    proc = subprocess.run(
        [sys.executable, "-m", "tfmw.localrun", "-f", str(team), "--set-json", 'workers.nodeSelector.gpu="a"'],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 2 and "local run" not in proc.stdout
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("make local: invalid value for training.command[3]: 5 is not of type string"), line
    assert f"{team} gives a number" in line and "from values/local.yaml + " in line
    assert '--set-json workers.nodeSelector.gpu="a"' in line


def test_api_access_is_left_out_of_a_local_run(workload, tmp_path):
    """The chart gives workers API access by default (a projected token, TFMW_API_DIR and
    TFMW_STATUS_CONFIGMAP); `make local` has no API server, so its pods run without it."""
    volumes = {v["name"] for v in workload.pod_spec["volumes"]}
    env_names = {e["name"] for e in workload.container["env"]}
    assert "api-access" in volumes and {"TFMW_API_DIR", "TFMW_STATUS_CONFIGMAP"} <= env_names
    pod = build_pods(workload, tmp_path)[0]
    assert "TFMW_API_DIR" not in pod.env and "TFMW_STATUS_CONFIGMAP" not in pod.env
    assert pod.env["TFMW_POD_REVISION"] == f"{workload.name}-local"
    assert pod.env["TFMW_ON_SUCCESS"] == "scaleToZero"
    # by design, and the launcher is told so: it ends a success without a word of the scale to 0
    # it cannot make (tests/entrypoint/test_launcher.py)
    assert pod.env["TFMW_NO_API_SERVER"] == "1"


def test_a_projected_volume_other_than_api_access_is_still_refused(workload, tmp_path):
    import copy

    sts = copy.deepcopy(workload.statefulset)
    sts["spec"]["template"]["spec"]["volumes"].append(
        {"name": "creds", "projected": {"sources": [{"secret": {"name": "s3"}}]}}
    )
    other = type(workload)(sts, workload.service, workload.configmaps, workload.namespace)
    with pytest.raises(LocalRunError, match="volume 'creds' needs a Kubernetes Secret"):
        build_pods(other, tmp_path)


def test_the_workers_get_the_group_size_the_api_would_give_them(tmp_path):
    """The chart leaves TFMW_REPLICAS out when the workers have API access (they read the size
    from the StatefulSet); make local has no API server, so the rendered size is theirs."""
    objects = render.render("local", ["workers.replicas=3"], release="t", namespace="ns")
    sts = next(o for o in objects if o["kind"] == "StatefulSet")
    assert not any(e["name"] == "TFMW_REPLICAS" for e in sts["spec"]["template"]["spec"]["containers"][0]["env"])
    pods = build_pods(find_workload(objects, "ns"), tmp_path, python="/venv/python")
    assert [p.env["TFMW_REPLICAS"] for p in pods] == ["3", "3", "3"]
    assert not any("TFMW_API_DIR" in p.env for p in pods)  # no API: the launchers' API-off path
