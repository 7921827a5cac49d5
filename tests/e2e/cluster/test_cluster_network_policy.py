"""The chart's NetworkPolicies on the real cluster, whose nodes enforce them (kube-router's
network policy controller, ingress and egress): the unauthenticated gRPC port answers the
release's workers and its `helm test` pod only; metrics and TensorBoard answer only what
networkPolicy.metricsFrom / tensorboardFrom allow; the workers' egress reaches the cluster DNS
(networkPolicy.egress.dnsTo: here CoreDNS on the host's bridge address), their peers, the API
server at the endpoint addresses Helm found at install, and extraRules, nothing else: not a
server of the test's own on 443, 6443 or 53, ports the egress once allowed to any address.
Every probe is a real TCP connect from a real pod; a refusal is asserted only once the same
port has answered someone, so "closed" never means "not listening yet"."""

from __future__ import annotations

import json

import pytest
from clusterkit import CHART, REPO, delete_namespace, new_namespace, wait_for

from tfmw.k8s.api import ns_path

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

RELEASE = "np"
WORKER_LABELS = {
    "app.kubernetes.io/name": "tf-multiworker",
    "app.kubernetes.io/instance": RELEASE,
    "app.kubernetes.io/component": "worker",
}
PROBE = """
import socket, sys
s = socket.socket()
s.settimeout(3)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("open")
except OSError as e:
    print("closed", type(e).__name__)
"""


def _probe_pod(cluster, namespace: str, name: str, labels: dict) -> None:
    """A pod of the worker image serving HTTP on 8080 (a target for egress), under `labels`."""
    cluster.api.create(
        ns_path(namespace, "pods"),
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "automountServiceAccountToken": False,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "probe",
                        "image": cluster.image,
                        "imagePullPolicy": "Never",
                        "command": ["python3", "-m", "http.server", "8080"],
                        "workingDir": "/tmp",
                    }
                ],
            },
        },
    )


# Listens on the ports egress used to allow anywhere (the API server's 443 and 6443, DNS's 53):
# what a worker must not reach. The sysctl (a safe one) lets it bind them without root.
SINK = """
import socket, threading
def serve(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("", port))
    s.listen(64)
    while True:
        s.accept()[0].close()
for port in (53, 443, 6443):
    threading.Thread(target=serve, args=(port,)).start()
"""


def _sink_pod(cluster, namespace: str) -> None:
    cluster.api.create(
        ns_path(namespace, "pods"),
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "sink", "labels": {"role": "sink"}},
            "spec": {
                "automountServiceAccountToken": False,
                "terminationGracePeriodSeconds": 0,
                "securityContext": {"sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]},
                "containers": [
                    {
                        "name": "probe",
                        "image": cluster.image,
                        "imagePullPolicy": "Never",
                        "command": ["python3", "-c", SINK],
                    }
                ],
            },
        },
    )


def _ip(cluster, namespace: str, pod: str) -> str:
    return cluster.api.get(ns_path(namespace, "pods", pod))["status"]["podIP"]


def _connect(cluster, namespace: str, pod: str, host: str, port: int, container: str = "probe") -> str:
    out = cluster.kubectl(
        "exec", "-n", namespace, pod, "-c", container, "--", "python3", "-c", PROBE, host, str(port), check=False
    )
    return (out.stdout.strip() or out.stderr.strip()).split("\n")[-1]


def test_the_chart_policies_are_enforced_ingress_and_egress(cluster, namespace):
    other_ns = new_namespace(cluster, "t-np-other")
    try:
        _check_policies(cluster, namespace, other_ns)
    finally:
        delete_namespace(cluster, other_ns)


def _check_policies(cluster, ns: str, other_ns: str) -> None:
    args = ["install", RELEASE, str(CHART), "-n", ns, "-f", str(REPO / "values" / "local.yaml")]
    for item in (
        "training.config.steps=100000",  # trains for the whole test: the gRPC port stays open
        "tensorboard.enabled=true",
        "networkPolicy.metricsFrom[0].podSelector.matchLabels.role=scraper",
        "networkPolicy.tensorboardFrom[0].podSelector.matchLabels.role=viewer",
        "networkPolicy.egress.extraRules[0].to[0].podSelector.matchLabels.role=store",
        "networkPolicy.egress.extraRules[0].ports[0].port=8080",
        "networkPolicy.egress.apiServer.required=true",  # found by lookup at install, so not refused
    ):
        args += ["--set", item]
    # CoreDNS runs on the host, on the bridge address: exactly that address, not local.yaml's
    # range (--set-json replaces the list; --set dnsTo[0]... would merge into local.yaml's first peer)
    dns = [{"ipBlock": {"cidr": f"{cluster.state.address}/32"}}]
    args += ["--set-json", f"networkPolicy.egress.dnsTo={json.dumps(dns)}"]
    cluster.helm(*args)
    test_labels = {**WORKER_LABELS, "app.kubernetes.io/component": "test"}  # the `helm test` pod's
    other_release = {**WORKER_LABELS, "app.kubernetes.io/instance": "np-other"}
    for name, labels in {
        "tester": test_labels,
        "other-release": other_release,
        "scraper": {"role": "scraper"},
        "viewer": {"role": "viewer"},
        "store": {"role": "store"},
    }.items():
        _probe_pod(cluster, ns, name, labels)
    _probe_pod(cluster, other_ns, "outsider", WORKER_LABELS)  # a worker's labels, in another namespace
    _sink_pod(cluster, other_ns)

    def describe():
        return cluster.kubectl("get", "pods,networkpolicies", "-n", ns, "-o", "wide", check=False).stdout

    wait_for(
        lambda: (
            sum((p.get("status") or {}).get("phase") == "Running" for p in cluster.pods(ns)) == 8
            and sum((p.get("status") or {}).get("phase") == "Running" for p in cluster.pods(other_ns)) == 2
        ),
        240,
        "the workers, TensorBoard and the probe pods Running",
        describe=describe,
    )
    worker0, worker1 = f"{RELEASE}-tf-multiworker-0", f"{RELEASE}-tf-multiworker-1"
    w0 = _ip(cluster, ns, worker0)
    tensorboard = next(
        p for p in cluster.pods(ns) if p["metadata"]["labels"].get("app.kubernetes.io/component") == "tensorboard"
    )
    tb = tensorboard["status"]["podIP"]

    # gRPC: the release's workers and its test pod, once the group's servers listen ...
    wait_for(lambda: _connect(cluster, ns, "tester", w0, 2222) == "open", 240, "worker 0's gRPC port to answer")
    assert _connect(cluster, ns, worker1, w0, 2222, container="worker") == "open"
    # ... and nobody else: another release's worker here, a worker's labels in another namespace.
    assert _connect(cluster, ns, "other-release", w0, 2222).startswith("closed")
    assert _connect(cluster, other_ns, "outsider", w0, 2222).startswith("closed")

    # metrics: networkPolicy.metricsFrom only
    wait_for(lambda: _connect(cluster, ns, "scraper", w0, 9090) == "open", 120, "worker 0's metrics port")
    assert _connect(cluster, ns, "other-release", w0, 9090).startswith("closed")
    assert _connect(cluster, ns, "viewer", w0, 9090).startswith("closed")

    # TensorBoard: networkPolicy.tensorboardFrom only
    wait_for(lambda: _connect(cluster, ns, "viewer", tb, 6006) == "open", 240, "TensorBoard to answer")
    assert _connect(cluster, ns, "scraper", tb, 6006).startswith("closed")

    # The workers' egress: DNS, the API server (the `kubernetes` Service), extraRules (the store
    # on 8080), and nothing else, though every target below listens.
    store, other = _ip(cluster, ns, "store"), _ip(cluster, ns, "other-release")
    outsider = _ip(cluster, other_ns, "outsider")
    assert _connect(cluster, ns, "scraper", other, 8080) == "open"  # it listens, for anyone unrestricted
    assert _connect(cluster, ns, "scraper", outsider, 8080) == "open"
    resolve = cluster.kubectl(
        "exec",
        "-n",
        ns,
        worker0,
        "-c",
        "worker",
        "--",
        "python3",
        "-c",
        "import socket; print(socket.gethostbyname('kubernetes.default.svc.cluster.local'))",
        check=False,
    )
    api_ip = resolve.stdout.strip()
    assert resolve.returncode == 0 and api_ip.count(".") == 3, resolve.stderr
    assert _connect(cluster, ns, worker0, api_ip, 443, container="worker") == "open"
    assert _connect(cluster, ns, worker0, store, 8080, container="worker") == "open"
    assert _connect(cluster, ns, worker0, other, 8080, container="worker").startswith("closed")
    assert _connect(cluster, ns, worker0, outsider, 8080, container="worker").startswith("closed")
    assert _connect(cluster, ns, worker0, tb, 6006, container="worker").startswith("closed")

    # The API server by the addresses Helm looked up at install (the `kubernetes` Service's
    # EndpointSlice: the bridge address), not by port alone ...
    policy = cluster.api.get(
        ns_path(ns, "networkpolicies", f"{RELEASE}-tf-multiworker-workers", group="networking.k8s.io/v1")
    )
    egress = policy["spec"]["egress"]
    bridge = [{"ipBlock": {"cidr": f"{cluster.state.address}/32"}}]
    assert all("to" in rule for rule in egress), egress  # no rule to any address
    dns, api = ([r for r in egress if r["to"] == bridge and (r["ports"][0]["port"] == 53) == d] for d in (True, False))
    assert len(dns) == 1 and len(api) == 1, egress
    # ... so a server of our own on the API server's ports, or on DNS's, is out of reach, though
    # it answers a pod whose egress is open.
    sink = _ip(cluster, other_ns, "sink")
    for port in (443, 6443, 53):
        assert _connect(cluster, ns, "scraper", sink, port) == "open", port
        assert _connect(cluster, ns, worker0, sink, port, container="worker").startswith("closed"), port
