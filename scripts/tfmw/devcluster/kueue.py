"""Kueue on the local cluster, installed the way its users install it: its own Helm chart of
the pinned version (scripts/tfmw/devcluster/build_kueue.py builds the manager from the same Go
module and copies the chart beside it), its internal certificate management (no
cert-manager), the `statefulset` and `pod` integrations on, and everything else at the
chart's defaults (WaitForPodsReady included: on by default since Kueue 0.19).

One setting is not the chart's default: Kueue manages only namespaces labelled
`kueue-managed=true` (its documented opt-in namespace management,
`managedJobsNamespaceSelector`). Kueue's pod webhook has `failurePolicy: Fail` and no object
selector, so with the default (every namespace but kube-system and kueue-system) a stopped
Kueue would refuse every pod of every other test sharing the cluster.

How the API server, which runs on the host, reaches Kueue's webhook and its visibility API
(an aggregated API): `--enable-aggregator-routing=true` makes it call a Service's endpoint
(the manager pod's IP) instead of its ClusterIP, which only the nodes' kube-proxy serves;
the host already routes each node's pod subnet to that node (nodes.py); the front-proxy
certificates (pki.py) let the visibility server trust the API server's forwarded requests.

Then the queues the tests and `make cluster KUEUE=1` use: one ResourceFlavor, one
ClusterQueue with CPU, memory and nvidia.com/gpu quota that preempts lower priorities within
it, two WorkloadPriorityClasses, and a LocalQueue per namespace (`local_queue`).

    python -m tfmw.devcluster.kueue install [--state DIR]   (on a running `make cluster`)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

import yaml

from tfmw.chart.helmkit import HelmFailed, ToolError, run_helm
from tfmw.devcluster import controlplane, images, onebinary
from tfmw.devcluster.addoncli import addon_main
from tfmw.devcluster.build import KubeBuildError
from tfmw.devcluster.build_kueue import KUEUE, chart_path
from tfmw.k8s.api import Api, ApiError

NAMESPACE = "kueue-system"
RELEASE = "kueue"
MANAGED_LABEL = {"kueue-managed": "true"}
CLUSTER_QUEUE = "tfmw"
FLAVOR = "default-flavor"
LOCAL_QUEUE = "tfmw"  # in each managed namespace
# The ClusterQueue's quota: three of values/local.yaml's workers (500m, 1Gi each), so one
# 2-worker release fits and a second one waits.
QUOTA = {"cpu": "1500m", "memory": "12Gi", "nvidia.com/gpu": "4"}
PRIORITIES = {"tfmw-low": 100, "tfmw-high": 1000}
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"
INSTALL_TIMEOUT = "5m"


class KueueError(Exception):
    """One line: why Kueue could not be installed."""


def version() -> str:
    """The pinned Kueue release, e.g. v0.19.2."""
    return onebinary.read_pins(KUEUE).version


def image_ref() -> str:
    return f"tfmw.local/kueue:{version()}"


def manager_config() -> str:
    """Kueue's Configuration, as the chart's managerConfig.controllerManagerConfigYaml: the
    chart's own defaults, with the frameworks and the namespace selector set."""
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "managedJobsNamespaceSelector": {"matchLabels": dict(MANAGED_LABEL)},
        "integrations": {"frameworks": ["statefulset", "pod"]},
    }
    return yaml.safe_dump(config, sort_keys=False)


def chart_values(ref: str) -> dict:
    repository, _, tag = ref.rpartition(":")
    return {
        "controllerManager": {
            "manager": {
                "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
                # the chart asks for 500m; the local nodes are small
                "resources": {
                    "requests": {"cpu": "100m", "memory": "256Mi"},
                    "limits": {"cpu": "1", "memory": "512Mi"},
                },
            }
        },
        "managerConfig": {"controllerManagerConfigYaml": manager_config()},
    }


def queue_objects() -> list[tuple[str, dict]]:
    """(collection path, object) for the cluster-wide queueing objects."""
    objects = [
        (
            f"{KUEUE_API}/resourceflavors",
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}},
        ),
        cluster_queue(CLUSTER_QUEUE, FLAVOR, QUOTA, preemption={"withinClusterQueue": "LowerPriority"}),
    ]
    for name, value in PRIORITIES.items():
        objects.append(
            (
                f"{KUEUE_API}/workloadpriorityclasses",
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "WorkloadPriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                    "description": f"tf-multiworker's local cluster: {name}",
                },
            )
        )
    return objects


def cluster_queue(name: str, flavor: str, quota: dict[str, str], preemption: dict | None = None) -> tuple[str, dict]:
    """(collection path, object) of a ClusterQueue `name` for the managed namespaces, with `quota`
    (resource -> nominal quota) of one ResourceFlavor."""
    resources = [{"name": resource, "nominalQuota": amount} for resource, amount in quota.items()]
    spec = {
        "namespaceSelector": {"matchLabels": dict(MANAGED_LABEL)},
        "resourceGroups": [{"coveredResources": list(quota), "flavors": [{"name": flavor, "resources": resources}]}],
    }
    if preemption:
        spec["preemption"] = preemption
    return (
        f"{KUEUE_API}/clusterqueues",
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec},
    )


def topology_queue_objects(
    name: str, levels: list[str], node_labels: dict[str, str], quota: dict[str, str]
) -> list[tuple[str, dict]]:
    """(collection path, object) of a topology-aware queue (Kueue's TAS): a Topology of `levels`
    (node labels, the widest first; kubernetes.io/hostname, when there, last), a ResourceFlavor
    of the nodes with `node_labels` that uses it, and a ClusterQueue `name` with `quota` of that
    flavor for the managed namespaces; each namespace reaches it through a LocalQueue `name`
    (local_queue(namespace, name))."""
    return [
        (
            f"{KUEUE_API}/topologies",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Topology",
                "metadata": {"name": name},
                "spec": {"levels": [{"nodeLabel": label} for label in levels]},
            },
        ),
        (
            f"{KUEUE_API}/resourceflavors",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": name},
                "spec": {"nodeLabels": dict(node_labels), "topologyName": name},
            },
        ),
        cluster_queue(name, name, quota),
    ]


def local_queue(namespace: str, cluster_queue: str = CLUSTER_QUEUE) -> tuple[str, dict]:
    return (
        f"{KUEUE_API}/namespaces/{namespace}/localqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {
                "name": LOCAL_QUEUE if cluster_queue == CLUSTER_QUEUE else cluster_queue,
                "namespace": namespace,
            },
            "spec": {"clusterQueue": cluster_queue},
        },
    )


def manage_namespace(api: Api, namespace: str) -> None:
    """Label `namespace` for Kueue and give it the LocalQueue `tfmw`."""
    api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": dict(MANAGED_LABEL)}})
    api.create_or_keep(*local_queue(namespace))


def _helm(state: controlplane.ClusterState, *args: str, timeout: float = 420) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(state.dir)}
    try:
        run_helm(state.kubeconfig, *args, env=env, timeout=timeout)
    except HelmFailed as err:
        raise KueueError(f"helm {args[0]} of Kueue's chart failed: {err.why}") from None
    except ToolError as err:
        raise KueueError(str(err)) from None


def install(state: controlplane.ClusterState, say=print) -> None:
    """Kueue's manager image into every node, its chart installed (waiting until the manager
    answers its webhooks), then the queueing objects. Idempotent."""
    started = time.monotonic()
    try:
        kueue_dir = onebinary.ensure(KUEUE, progress=say)
    except KubeBuildError as err:
        raise KueueError(str(err)) from None
    ref = image_ref()
    archive = images.one_binary_archive(
        ref, onebinary.binary_path(KUEUE, kueue_dir), "/manager", [], "65532:65532", controlplane.IMAGE_CACHE, "kueue"
    )
    controlplane.load_images(state, [archive], say=say)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=state.dir) as values:
        yaml.safe_dump(chart_values(ref), values)
        values.flush()
        _helm(
            state,
            "upgrade",
            "--install",
            RELEASE,
            str(chart_path(kueue_dir)),
            "--namespace",
            NAMESPACE,
            "--create-namespace",
            "--values",
            values.name,
            "--wait",
            "--timeout",
            INSTALL_TIMEOUT,
        )
    api = state.api()
    _wait_for_webhook(api)
    for path, obj in queue_objects():
        api.create_or_keep(path, obj)
    say(
        f"kueue: {version()} installed in {NAMESPACE} ({time.monotonic() - started:.0f}s); "
        f"ClusterQueue {CLUSTER_QUEUE}, quota {', '.join(f'{k} {v}' for k, v in QUOTA.items())}; "
        f"label a namespace {'='.join(next(iter(MANAGED_LABEL.items())))} and give it LocalQueue {LOCAL_QUEUE}"
    )


def _wait_for_webhook(api: Api, timeout: float = 120) -> None:
    """Until the API server reaches Kueue's webhooks: a dry-run ResourceFlavor create goes
    through the validating webhook (the manager answers only once its certificate is in)."""
    probe = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "tfmw-probe"}}
    deadline, last = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        try:
            api.request("POST", f"{KUEUE_API}/resourceflavors", probe, query={"dryRun": "All"})
            return
        except ApiError as err:
            last = str(err)
        time.sleep(1)
    raise KueueError(f"the API server does not reach Kueue's webhook after {timeout:.0f}s: {last}")


MANAGER_SELECTOR = "control-plane=controller-manager"  # Kueue's chart's manager pods


def restart_manager(api: Api, timeout: float = 120) -> None:
    """Kueue's manager pod deleted, its Deployment's next one Ready and its webhook answering:
    its caches rebuilt from the API server (figure 15 found v0.19.2's topology cache still
    counting the GPUs of a deleted namespace's pods)."""
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    old = {pod["metadata"]["name"] for pod in api.items(pods, labelSelector=MANAGER_SELECTOR)}
    for name in old:
        api.delete(f"{pods}/{name}")

    def ready_new() -> bool:
        now = api.items(pods, labelSelector=MANAGER_SELECTOR)
        return bool(now) and all(
            pod["metadata"]["name"] not in old
            and any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in pod["status"].get("conditions") or []
            )
            for pod in now
        )

    deadline = time.monotonic() + timeout
    while not ready_new():
        if time.monotonic() > deadline:
            raise KueueError(f"Kueue's manager was not Ready again within {timeout:.0f}s of its restart")
        time.sleep(1)
    _wait_for_webhook(api, timeout)


def delete_objects(api: Api, objects: list[tuple[str, dict]], timeout: float = 120) -> None:
    """Delete queueing objects (collection path, object) and wait until they are gone: Kueue's
    manager, still running, holds finalizers on them until nothing uses them."""
    named = [f"{path}/{obj['metadata']['name']}" for path, obj in objects]
    for path in named:
        api.delete(path)
    deadline = time.monotonic() + timeout
    while (left := [path for path in named if api.get_or_none(path)]) and time.monotonic() < deadline:
        time.sleep(1)
    if left:
        raise KueueError(f"Kueue's manager did not release {', '.join(left)} within {timeout:.0f}s")


def uninstall(state: controlplane.ClusterState, timeout: float = 120) -> None:
    """The queueing objects deleted while the manager still runs (it holds finalizers on
    them: with the manager gone first, they and their CRDs would never go), then the chart
    (its CRDs, and every other Kueue object with them)."""
    delete_objects(state.api(), queue_objects(), timeout)
    _helm(state, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", INSTALL_TIMEOUT)


def main(argv: list[str] | None = None) -> int:
    verbs = {"install": install, "uninstall": uninstall}
    errors = (KueueError, ApiError, images.ImageArchiveError, subprocess.TimeoutExpired)
    return addon_main(argv, "kueue", __doc__, verbs, errors)


if __name__ == "__main__":
    sys.exit(main())
