"""The chart's life on a real API server: Pod Security admission, upgrades that must and
must not roll the workers, scaling, uninstall, and the chart as a subchart.

The workers run a sleeping user command here (clusterkit.SLEEPER): these tests are about
what the StatefulSet controller, the scheduler and Helm do with the chart, not training.
"""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from clusterkit import CHART, SLEEPER, all_running, delete_namespace, new_namespace, wait_for

from tfmw.k8s.api import ns_path

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def _sets(*items: str) -> list[str]:
    out = []
    for item in list(SLEEPER) + list(items):
        out += ["--set", item]
    return out


def _install(cluster, namespace, release, *sets, chart=CHART, helm="helm", extra=()):
    wait = "--wait" if helm == "helm3" else "--wait=watcher"
    return cluster.helm(
        "upgrade",
        "--install",
        release,
        str(chart),
        "-n",
        namespace,
        "-f",
        str(CHART.parents[1] / "values" / "local.yaml"),
        *_sets(*sets),
        wait,
        "--timeout",
        "2m",
        *extra,
        helm=helm,
    )


def _uids(pods) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}


def _wait_workers(cluster, namespace, release, count):
    return wait_for(
        lambda: (lambda pods: pods if all_running(pods, count) else None)(cluster.workers(namespace, release)),
        90,
        f"{count} Running workers of {release}",
        describe=lambda: cluster.kubectl("get", "pods,sts,events", "-n", namespace, check=False).stdout,
    )


# The values a GPU cluster needs, each for real: a RuntimeClass (the nodes' runc, under a class
# of its own), common labels and annotations, claim annotations, writable-dir and ephemeral-storage
# limits, an init container filling a volume and a sidecar (the worker image: no registry here),
# one worker per node. All of it under an enforced "restricted" Pod Security level.
RUNTIME_CLASS = "tfmw-runc"
PY = "python"
SIDECAR_SCRIPT = "import time; assert open('/data/fetched').read() \\=\\= 'ok'; time.sleep(86400)"  # --set escapes
CLUSTER_VALUES = (
    f"workers.runtimeClassName={RUNTIME_CLASS}",
    "commonLabels.cost-centre=cc-1234",
    "commonAnnotations.example\\.com/owner=ml-platform",
    "storage.createClaim.annotations.backup\\.example/schedule=daily",
    "writableDirsSizeLimit=1Gi",
    "workers.resources.requests.ephemeral-storage=1Gi",
    "workers.resources.limits.ephemeral-storage=4Gi",
    "workers.podAntiAffinity=hard",
    "workers.extraVolumes[0].name=data",
    "workers.extraVolumes[0].emptyDir.sizeLimit=64Mi",
    "workers.initContainers[0].name=fetch",
    f"workers.initContainers[0].command={{{PY},-c,open('/data/fetched'\\,'w').write('ok')}}",
    "workers.initContainers[0].volumeMounts[0].name=data",
    "workers.initContainers[0].volumeMounts[0].mountPath=/data",
    "workers.sidecars[0].name=shipper",
    f"workers.sidecars[0].command={{{PY},-c,{SIDECAR_SCRIPT}}}",
    "workers.sidecars[0].volumeMounts[0].name=data",
    "workers.sidecars[0].volumeMounts[0].mountPath=/data",
    "workers.sidecars[0].resources.limits.cpu=100m",
    "workers.sidecars[0].resources.limits.memory=64Mi",
)


def test_restricted_namespace_admits_every_pod_the_chart_creates(cluster):
    """Pod Security admission (restricted, enforced by the real API server) admits the
    workers, with every value a GPU cluster needs (an init container and a sidecar among them),
    the TensorBoard Deployment's pod and the `helm test` pod."""
    ns = new_namespace(
        cluster,
        "pss",
        {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"},
    )
    runtime_class = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": RUNTIME_CLASS},
        "handler": "runc",
    }
    cluster.api.create("/apis/node.k8s.io/v1/runtimeclasses", runtime_class)
    image = [f"workers.initContainers[0].image={cluster.image}", f"workers.sidecars[0].image={cluster.image}"]
    try:
        _install(
            cluster,
            ns,
            "pss",
            "storage.type=createClaim",
            "storage.createClaim.size=1Gi",
            "tensorboard.enabled=true",
            *CLUSTER_VALUES,
            *image,
        )
        pods = _wait_workers(cluster, ns, "pss", 2)
        assert len({p["spec"]["nodeName"] for p in pods}) == 2  # one worker per node
        for pod in pods:
            assert pod["spec"]["runtimeClassName"] == RUNTIME_CLASS
            assert pod["metadata"]["labels"]["cost-centre"] == "cc-1234"
            (init,) = pod["status"]["initContainerStatuses"]
            assert init["state"]["terminated"]["exitCode"] == 0
            ready = {c["name"]: c.get("ready") for c in pod["status"]["containerStatuses"]}
            assert ready.get("shipper") is True, pod["status"]["containerStatuses"]  # it read what init wrote
        claim = cluster.api.get(ns_path(ns, "persistentvolumeclaims", "pss-tf-multiworker-shared"))
        assert claim["metadata"]["annotations"]["backup.example/schedule"] == "daily"
        assert claim["metadata"]["annotations"]["example.com/owner"] == "ml-platform"
        tb = wait_for(
            lambda: cluster.pods(ns, "app.kubernetes.io/component=tensorboard"),
            60,
            "the TensorBoard pod to be admitted and created",
        )
        assert tb
        test = cluster.helm("test", "pss", "-n", ns, "--timeout", "2m", "--logs", check=False)
        assert "FailedCreate" not in cluster.kubectl("get", "events", "-n", ns).stdout
        assert "violates PodSecurity" not in test.stdout + test.stderr, test.stderr
        assert test.returncode == 0, test.stdout + test.stderr
        assert "tfmw launcher peers: all 2 reachable after" in test.stdout
    finally:
        delete_namespace(cluster, ns)
        cluster.api.delete(f"/apis/node.k8s.io/v1/runtimeclasses/{RUNTIME_CLASS}")


def test_restricted_namespace_refuses_a_weakened_pod(cluster):
    """The admission really enforces: the same chart with runAsNonRoot off is refused."""
    ns = new_namespace(cluster, "pss-weak", {"pod-security.kubernetes.io/enforce": "restricted"})
    try:
        proc = cluster.helm(
            "upgrade",
            "--install",
            "weak",
            str(CHART),
            "-n",
            ns,
            *_sets(
                "security.allowUnsafe=true",  # the chart itself refuses it otherwise
                "containerSecurityContext.allowPrivilegeEscalation=true",
            ),
            check=False,
        )
        assert proc.returncode == 0, proc.stderr  # the StatefulSet is accepted; its pods are not
        events = wait_for(
            lambda: [e for e in cluster.events(ns) if e.get("reason") == "FailedCreate"],
            60,
            "the StatefulSet controller's FailedCreate event",
        )
        assert "violates PodSecurity" in events[0]["message"]
        assert "allowPrivilegeEscalation" in events[0]["message"]
        assert not cluster.workers(ns, "weak")
    finally:
        delete_namespace(cluster, ns)


def test_chart_version_bump_leaves_running_workers_alone(cluster, namespace, tmp_path):
    _install(cluster, namespace, "bump")
    before = _uids(_wait_workers(cluster, namespace, "bump", 2))
    sts_before = cluster.statefulset(namespace, "bump-tf-multiworker")
    bumped = tmp_path / "tf-multiworker"
    shutil.copytree(CHART, bumped)
    meta = yaml.safe_load((bumped / "Chart.yaml").read_text())
    meta["version"] = "9.9.9"  # the chart only: a new appVersion is a new default image, a real rollout
    (bumped / "Chart.yaml").write_text(yaml.safe_dump(meta))
    _install(cluster, namespace, "bump", chart=bumped)
    sts_after = cluster.statefulset(namespace, "bump-tf-multiworker")
    assert sts_after["metadata"]["labels"]["helm.sh/chart"] == "tf-multiworker-9.9.9"  # the upgrade happened
    assert sts_after["status"]["updateRevision"] == sts_before["status"]["updateRevision"]
    assert sts_after["metadata"]["generation"] == sts_before["metadata"]["generation"]
    assert _uids(cluster.workers(namespace, "bump")) == before


def test_new_run_id_rolls_the_workers(cluster, namespace):
    _install(cluster, namespace, "roll")
    before = _uids(_wait_workers(cluster, namespace, "roll", 2))
    revision = cluster.statefulset(namespace, "roll-tf-multiworker")["status"]["updateRevision"]
    _install(cluster, namespace, "roll", "training.runId=run-2")
    wait_for(
        lambda: (lambda pods: all_running(pods, 2) and not set(_uids(pods).values()) & set(before.values()))(
            cluster.workers(namespace, "roll")
        ),
        120,
        "both workers replaced by the new revision",
    )
    sts = cluster.statefulset(namespace, "roll-tf-multiworker")
    assert sts["status"]["updateRevision"] != revision
    env = {e["name"]: e.get("value") for e in cluster.workers(namespace, "roll")[0]["spec"]["containers"][0]["env"]}
    assert env["TFMW_RUN_ID"] == "run-2"


def test_replicas_change_reaches_the_group_without_replacing_any_worker(cluster, namespace):
    """A resize adds (or removes) pods and leaves the template alone: the running workers are
    not rolled. The chief, the one launcher that watches the group's size, re-forms at it; the
    new worker starts at it. (The others learn of it from the group's stop, which these
    sleeping commands do not share; training groups: tests/e2e/cluster/test_cluster_resize.py.)"""
    _install(cluster, namespace, "scale")
    before = _uids(_wait_workers(cluster, namespace, "scale", 2))
    _install(cluster, namespace, "scale", "workers.replicas=3")
    pods = _wait_workers(cluster, namespace, "scale", 3)
    assert [p["metadata"]["name"] for p in pods] == [f"scale-tf-multiworker-{i}" for i in range(3)]
    assert {name: uid for name, uid in _uids(pods).items() if name in before} == before  # not rolled
    for pod in pods:
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert "TFMW_REPLICAS" not in env  # the size is the StatefulSet's, read by the launcher
    wait_for(
        lambda: "re-forming the group at 3 workers" in cluster.logs(namespace, "scale-tf-multiworker-0"),
        60,
        "the chief to re-form the group at 3 workers",
        describe=lambda: cluster.logs(namespace, "scale-tf-multiworker-0"),
    )
    assert "workers=3" in cluster.logs(namespace, "scale-tf-multiworker-2")
    assert "re-forming" not in cluster.logs(namespace, "scale-tf-multiworker-1")  # it does not poll the size
    hosts = cluster.api.items(ns_path(namespace, "endpointslices", group="discovery.k8s.io/v1"))
    names = {e.get("hostname") for s in hosts for e in s.get("endpoints") or []}
    assert names == {f"scale-tf-multiworker-{i}" for i in range(3)}


def _as_workers(cluster, namespace, release, *args):
    """kubectl ARGS as the release's workers' ServiceAccount (the API server authorizes and
    admits an impersonated request as that account's own)."""
    account = f"system:serviceaccount:{namespace}:{release}-tf-multiworker"
    return cluster.kubectl(*args, "-n", namespace, f"--as={account}", check=False)


def test_admission_policy_holds_the_workers_to_scale_to_zero_and_uninstall_leaves_nothing(cluster, namespace):
    """rbac.admissionPolicy on the real API server (ValidatingAdmissionPolicy v1): the workers'
    account may patch its StatefulSet's scale (RBAC) but only to 0, may not grow it through the
    StatefulSet itself either, and changes only the launcher's keys of its status ConfigMap.
    The uninstall then leaves no pod and none of the cluster-scoped objects."""
    vap = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
    name = f"{namespace}.gone-tf-multiworker"
    policies = [f"{vap}/{name}", f"{vap.replace('policies', 'policybindings')}/{name}"]
    try:
        _install(cluster, namespace, "gone", "rbac.admissionPolicy.enabled=true")
        workers = _wait_workers(cluster, namespace, "gone", 2)
        assert "TFMW_POD_SELECTOR" not in {e["name"] for e in workers[0]["spec"]["containers"][0]["env"]}  # no `list`
        assert all(cluster.api.get_or_none(path) for path in policies)
        sts, status = "statefulset/gone-tf-multiworker", "configmap/gone-tf-multiworker-status"

        def scale(replicas: int):
            patch = json.dumps({"spec": {"replicas": replicas}})  # what the launcher sends (entrypoint/kubeapi.py)
            return _as_workers(
                cluster, namespace, "gone", "patch", sts, "--subresource=scale", "--type=merge", "-p", patch
            )

        grow = scale(3)
        assert grow.returncode != 0, grow.stdout
        assert f"ValidatingAdmissionPolicy '{name}'" in grow.stderr, grow.stderr
        assert "may scale statefulset/gone-tf-multiworker only to 0" in grow.stderr, grow.stderr
        # Through the StatefulSet itself, once RBAC allows it (a Role of the user's own): still refused.
        rbac = "rbac.authorization.k8s.io/v1"
        cluster.api.create(
            ns_path(namespace, "roles", group=rbac),
            {
                "metadata": {"name": "wider"},
                "rules": [{"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "patch"]}],
            },
        )
        cluster.api.create(
            ns_path(namespace, "rolebindings", group=rbac),
            {
                "metadata": {"name": "wider"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "wider"},
                "subjects": [{"kind": "ServiceAccount", "name": "gone-tf-multiworker", "namespace": namespace}],
            },
        )
        whole = wait_for(
            lambda: (lambda p: p if "cannot patch" not in p.stderr else None)(
                _as_workers(cluster, namespace, "gone", "patch", sts, "--type=merge", "-p", '{"spec":{"replicas":3}}')
            ),
            30,
            "the wider Role to take effect",
        )
        assert whole.returncode != 0 and "only to scale it to 0" in whole.stderr, whole.stdout + whole.stderr
        foreign = _as_workers(
            cluster, namespace, "gone", "patch", status, "--type=merge", "-p", '{"data":{"phase":"x","owner":"me"}}'
        )
        assert foreign.returncode != 0, foreign.stdout
        assert "may change only their own keys of configmap/gone-tf-multiworker-status" in foreign.stderr, (
            foreign.stderr
        )
        own = _as_workers(cluster, namespace, "gone", "patch", status, "--type=merge", "-p", '{"data":{"loss":"0.5"}}')
        assert own.returncode == 0, own.stderr
        assert cluster.statefulset(namespace, "gone-tf-multiworker")["spec"]["replicas"] == 2
        stop = scale(0)
        assert stop.returncode == 0, stop.stderr
        wait_for(lambda: not cluster.workers(namespace, "gone"), 60, "the workers scaled to 0 by their own account")

        cluster.helm("uninstall", "gone", "-n", namespace, "--wait=watcher", "--timeout", "2m")
        wait_for(lambda: not cluster.pods(namespace), 60, "every pod of the release to be gone")
        assert cluster.statefulset(namespace, "gone-tf-multiworker") is None
        assert not any(cluster.api.get_or_none(path) for path in policies)  # cluster-scoped: helm's to delete
    finally:  # cluster-scoped: a failed test must not leave them to the session's other tests
        for path in policies:
            if cluster.api.get_or_none(path):
                cluster.api.delete(path)


@pytest.mark.parametrize("helm", ["helm", "helm3"])
def test_chart_as_subchart_of_an_umbrella_with_global_values(cluster, namespace, tmp_path, helm):
    umbrella = tmp_path / "umbrella"
    (umbrella / "charts").mkdir(parents=True)
    shutil.copytree(CHART, umbrella / "charts" / "tf-multiworker")
    (umbrella / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": "umbrella",
                "version": "0.1.0",
                "dependencies": [
                    {"name": "tf-multiworker", "version": yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]}
                ],
            }
        )
    )
    (umbrella / "values.yaml").write_text(
        yaml.safe_dump(
            {
                "global": {"team": "ml", "imageRegistry": "registry.example"},
                "tf-multiworker": {
                    "training": {"command": ["python", "-m", "http.server", "--directory", "/tmp"]},
                    "workers": {"replicas": 2, "port": 8000, "resources": {"requests": {"cpu": "100m"}}},
                    # the image as the nodes hold it (imported: no registry to pull a tag Always from)
                    "image": {"pullPolicy": "IfNotPresent"},
                    # DNS: this cluster's CoreDNS runs on the host, not as kube-dns pods (local.yaml's range)
                    "networkPolicy": {"egress": {"dnsTo": [{"ipBlock": {"cidr": "198.19.0.0/16"}}]}},
                },
            }
        )
    )
    wait = "--wait" if helm == "helm3" else "--wait=watcher"
    cluster.helm("install", "umb", str(umbrella), "-n", namespace, wait, "--timeout", "2m", helm=helm)
    pods = _wait_workers(cluster, namespace, "umb", 2)
    assert [p["metadata"]["name"] for p in pods] == ["umb-tf-multiworker-0", "umb-tf-multiworker-1"]
