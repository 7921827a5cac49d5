"""The contract between chart and entrypoint: the rendered pod spec is the only interface.

Render the chart for several replica counts and overlays, take the worker container's
command and env from the rendered StatefulSet, resolve the downward-API fields as the
kubelet would for each pod `<sts>-<i>`, run the real `python -m entrypoint tf-config`
with exactly that env, and check every address against the rendered StatefulSet name,
headless Service name and port. Where the workers have API access, the chart leaves the
group's size to the API: a real HTTPS server (fakeapi) answers the StatefulSet's scale with
the rendered spec.replicas, as the API server would.
"""

from __future__ import annotations

import json
import subprocess
import sys

import chartkit
import pytest

from tfmw.devcluster.fakeapi import FakeAPI, make_certificate

NAMESPACE = chartkit.NAMESPACE


def kubelet_env(container: dict, pod_name: str, namespace: str) -> dict[str, str]:
    """The env a kubelet gives the container (only what the chart may use: literal values
    and metadata fieldRefs; anything else is a contract change and fails here). The
    StatefulSet controller labels each pod `controller-revision-hash=<sts>-<hash>`."""
    statefulset = pod_name.rsplit("-", 1)[0]
    env = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
            continue
        field = item["valueFrom"]["fieldRef"]["fieldPath"]
        env[item["name"]] = {
            "metadata.name": pod_name,
            "metadata.namespace": namespace,
            "metadata.uid": "6c1f0d2e-2b7a-4c55-9d0e-3f4a5b6c7d8e",
            "metadata.labels['controller-revision-hash']": f"{statefulset}-5d4c7b9f8",
        }[field]
    return env


@pytest.fixture
def api_server(tmp_path):
    """serve(sts) -> the env that points the launcher at an API server answering sts's scale."""
    servers = []

    def serve(sts: dict) -> dict[str, str]:
        cert, key = make_certificate(tmp_path / f"tls-{len(servers)}")
        fake = FakeAPI(
            api_dir=tmp_path / f"api-{len(servers)}",
            cert=cert,
            key=key,
            namespace=NAMESPACE,
            replicas={sts["metadata"]["name"]: sts["spec"]["replicas"]},
        )
        servers.append(fake)
        return fake.env()

    yield serve
    for server in servers:
        server.close()


def pod_env(container: dict, pod_name: str, sts: dict, api_server) -> dict[str, str]:
    """kubelet_env, and where the pod has API access, an API server that knows its StatefulSet."""
    env = kubelet_env(container, pod_name, NAMESPACE)
    if "TFMW_API_DIR" in env:
        env.update(api_server(sts))
    return env


def worker_parts(objects: list[dict]) -> tuple[dict, dict, dict]:
    (sts,) = [o for o in objects if o["kind"] == "StatefulSet"]
    (svc,) = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == sts["spec"]["serviceName"]]
    container = sts["spec"]["template"]["spec"]["containers"][0]
    return sts, svc, container


@pytest.mark.parametrize("env_name,replicas", [("local", 1), ("local", 2), ("dev", 3), ("prod", 7)])
def test_entrypoint_derives_addresses_of_rendered_objects(render, api_server, env_name, replicas):
    objects = render(chartkit.helm4(), chartkit.overlay_path(env_name), sets=(f"workers.replicas={replicas}",))
    sts, svc, container = worker_parts(objects)
    assert sts["spec"]["replicas"] == replicas
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    (grpc,) = [p for p in svc["spec"]["ports"] if p["name"] == "grpc"]
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container_ports["grpc"] == grpc["port"]
    # The launcher is what the container runs, the training command comes after `--`.
    assert container["command"] == ["python", "-m", "entrypoint", "run", "--"]

    name, service, port = sts["metadata"]["name"], svc["metadata"]["name"], grpc["port"]
    expected = [f"{name}-{j}.{service}.{NAMESPACE}.svc.cluster.local:{port}" for j in range(replicas)]
    api_env = api_server(sts) if any(e["name"] == "TFMW_API_DIR" for e in container["env"]) else {}
    for ordinal in range(replicas):
        env = {**kubelet_env(container, f"{name}-{ordinal}", NAMESPACE), **api_env}
        proc = subprocess.run(
            [sys.executable, "-m", "entrypoint", "tf-config"], env=env, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        tf_config = json.loads(proc.stdout)
        assert tf_config == {"cluster": {"worker": expected}, "task": {"type": "worker", "index": ordinal}}


def test_cluster_domain_value_reaches_the_addresses(render, api_server):
    objects = render(
        chartkit.helm4(), chartkit.overlay_path("local"), sets=("clusterDomain=corp.internal", "workers.port=3333")
    )
    sts, svc, container = worker_parts(objects)
    env = pod_env(container, f"{sts['metadata']['name']}-1", sts, api_server)
    proc = subprocess.run(
        [sys.executable, "-m", "entrypoint", "tf-config"], env=env, capture_output=True, text=True, timeout=60
    )
    workers = json.loads(proc.stdout)["cluster"]["worker"]
    assert workers[1] == f"{sts['metadata']['name']}-1.{svc['metadata']['name']}.{NAMESPACE}.svc.corp.internal:3333"


@pytest.mark.parametrize(
    "sets,refusal",
    [
        ((), "is not below the group's size 2 (statefulset"),  # the size from the API
        (("completion.onSuccess=idle", "completion.onFailure=idle"), "is not below TFMW_REPLICAS=2"),  # no API access
    ],
)
def test_launcher_refuses_a_pod_beyond_the_rendered_replicas(render, api_server, sets, refusal):
    objects = render(chartkit.helm4(), chartkit.overlay_path("local"), sets=sets)
    sts, _, container = worker_parts(objects)
    env = pod_env(container, f"{sts['metadata']['name']}-{sts['spec']['replicas']}", sts, api_server)
    proc = subprocess.run(
        [sys.executable, "-m", "entrypoint", "tf-config"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert refusal in proc.stderr and "\n" not in proc.stderr.strip()


def test_only_a_chart_without_api_access_puts_the_group_size_in_the_pod_template(render):
    """With API access a workers.replicas change must not change the pod template (that would
    roll every worker, one at a time): the launchers read the size from the StatefulSet."""
    for sets, in_template in (((), False), (("completion.onSuccess=idle", "completion.onFailure=idle"), True)):
        objects = render(chartkit.helm4(), chartkit.overlay_path("local"), sets=sets)
        _, _, container = worker_parts(objects)
        assert any(e["name"] == "TFMW_REPLICAS" for e in container["env"]) is in_template
    two, three = (
        worker_parts(render(chartkit.helm4(), chartkit.overlay_path("local"), sets=(f"workers.replicas={n}",)))[0]
        for n in (2, 3)
    )
    assert two["spec"]["template"] == three["spec"]["template"]
