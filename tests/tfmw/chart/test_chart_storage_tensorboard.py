"""Shared storage types, TensorBoard, and the `helm test` pod (whose check runs here for real)."""

from __future__ import annotations

import json
import subprocess
import sys

import chartkit
import pytest
import stubapi
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


def test_an_existing_claim_is_not_looked_up_offline(helm, render):
    # `helm template` has no cluster: lookup finds nothing, so neither the claim's access modes
    # nor its existence can be checked; the install's render does (test_cluster_ops).
    objects = render(helm, sets=("storage.type=existingClaim", "storage.existingClaim.claimName=absent"))
    assert shared_volume(worker_spec(objects))["persistentVolumeClaim"]["claimName"] == "absent"


def _claim(name: str, spec: list[str], bound: list[str] | None = None) -> dict:
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": chartkit.NAMESPACE},
        "spec": {"accessModes": spec},
    }
    if bound:
        claim["status"] = {"phase": "Bound", "accessModes": bound}
    return claim


CLAIMS = [
    _claim("rwo", ["ReadWriteOnce"]),
    _claim("rwop", ["ReadWriteOncePod"]),
    _claim("rox", ["ReadOnlyMany"]),
    _claim("rwx", ["ReadWriteMany"]),
    _claim("rwo-bound-rwx", ["ReadWriteOnce"], bound=["ReadWriteOnce", "ReadWriteMany"]),  # the volume's modes count
    _claim("rwx-bound-rwo", ["ReadWriteMany"], bound=["ReadWriteOnce"]),
    {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "default", "namespace": chartkit.NAMESPACE},
    },  # every namespace has it: the namespace is seen
]
WORKERS_MAY_SPREAD = "would stay in ContainerCreating (Multi-Attach) while the group waits for peers.timeoutSeconds"
CLAIM_REFUSALS = {
    "rwo": (), "rwx-bound-rwo": (), "rwop": (), "rox": (), "absent": (),
    "rwop,tb": ("workers.replicas=1", "tensorboard.enabled=true"),
    "rwo,tb": ("workers.nodeSelector.kubernetes\\.io/hostname=n1", "tensorboard.enabled=true"),
}  # fmt: skip
SAYS = {
    "rwo": f"storage.existingClaim.claimName=rwo: the claim is ReadWriteOnce (accessModes [ReadWriteOnce]): its "
    f"volume attaches to one node, and 2 pods (workers) on other nodes {WORKERS_MAY_SPREAD}; use a ReadWriteMany "
    "claim, or pin every worker to one node (workers.nodeSelector kubernetes.io/hostname: <node>, no TensorBoard or "
    "evaluator)",
    "rwx-bound-rwo": "storage.existingClaim.claimName=rwx-bound-rwo: the claim is ReadWriteOnce (accessModes "
    "[ReadWriteOnce])",
    "rwop": "storage.existingClaim.claimName=rwop: the claim is ReadWriteOncePod (accessModes [ReadWriteOncePod]): "
    "one pod may mount it, and 2 pods (workers) do; use a ReadWriteMany claim",
    "rox": "storage.existingClaim.claimName=rox: the claim's accessModes [ReadOnlyMany] let no pod write, and the "
    "workers write checkpoints to it; use a ReadWriteMany claim",
    "absent": f"storage.existingClaim.claimName=absent: there is no PersistentVolumeClaim absent in namespace "
    f"{chartkit.NAMESPACE} (every worker would wait in Pending for it): create it first (ReadWriteMany), fix the "
    "name, or use storage.type=createClaim",
    "rwop,tb": "storage.existingClaim.claimName=rwop: the claim is ReadWriteOncePod (accessModes [ReadWriteOncePod]): "
    "one pod may mount it, and 2 pods (workers and TensorBoard or the evaluator) do",
    "rwo,tb": "storage.existingClaim.claimName=rwo: the claim is ReadWriteOnce (accessModes [ReadWriteOnce]): its "
    "volume attaches to one node, and 3 pods (workers and TensorBoard or the evaluator)",
}


@pytest.fixture(scope="module")
def claims_api(tmp_path_factory):
    with stubapi.serving(CLAIMS, tmp_path_factory.mktemp("stubapi")) as kubeconfig:
        yield kubeconfig


def _claim_sets(case: str, *more: str) -> tuple[str, ...]:
    return ("storage.type=existingClaim", f"storage.existingClaim.claimName={case.split(',')[0]}", *more)


@pytest.mark.parametrize("case", sorted(CLAIM_REFUSALS))
def test_an_existing_claim_the_pods_cannot_share_is_refused_where_helm_can_look_it_up(helm, claims_api, case):
    rendered = stubapi.server_render(helm, claims_api, _claim_sets(case, *CLAIM_REFUSALS[case]))
    assert rendered.returncode != 0, rendered.stdout[-500:]
    prefix = "Error: execution error at (tf-multiworker/templates/statefulset.yaml:1:4): "
    (line,) = [ln for ln in rendered.stderr.splitlines() if ln.startswith("Error:")]
    assert line.startswith(prefix + SAYS[case]), line


@pytest.mark.parametrize(
    "case,sets",
    [
        ("rwx", ()),
        ("rwo-bound-rwx", ()),
        ("rwo", ("workers.replicas=1",)),
        ("rwop", ("workers.replicas=1",)),
        ("rwo", ("workers.nodeSelector.kubernetes\\.io/hostname=n1",)),
    ],
    ids=["rwx", "bound-to-rwx", "one-worker", "one-pod", "one-node"],
)
def test_an_existing_claim_the_pods_can_share_is_accepted(helm, claims_api, case, sets):
    rendered = stubapi.server_render(helm, claims_api, _claim_sets(case, *sets))
    assert rendered.returncode == 0, rendered.stderr
    assert f'claimName: "{case}"' in rendered.stdout


def test_a_missing_claim_in_a_namespace_not_seen_is_left_to_the_scheduler(helm, claims_api):
    # Neither the claim nor the namespace's default ServiceAccount: as offline, nothing to refuse.
    rendered = stubapi.server_render(helm, claims_api, _claim_sets("absent"), namespace="elsewhere")
    assert rendered.returncode == 0, rendered.stderr


ONE_NODE_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}
            ]
        }
    }
}


def _rwo_claim(tmp_path, workers: dict, **extra) -> str:
    path = tmp_path / "values.yaml"
    values = {"storage": {"type": "createClaim", "createClaim": {"accessModes": ["ReadWriteOnce"]}}, "workers": workers}
    path.write_text(json.dumps({**values, **extra}))
    return str(path)


@pytest.mark.parametrize(
    "workers",
    [{"nodeSelector": {"kubernetes.io/hostname": "n1"}}, {"affinity": ONE_NODE_AFFINITY}],
    ids=["nodeSelector", "affinity"],
)
def test_a_read_write_once_claim_serves_workers_pinned_to_one_node(helm, render, tmp_path, workers):
    objects = render(helm, _rwo_claim(tmp_path, workers))
    assert one(objects, "PersistentVolumeClaim")["spec"]["accessModes"] == ["ReadWriteOnce"]


def _two_nodes() -> dict:
    affinity = json.loads(json.dumps(ONE_NODE_AFFINITY))
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    terms[0]["matchExpressions"][0]["values"] = ["n1", "n2"]
    return {"affinity": affinity}


@pytest.mark.parametrize(
    "workers,extra",
    [
        ({"nodeSelector": {"topology.kubernetes.io/zone": "a"}}, {}),  # a label many nodes share
        (_two_nodes(), {}),
        ({"nodeSelector": {"kubernetes.io/hostname": "n1"}}, {"tensorboard": {"enabled": True}}),  # placed on its own
    ],
    ids=["zone", "two-hostnames", "tensorboard"],
)
def test_a_read_write_once_claim_is_refused_where_its_pods_may_spread(helm, tmp_path, workers, extra):
    error = chartkit.template_error(helm, [_rwo_claim(tmp_path, workers, **extra)])
    assert "storage.createClaim.accessModes=[ReadWriteOnce]: " in error
    assert "pin every worker to one node (workers.nodeSelector kubernetes.io/hostname: <node>" in error


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
