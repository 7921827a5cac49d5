"""The workers' Role grants what the launcher asks for and no more (entrypoint/kubeapi.py), each
right behind the value of its feature (rbac.scale, rbac.events, rbac.pods.*), the launcher told
what is left out (TFMW_RBAC_OFF); and the optional ValidatingAdmissionPolicy (rbac.admissionPolicy)
that holds the workers to a scale to 0 and their own status keys, where RBAC cannot."""

from __future__ import annotations

import json
import re

import chartkit
import pytest
from chartkit import NAMESPACE, RELEASE, env_of, find, one

from entrypoint.lifecycle import STATUS_KEYS
from entrypoint.settings import RBAC_RIGHTS, rbac_off
from entrypoint.training import sidecar
from tfmw.chart import helmkit

FULLNAME = f"{RELEASE}-tf-multiworker"
STATUS = f"{FULLNAME}-status"

SHARED = ("storage.type=createClaim",)
VAP = "ValidatingAdmissionPolicy"
# What `helm install` learns from a cluster's discovery ("group/version/Kind"); an offline render has none.
ONLINE = ("apps/v1/StatefulSet",)
SERVED = (*ONLINE, "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy")
POLICY_ON = ("rbac.admissionPolicy.enabled=true",)


def rules(objects) -> dict[tuple[str, ...], dict]:
    """The Role's rules by resources (each resource appears in one rule, `list` in its own)."""
    out = {}
    for rule in one(objects, "Role", FULLNAME)["rules"]:
        key = tuple(rule["resources"]) + (("list",) if rule["verbs"] == ["list"] else ())
        assert key not in out
        out[key] = rule
    return out


def worker_container(objects) -> dict:
    spec = one(objects, "StatefulSet")["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] if c["name"] == "worker")


def refusal_lines(error: str) -> list[str]:
    """The chart's problems in helm's error, one per line (helm's own prefix and hints dropped)."""
    lines = [line for line in error.strip().splitlines() if line.strip() and not line.startswith("Use --debug")]
    prefix = "Error: execution error at (tf-multiworker/templates/statefulset.yaml:1:4): "
    assert lines[0].startswith(prefix), error
    return [lines[0][len(prefix) :], *lines[1:]]


def worker_env(objects) -> dict[str, str]:
    return {name: item.get("value") for name, item in env_of(worker_container(objects)).items()}


def template(helm, sets=(), api_versions=(), kube_version=None):
    """helm template with the cluster's capabilities as given (what `helm install` learns from it)."""
    args = ["template", RELEASE, str(chartkit.CHART), "--namespace", NAMESPACE]
    for item in sets:
        args += ["--set", item]
    for version in api_versions:
        args += ["--api-versions", version]
    if kube_version:
        args += ["--kube-version", kube_version]
    return chartkit.run_helm(helm, args)


def objects_of(result) -> list[dict]:
    assert result.returncode == 0, result.stderr
    return helmkit.parse_manifests(result.stdout)


# -- the Role, right by right ------------------------------------------------------------------


def test_default_role_has_no_list_and_the_chief_reads_its_peers_by_name(helm, render):
    objects = render(helm)
    assert set(rules(objects)) == {("statefulsets/scale",), ("configmaps",), ("events",), ("pods",)}
    env = worker_env(objects)
    assert "TFMW_POD_SELECTOR" not in env  # no selector: entrypoint/peerwatch.py reads by name
    assert "TFMW_RBAC_OFF" not in env  # every right the launcher uses by default is there


def test_pods_list_is_an_opt_in_with_the_selector(helm, render):
    objects = render(helm, sets=("rbac.pods.list=true",))
    assert rules(objects)[("pods", "list")] == {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}
    assert worker_env(objects)["TFMW_POD_SELECTOR"] == (
        f"app.kubernetes.io/component=worker,app.kubernetes.io/instance={RELEASE},app.kubernetes.io/name=tf-multiworker"
    )


@pytest.mark.parametrize(
    "sets,resources,verbs,off",
    [
        (("rbac.events=false",), ("events",), None, "events"),
        (("rbac.pods.delete=false",), ("pods",), ["get"], "pods.delete"),
        (("rbac.pods.get=false", "rbac.pods.delete=false"), ("pods",), None, "pods.get,pods.delete"),
        (("rbac.scale=false", "completion.onFailure=idle"), ("statefulsets/scale",), ["get"], None),
    ],
    ids=["events", "pods-delete", "pods-get", "scale"],
)
def test_each_right_goes_with_its_value_and_the_launcher_is_told(helm, render, sets, resources, verbs, off):
    objects = render(helm, sets=sets)
    got = rules(objects)
    if verbs is None:
        assert resources not in got
    else:
        assert got[resources]["verbs"] == verbs
        assert got[resources].get("resourceNames")  # still by name
    env = worker_env(objects)
    assert env.get("TFMW_RBAC_OFF") == off
    if off:
        assert rbac_off({"TFMW_RBAC_OFF": off}) == set(off.split(",")) <= set(RBAC_RIGHTS)
    # the run's record and the group's size are always there
    assert got[("configmaps",)]["verbs"] == ["get", "patch"]
    assert "get" in got[("statefulsets/scale",)]["verbs"]


def test_without_the_scale_both_actions_idle_and_the_status_is_still_recorded(helm, render):
    """rbac.scale=false is API access without the patch: status, Events, a resize; onSuccess
    auto is idle, since the workers cannot scale."""
    objects = render(helm, sets=("rbac.scale=false", "completion.onFailure=idle", *SHARED))
    env = worker_env(objects)
    assert env["TFMW_ON_SUCCESS"] == env["TFMW_ON_FAILURE"] == "idle"
    assert env["TFMW_API_DIR"] and env["TFMW_STATUS_CONFIGMAP"] == STATUS
    assert "TFMW_REPLICAS" not in env  # the size is read from the StatefulSet
    assert rules(objects)[("statefulsets/scale",)]["verbs"] == ["get"]


# -- refusals ------------------------------------------------------------------------------------

RBAC_REFUSALS = {
    "scale-off-with-scale-on-failure": (
        ("rbac.scale=false",),
        [
            "completion.onFailure=scaleToZero needs rbac.scale=true (the Role's patch on statefulsets/scale): "
            "set rbac.scale=true or completion.onFailure=idle"
        ],
    ),
    "scale-off-with-scale-on-success": (
        ("rbac.scale=false", "completion.onFailure=idle", "completion.onSuccess=scaleToZero", *SHARED),
        [
            "completion.onSuccess=scaleToZero needs rbac.scale=true (the Role's patch on statefulsets/scale): "
            "set rbac.scale=true or completion.onSuccess=idle"
        ],
    ),
    "delete-without-get": (
        ("rbac.pods.get=false",),
        [
            "rbac.pods.delete=true needs rbac.pods.get=true: a survivor deletes only a peer it has read and "
            "found lost with its node; set rbac.pods.get=true or rbac.pods.delete=false"
        ],
    ),
    "list-without-get": (
        ("rbac.pods.get=false", "rbac.pods.delete=false", "rbac.pods.list=true"),
        [
            "rbac.pods.list=true needs rbac.pods.get=true: a list reads every pod of the namespace, more than "
            "get by name; set rbac.pods.get=true or rbac.pods.list=false"
        ],
    ),
    "policy-without-api-access": (
        (*POLICY_ON, "completion.onSuccess=idle", "completion.onFailure=idle"),
        [
            "rbac.admissionPolicy.enabled=true guards the workers' API access, which is off (rbac.create=false, "
            "or both completion actions idle): set rbac.admissionPolicy.enabled=false"
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(RBAC_REFUSALS))
def test_rbac_refusal_is_one_line_naming_the_key(helm, case):
    sets, expected = RBAC_REFUSALS[case]
    assert refusal_lines(chartkit.template_error(helm, sets=sets)) == expected


@pytest.mark.parametrize(
    "api_versions,kube_version",
    [(ONLINE, None), (SERVED, "1.29.0"), ((), "1.29.0")],
    ids=["cluster-without-it", "kubernetes-1.29", "offline-for-1.29"],
)
def test_the_policy_where_the_api_server_does_not_serve_it_is_refused_in_one_line(helm, api_versions, kube_version):
    result = template(helm, POLICY_ON, api_versions, kube_version)
    assert result.returncode != 0
    (line,) = refusal_lines(result.stderr)
    version = kube_version or r"[0-9.]+"
    assert re.fullmatch(
        "rbac.admissionPolicy.enabled=true needs admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy "
        rf"\(Kubernetes 1.30\+\), which the cluster \(Kubernetes v{version}\) does not serve: set "
        r"rbac.admissionPolicy.enabled=false",
        line,
    ), line


def test_an_offline_render_cannot_know_and_leaves_it_to_the_install(helm):
    """helm template (and make template/deploy's checks before installing) knows no served kind:
    the policy renders for a Kubernetes version that has it; `helm install` then checks the
    cluster's discovery (the refusal above)."""
    objects = objects_of(template(helm, POLICY_ON))
    assert one(objects, VAP) and one(objects, f"{VAP}Binding")


# -- the admission policy --------------------------------------------------------------------------


def test_the_policy_is_off_by_default_and_never_rendered_then(helm, render):
    assert not find(render(helm), VAP) and not find(render(helm), f"{VAP}Binding")
    assert not find(objects_of(template(helm, (), SERVED)), VAP)  # served, but not asked for


def policy(helm, *sets) -> tuple[dict, dict]:
    objects = objects_of(template(helm, (*POLICY_ON, *sets), SERVED))
    return one(objects, VAP), one(objects, f"{VAP}Binding")


def test_the_policy_matches_the_releases_accounts_and_objects_in_its_namespace_only(helm):
    vap, binding = policy(helm)
    name = f"{NAMESPACE}.{FULLNAME}"
    assert vap["metadata"]["name"] == binding["metadata"]["name"] == binding["spec"]["policyName"] == name
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"] == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}
    }
    spec = vap["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["apps"],
            "apiVersions": ["*"],
            "operations": ["UPDATE"],
            "resources": ["statefulsets", "statefulsets/scale"],
            "resourceNames": [FULLNAME],
        },
        {
            "apiGroups": [""],
            "apiVersions": ["*"],
            "operations": ["UPDATE"],
            "resources": ["configmaps"],
            "resourceNames": [STATUS],
        },
    ]
    worker = f"system:serviceaccount:{NAMESPACE}:{FULLNAME}"
    assert spec["matchConditions"] == [
        {"name": "the-release-service-accounts", "expression": f"request.userInfo.username in {json.dumps([worker])}"}
    ]


def own_keys(vap: dict) -> tuple[list[str], list[str]]:
    expression = next(v["expression"] for v in vap["spec"]["variables"] if v["name"] == "ownKeys")
    m = re.fullmatch(r"variables\.worker \? (\[.*?\]) : (\[.*?\])", expression)
    return json.loads(m.group(1)), json.loads(m.group(2))


def test_the_policys_status_keys_are_the_ones_the_launcher_and_the_evaluator_write(helm):
    vap, _ = policy(helm, "evaluator.enabled=true", *SHARED)
    workers, evaluator = own_keys(vap)
    assert workers == list(STATUS_KEYS)
    assert evaluator == list(sidecar.STATUS_KEYS)
    accounts = json.loads(vap["spec"]["matchConditions"][0]["expression"].split(" in ", 1)[1])
    assert accounts == [
        f"system:serviceaccount:{NAMESPACE}:{FULLNAME}",
        f"system:serviceaccount:{NAMESPACE}:{FULLNAME}-evaluator",
    ]


def test_the_policy_follows_an_existing_service_account(helm):
    vap, _ = policy(helm, "serviceAccount.create=false", "serviceAccount.name=trainer")
    assert "system:serviceaccount:training:trainer" in vap["spec"]["matchConditions"][0]["expression"]


@pytest.mark.parametrize("kube_version", ["1.30.0", "1.35.0"])
def test_the_policy_and_its_binding_are_valid_kubernetes_objects(helm, kube_version):
    """Against the Kubernetes schema, strictly (an unknown field is a problem), from 1.30, where
    admissionregistration.k8s.io/v1 serves them."""
    checked = helmkit.validate_objects(policy(helm, "evaluator.enabled=true", *SHARED), kube_version)
    assert checked.problems == [] and not checked.custom


def test_notes_show_no_events_command_without_the_events_right():
    notes = chartkit.notes
    assert "get events" in notes() and f"get configmap {STATUS}" in notes()
    off = notes("rbac.events=false")
    assert "get events" not in off and f"get configmap {STATUS}" in off
