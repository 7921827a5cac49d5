"""Security on by default: PSS restricted on every pod, NetworkPolicy around the gRPC port,
a token-less ServiceAccount without RBAC, and checkov clean."""

from __future__ import annotations

import re

import chartkit
import pytest
from chartkit import ALL_ON, OVERLAYS, RELEASE, find, one, overlay_path, pod_labels, pod_templates

from tfmw.chart import pss

FULLNAME = f"{RELEASE}-tf-multiworker"

# Every values combination whose pods must meet the restricted profile.
VARIANTS = {env: ([overlay_path(env)], ()) for env in OVERLAYS}
VARIANTS["all-on"] = ([ALL_ON], ())
VARIANTS["coscheduling"] = ([overlay_path("prod")], ("scheduling.gang=coscheduling",))
VARIANTS["kueue"] = ([overlay_path("prod")], ("scheduling.gang=kueue", "scheduling.kueue.queueName=q"))
VARIANTS["runai"] = ([overlay_path("prod")], ("scheduling.gang=runai", "scheduling.runai.project=p"))
VARIANTS["object-store"] = (
    [overlay_path("prod")],
    (
        "storage.type=objectStore",
        "storage.objectStore.uri=gs://bucket/tfmw",
        "storage.objectStore.existingSecret=gcs-creds",
        "tensorboard.enabled=true",
    ),
)
VARIANTS["existing-claim"] = (
    [overlay_path("dev")],
    ("storage.type=existingClaim", "storage.existingClaim.claimName=shared", "tensorboard.enabled=true"),
)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_pod_meets_pod_security_restricted(helm, render, variant):
    files, sets = VARIANTS[variant]
    pods = pod_templates(render(helm, *files, sets=sets))
    kinds = {name.split("/")[0] for name, _, _ in pods}
    assert {"StatefulSet", "Pod"} <= kinds  # workers and the helm test pod at least
    violations = pss.all_violations(pods)
    assert not violations, "\n".join(violations)


def test_all_on_renders_every_pod_kind(helm, render):
    pods = pod_templates(render(helm, ALL_ON))
    # the evaluator Job's name ends in a hash of its pod template (templates/evaluator.yaml)
    assert sorted(re.sub(r"-[0-9a-f]{8}$", "-<hash>", name) for name, _, _ in pods) == [
        f"Deployment/{FULLNAME}-tensorboard",
        f"Job/{FULLNAME}-evaluator-<hash>",
        f"Pod/{FULLNAME}-test-peers",
        f"StatefulSet/{FULLNAME}",
    ]


def restricted_pod() -> dict:
    return {
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {"name": "c", "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}
        ],
        "volumes": [{"name": "v", "emptyDir": {}}],
    }


def _set(path: str, value):
    def mutate(spec):
        node = spec
        parts = path.split(".")
        for part in parts[:-1]:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        node[parts[-1]] = value

    return mutate


BREAKS = {
    "host namespaces": _set("hostNetwork", True),
    "HostProcess": _set("securityContext.windowsOptions", {"hostProcess": True}),
    "privileged containers": _set("containers.0.securityContext.privileged", True),
    "host ports": _set("containers.0.ports", [{"containerPort": 1, "hostPort": 80}]),
    "AppArmor": _set("containers.0.securityContext.appArmorProfile", {"type": "Unconfined"}),
    "SELinux": _set("securityContext.seLinuxOptions", {"type": "spc_t"}),
    "/proc mount type": _set("containers.0.securityContext.procMount", "Unmasked"),
    "sysctls": _set("securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}]),
    "volume types": _set("volumes", [{"name": "h", "hostPath": {"path": "/"}}]),
    "privilege escalation": _set("containers.0.securityContext.allowPrivilegeEscalation", True),
    "running as non-root": _set("containers.0.securityContext.runAsNonRoot", False),
    "running as non-root user": _set("containers.0.securityContext.runAsUser", 0),
    "seccomp": _set("securityContext.seccompProfile", {"type": "Unconfined"}),
    "capabilities": _set("containers.0.securityContext.capabilities", {"drop": ["ALL"], "add": ["NET_ADMIN"]}),
}


def test_the_restricted_pod_fixture_passes():
    assert pss.restricted_violations(restricted_pod()) == []


@pytest.mark.parametrize("control", sorted(pss.CONTROLS))
def test_each_pss_control_catches_its_violation(control):
    spec = restricted_pod()
    BREAKS[control](spec)
    violations = pss.restricted_violations(spec)
    assert violations and all(v.startswith(control + ":") for v in violations), violations


def test_pss_apparmor_annotation_is_checked():
    annotations = {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}
    assert pss.restricted_violations(restricted_pod(), annotations)


def selects(selector: dict, labels: dict) -> bool:
    """A LabelSelector with matchLabels only (all the chart uses); {} selects everything."""
    assert set(selector) <= {"matchLabels"}, selector
    return (selector.get("matchLabels") or {}).items() <= labels.items()


def test_networkpolicy_admits_grpc_only_from_the_release(helm, render):
    objects = render(helm, overlay_path("local"))  # CPU workers: gRPC and metrics are their only ports
    sts = one(objects, "StatefulSet")
    worker_labels = pod_labels(sts)
    policies = find(objects, "NetworkPolicy")
    worker_policies = [p for p in policies if selects(p["spec"]["podSelector"], worker_labels)]
    assert [p["metadata"]["name"] for p in worker_policies] == [f"{FULLNAME}-workers"]
    (policy,) = worker_policies
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    rule, metrics_rule = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": 2222, "protocol": "TCP"}]
    assert metrics_rule["ports"] == [{"port": 9090, "protocol": "TCP"}]  # test_metrics_port_* below
    for peer in rule["from"]:
        assert set(peer) == {"podSelector"}  # no namespaceSelector / ipBlock: same namespace only

    def admitted(labels):
        return any(selects(peer["podSelector"], labels) for peer in rule["from"])

    # The peers admitted: this release's workers and its helm test pod ...
    assert admitted(worker_labels) and admitted(pod_labels(one(objects, "Pod")))
    # ... not its TensorBoard or evaluator (they never talk to a worker), nor another release's workers.
    everything = render(helm, overlay_path("local"), sets=("tensorboard.enabled=true", "evaluator.enabled=true"))
    assert not admitted(pod_labels(one(everything, "Deployment")))
    assert not admitted(pod_labels(one(everything, "Job")))
    assert not admitted(dict(worker_labels, **{"app.kubernetes.io/instance": "other"}))


def test_gpu_workers_reach_each_other_on_any_tcp_port_for_nccl(helm, render):
    objects = render(helm, ALL_ON)
    worker_labels = pod_labels(one(objects, "StatefulSet"))
    policy = one(objects, "NetworkPolicy", f"{FULLNAME}-workers")
    grpc_rule, _metrics_rule, nccl_rule = policy["spec"]["ingress"]
    assert grpc_rule["ports"] == [{"port": 2222, "protocol": "TCP"}]
    assert nccl_rule["ports"] == [{"protocol": "TCP"}]
    (peer,) = nccl_rule["from"]
    assert selects(peer["podSelector"], worker_labels)
    # Only workers: the test pod (and TensorBoard) still reach nothing but gRPC.
    assert not selects(peer["podSelector"], pod_labels(one(objects, "Pod")))
    assert policy["spec"]["egress"][0]["ports"] == [{"protocol": "TCP"}]


def test_metrics_port_admits_metrics_from_or_the_namespace_and_nothing_else(helm, render):
    def metrics_rules(*sets):
        policy = one(render(helm, overlay_path("local"), sets=sets), "NetworkPolicy", f"{FULLNAME}-workers")
        return [r for r in policy["spec"]["ingress"] if {"port": 9090, "protocol": "TCP"} in r.get("ports", [])]

    (default,) = metrics_rules()
    assert default["from"] == [{"podSelector": {}}] and default["ports"] == [{"port": 9090, "protocol": "TCP"}]
    prometheus = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
    (chosen,) = metrics_rules(
        "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring",
        "networkPolicy.metricsFrom[0].podSelector.matchLabels.app\\.kubernetes\\.io/name=prometheus",
    )
    assert chosen["from"] == [prometheus]
    assert metrics_rules("metrics.enabled=false") == []


def test_every_pod_is_covered_by_a_networkpolicy(helm, render):
    objects = render(helm, ALL_ON)
    policies = find(objects, "NetworkPolicy")
    for obj in objects:
        if obj["kind"] in ("StatefulSet", "Deployment", "Job", "Pod"):
            labels = pod_labels(obj)
            assert any(selects(p["spec"]["podSelector"], labels) for p in policies), obj["kind"]


def test_egress_is_restricted_to_peers_dns_and_extra_rules(helm, render):
    objects = render(helm, ALL_ON, sets=("workers.gpus=0",))
    policy = one(objects, "NetworkPolicy", f"{FULLNAME}-workers")
    egress = policy["spec"]["egress"]
    to_workers, dns, extra, api_server = egress
    assert to_workers["ports"] == [{"port": 2222, "protocol": "TCP"}]
    assert selects(to_workers["to"][0]["podSelector"], pod_labels(one(objects, "StatefulSet")))
    assert {p["port"] for p in dns["ports"]} == {53}
    assert dns["to"] == [  # the cluster DNS only (networkPolicy.egress.dnsTo), not any address
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ]
    assert extra["ports"] == [{"port": 443, "protocol": "TCP"}]
    # API access is on by default (completion: scaleToZero); offline (no lookup) and not
    # required, the API server's ports (test_chart_network_policy: found at install, required).
    assert api_server == {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]}
    test_policy = one(objects, "NetworkPolicy", f"{FULLNAME}-test")
    assert test_policy["spec"]["ingress"] == []
    assert not any(rule["ports"][0]["port"] in (443, 6443) for rule in test_policy["spec"]["egress"])


def test_only_workers_with_api_access_reach_the_api_server(helm, render):
    def worker_egress(*sets):
        objects = render(helm, sets=("workers.gpus=0", *sets))
        return one(objects, "NetworkPolicy", f"{FULLNAME}-workers")["spec"]["egress"]

    narrowed = worker_egress(
        "networkPolicy.egress.apiServer.ports={6443}", "networkPolicy.egress.apiServer.to[0].ipBlock.cidr=10.0.0.1/32"
    )
    assert narrowed[-1] == {"ports": [{"port": 6443, "protocol": "TCP"}], "to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}]}
    idle = worker_egress("completion.onSuccess=idle", "completion.onFailure=idle")
    assert len(idle) == 2  # workers and DNS only
    assert not any(p.get("port") in (443, 6443) for rule in idle for p in rule["ports"])


def test_egress_unrestricted_and_policies_off_are_switches(helm, render):
    objects = render(helm, sets=("networkPolicy.egress.restrict=false",))
    policy = one(objects, "NetworkPolicy", f"{FULLNAME}-workers")
    assert policy["spec"]["policyTypes"] == ["Ingress"] and "egress" not in policy["spec"]
    assert not find(render(helm, sets=("networkPolicy.enabled=false",)), "NetworkPolicy")


def test_tensorboard_policy_default_is_the_namespace(helm, render):
    objects = render(helm, overlay_path("staging"), sets=("tensorboard.enabled=true",))
    policy = one(objects, "NetworkPolicy", f"{FULLNAME}-tensorboard")
    assert policy["spec"]["ingress"][0]["from"] == [{"podSelector": {}}]
    assert policy["spec"]["ingress"][0]["ports"] == [{"port": 6006, "protocol": "TCP"}]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_service_account_without_token_and_namespaced_rbac_only(helm, render, variant):
    files, sets = VARIANTS[variant]
    objects = render(helm, *files, sets=sets)
    # The workers' account, and the evaluator's own when it has API access (evaluator-rbac.yaml).
    accounts = {a["metadata"]["name"]: a for a in find(objects, "ServiceAccount")}
    sa = accounts.pop(FULLNAME)
    assert list(accounts) in ([], [f"{FULLNAME}-evaluator"])
    for account in [sa, *accounts.values()]:
        assert account["automountServiceAccountToken"] is False
    for name, spec, _ in pod_templates(objects):
        expected = f"{FULLNAME}-evaluator" if name.startswith("Job/") and accounts else sa["metadata"]["name"]
        assert spec["serviceAccountName"] == expected, name
        assert spec["automountServiceAccountToken"] is False, name
        assert spec["enableServiceLinks"] is False, name
    kinds = {o["kind"] for o in objects}
    # The completion Role (test_chart_completion.py) is namespaced: never cluster-wide RBAC.
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}
    bindings = {b["metadata"]["name"]: b for b in find(objects, "RoleBinding")}
    assert bindings[FULLNAME]["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": chartkit.NAMESPACE}
    ]
    for name, binding in bindings.items():  # each account is bound to its own Role only
        assert binding["roleRef"]["name"] == name and binding["subjects"][0]["name"] == name


def test_non_worker_pods_are_not_claimed_by_the_statefulset(helm, render):
    objects = render(helm, ALL_ON)
    sts_selector = one(objects, "StatefulSet")["spec"]["selector"]
    svc_selector = {"matchLabels": one(objects, "Service", FULLNAME)["spec"]["selector"]}
    for obj in find(objects, "Pod") + find(objects, "Deployment") + find(objects, "Job"):
        assert not selects(sts_selector, pod_labels(obj)), obj["metadata"]["name"]
        assert not selects(svc_selector, pod_labels(obj)), obj["metadata"]["name"]


def test_read_only_root_has_writable_scratch(helm, render):
    for name, spec, _ in pod_templates(render(helm, ALL_ON)):
        for container in spec["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            assert {"/tmp", "/home/tfmw"} <= mounts, name
