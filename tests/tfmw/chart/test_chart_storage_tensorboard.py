"""Shared storage types, TensorBoard, and the `helm test` pod (whose check runs here for real)."""

from __future__ import annotations

import subprocess
import sys

import chartkit
import pytest
from chartkit import ALL_ON, RELEASE, env_of, find, one

FULLNAME = f"{RELEASE}-tf-multiworker"


def worker_spec(objects):
    return one(objects, "StatefulSet")["spec"]["template"]["spec"]


def shared_volume(spec):
    return next((v for v in spec["volumes"] if v["name"] == "shared"), None)


def test_empty_dir_is_the_default(helm, render):
    objects = render(helm, sets=("storage.emptyDir.sizeLimit=20Gi",))
    assert shared_volume(worker_spec(objects)) == {"name": "shared", "emptyDir": {"sizeLimit": "20Gi"}}
    assert not find(objects, "PersistentVolumeClaim")


def test_existing_claim(helm, render):
    objects = render(
        helm,
        sets=(
            "storage.type=existingClaim",
            "storage.existingClaim.claimName=team-rwx",
            "storage.existingClaim.subPath=runs",
        ),
    )
    spec = worker_spec(objects)
    assert shared_volume(spec) == {"name": "shared", "persistentVolumeClaim": {"claimName": "team-rwx"}}
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "shared")
    assert mount == {"name": "shared", "mountPath": "/shared", "subPath": "runs"}
    assert not find(objects, "PersistentVolumeClaim")


def test_created_claim_is_rwx_and_kept(helm, render):
    objects = render(helm, ALL_ON)
    pvc = one(objects, "PersistentVolumeClaim")
    assert pvc["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "storageClassName": "nfs-rwx",
        "resources": {"requests": {"storage": "200Gi"}},
    }
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert shared_volume(worker_spec(objects))["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    objects = render(helm, sets=("storage.type=createClaim", "storage.createClaim.keep=false"))
    assert "annotations" not in one(objects, "PersistentVolumeClaim")["metadata"]


def test_object_store_uses_the_uri_and_a_secret_reference_only(helm, render):
    objects = render(
        helm,
        sets=(
            "storage.type=objectStore",
            "storage.objectStore.uri=gs://bkt/runs/",
            "storage.objectStore.existingSecret=gcs-creds",
        ),
    )
    spec = worker_spec(objects)
    container = spec["containers"][0]
    assert shared_volume(spec) is None
    assert env_of(container)["TFMW_SHARED_DIR"]["value"] == "gs://bkt/runs"
    assert container["envFrom"] == [{"secretRef": {"name": "gcs-creds"}}]
    assert not find(objects, "Secret")  # the chart never holds the credentials


def test_tensorboard_reads_the_run_logs(helm, render):
    objects = render(helm, ALL_ON)
    deployment = one(objects, "Deployment", f"{FULLNAME}-tensorboard")
    spec = deployment["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert "--logdir=/shared/all-on-run/tensorboard" in container["command"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "shared")
    assert mount["readOnly"] is True
    assert shared_volume(spec) == shared_volume(worker_spec(objects))
    svc = one(objects, "Service", f"{FULLNAME}-tensorboard")
    assert svc["spec"]["ports"][0]["port"] == 6006
    assert svc["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert not find(render(helm), "Deployment")  # off by default


def test_tensorboard_on_empty_dir_is_refused(helm):
    error = chartkit.template_error(helm, sets=("tensorboard.enabled=true",))
    assert "tensorboard.enabled=true needs shared storage" in error and "storage.type" in error


def install_notes(*args: str) -> str:
    """NOTES.txt as `helm install` prints it. Helm 3's `install --dry-run=client` still wants
    a cluster; Helm 4 renders NOTES offline."""
    result = chartkit.run_helm(
        chartkit.helm4(),
        ["install", RELEASE, str(chartkit.CHART), "--dry-run=client", "--namespace", "training", *args],
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split("NOTES:", 1)[1]


def test_notes_tell_how_to_follow_the_job():
    notes = install_notes("-f", str(ALL_ON))
    selector = (
        "app.kubernetes.io/name=tf-multiworker,app.kubernetes.io/instance=tfmw,app.kubernetes.io/component=worker"
    )
    assert f"kubectl -n training logs -f -l {selector} --prefix" in notes
    assert f"kubectl -n training get pods -l {selector} -o wide" in notes
    assert "/shared/all-on-run/model/" in notes
    assert f"kubectl -n training port-forward svc/{FULLNAME}-tensorboard 6006:6006" in notes
    assert "helm test tfmw -n training --logs" in notes


@pytest.mark.parametrize("values", [(), ("-f", str(ALL_ON))])
def test_notes_give_plain_helm_users_only_commands_they_have(values):
    """`helm install` users have helm and kubectl, not this repository's Makefile."""
    notes = install_notes(*values)
    commands = [line.strip() for line in notes.splitlines() if line.startswith("  ")]
    tools = {command.split()[0] for command in commands if command and command[0].isalpha()}
    assert "kubectl" in tools and "helm" in tools
    assert "make" not in tools and "make " not in notes, notes


# -- the helm test pod --------------------------------------------------------------------

CHECK_PEERS = ["python", "-m", "entrypoint", "check-peers"]


def test_pod_runs_the_launchers_peer_check_on_every_worker(helm, render):
    objects = render(helm, ALL_ON)
    pod = one(objects, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    container = pod["spec"]["containers"][0]
    assert container["command"] == CHECK_PEERS
    assert container["args"] == [
        "--timeout-seconds",
        "120",
        "--port",
        "2222",
        *(f"{FULLNAME}-{i}.{FULLNAME}.training.svc.cluster.local" for i in range(3)),
    ]


def run_peer_check(helm, port: int, hosts: list[str]) -> subprocess.CompletedProcess:
    """The rendered test pod's command and flags (workers.port=`port`, a 1 s timeout), run here
    on this checkout's launcher with loopback names in place of the workers'."""
    pod = one(
        chartkit.template(
            helm,
            sets=(f"workers.port={port}", "tests.timeoutSeconds=1"),
            show_only=("templates/tests/test-peers.yaml",),
        ),
        "Pod",
    )
    container = pod["spec"]["containers"][0]
    flags = container["args"][:4]
    assert container["command"] == CHECK_PEERS and flags == ["--timeout-seconds", "1", "--port", str(port)]
    return subprocess.run(
        [sys.executable, *CHECK_PEERS[1:], *flags, *hosts], capture_output=True, text=True, timeout=60
    )


def test_the_peer_check_passes_when_every_port_accepts(helm, listener):
    proc = run_peer_check(helm, listener, ["127.0.0.1", "localhost"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tfmw launcher peers: all 2 reachable after" in proc.stdout
    assert proc.stderr == ""


def test_the_peer_check_names_what_is_unreachable(helm, listener):
    proc = run_peer_check(helm, listener, ["127.0.0.1", "no-such-worker.invalid"])
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stderr.startswith("tfmw: peers not found after 1s: 1 of 2 never reachable: no-such-worker.invalid;")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_the_peer_check_fails_on_a_refused_port(helm, refused_port):
    proc = run_peer_check(helm, refused_port, ["127.0.0.1"])
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "1 of 1 never reachable: 127.0.0.1;" in proc.stderr


def test_notes_warn_when_the_object_store_is_unreachable():
    def notes(*sets):
        args = [
            "install",
            RELEASE,
            str(chartkit.CHART),
            "--dry-run=client",
            "--namespace",
            "training",
            "--set",
            "storage.type=objectStore",
            "--set",
            "storage.objectStore.uri=gs://b/r",
        ]
        for item in sets:
            args += ["--set", item]
        result = chartkit.run_helm(chartkit.helm4(), args)
        assert result.returncode == 0, result.stderr
        return result.stdout.split("NOTES:", 1)[1]

    assert "WARNING: storage.type=objectStore but egress is restricted" in notes()
    assert "WARNING" not in notes("networkPolicy.egress.extraRules[0].ports[0].port=443")
