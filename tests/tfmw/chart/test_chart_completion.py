"""Finish like a job, the chart's side (issue 11): the completion values, the least-privilege
Role behind `scaleToZero`, the worker-only API token, the status ConfigMap, the env the
launcher reads, and the refusals.

"API access" is on when `rbac.create` and at least one completion action is `scaleToZero`.
"""

from __future__ import annotations

import chartkit
import pytest
from chartkit import ALL_ON, NAMESPACE, RELEASE, env_of, find, one, pod_templates

FULLNAME = f"{RELEASE}-tf-multiworker"
STATUS = f"{FULLNAME}-status"
API_DIR = "/var/run/secrets/tf-multiworker/api"
BOTH_IDLE = ("completion.onSuccess=idle", "completion.onFailure=idle")
SHARED = ("storage.type=createClaim",)  # storage that outlives the pods: onSuccess=auto scales to zero
SCALE_ON_SUCCESS = ("completion.onSuccess=scaleToZero", *SHARED)
API_ENV = ("TFMW_API_DIR", "TFMW_STATUS_CONFIGMAP")

EXPECTED_RULES = [
    {
        "apiGroups": ["apps"],
        "resources": ["statefulsets/scale"],
        "resourceNames": [FULLNAME],
        "verbs": ["get", "patch"],
    },
    {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [STATUS], "verbs": ["get", "patch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    # the release's own pods by name, read only: why a new worker of a resize is not running
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "resourceNames": [f"{FULLNAME}-0", f"{FULLNAME}-1"],
        "verbs": ["get", "delete"],
    },
    # no `list` by default (rbac.pods.list): it cannot be limited by name or label
    # (test_chart_rbac.py)
]


def worker_pod(objects) -> dict:
    return one(objects, "StatefulSet")["spec"]["template"]["spec"]


def worker_container(objects) -> dict:
    return next(c for c in worker_pod(objects)["containers"] if c["name"] == "worker")


def projected_volumes(spec: dict) -> list[dict]:
    return [v for v in spec.get("volumes", []) if "projected" in v]


# -- API access on (the default) ----------------------------------------------------------


def test_default_role_grants_exactly_scale_status_and_events(helm, render):
    objects = render(helm)
    role = one(objects, "Role", FULLNAME)
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == EXPECTED_RULES


def test_default_binding_ties_the_role_to_the_release_service_account(helm, render):
    objects = render(helm)
    binding = one(objects, "RoleBinding", FULLNAME)
    sa = one(objects, "ServiceAccount")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": FULLNAME}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}]
    assert worker_pod(objects)["serviceAccountName"] == sa["metadata"]["name"]


def test_status_configmap_has_labels_and_no_data(helm, render):
    status = one(render(helm), "ConfigMap", STATUS)
    assert status["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    assert set(status) == {"apiVersion", "kind", "metadata"}  # no data, no binaryData


def test_api_token_is_projected_into_the_worker_container_only(helm, render):
    objects = render(helm, ALL_ON)  # workers, TensorBoard and the helm test pod
    spec = worker_pod(objects)
    assert spec["automountServiceAccountToken"] is False
    (volume,) = projected_volumes(spec)
    assert volume == {
        "name": "api-access",
        "projected": {
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 600}},  # no audience
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            ]
        },
    }
    mounts = [m for m in worker_container(objects)["volumeMounts"] if m["name"] == "api-access"]
    assert mounts == [{"name": "api-access", "mountPath": API_DIR, "readOnly": True}]
    # The evaluator Job has its own token and Role (test_chart_evaluator.py); TensorBoard and
    # the helm test pod have none.
    others = [(name, spec) for name, spec, _ in pod_templates(objects) if not name.startswith(("StatefulSet/", "Job/"))]
    assert len(others) == 2
    for name, other in others:
        assert not projected_volumes(other), name
        assert other["automountServiceAccountToken"] is False, name
        for container in other["containers"]:
            assert not set(API_ENV) & set(env_of(container)), name


def test_token_expiry_follows_the_value(helm, render):
    (volume,) = projected_volumes(worker_pod(render(helm, sets=("completion.tokenExpirationSeconds=3600",))))
    assert volume["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"] == 3600


def test_worker_env_tells_the_launcher_what_to_do_and_where(helm, render):
    env = env_of(worker_container(render(helm, sets=("training.activeDeadlineSeconds=7200", *SHARED))))
    assert {
        name: env[name]["value"]
        for name in ("TFMW_ON_SUCCESS", "TFMW_ON_FAILURE", "TFMW_ACTIVE_DEADLINE_SECONDS", *API_ENV)
    } == {
        "TFMW_ON_SUCCESS": "scaleToZero",
        "TFMW_ON_FAILURE": "scaleToZero",
        "TFMW_ACTIVE_DEADLINE_SECONDS": "7200",
        "TFMW_API_DIR": API_DIR,
        "TFMW_STATUS_CONFIGMAP": STATUS,
    }
    assert env["TFMW_POD_REVISION"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.labels['controller-revision-hash']"}
    }


@pytest.mark.parametrize(
    "values,on_success",
    [
        ((), "idle"),
        (SHARED, "scaleToZero"),
        (("storage.type=objectStore", "storage.objectStore.uri=gs://b/r"), "scaleToZero"),
        (("storage.type=existingClaim", "storage.existingClaim.claimName=c"), "scaleToZero"),
        ((*SHARED, "rbac.create=false", "completion.onFailure=idle"), "idle"),
    ],
    ids=["emptyDir", "createClaim", "objectStore", "existingClaim", "no-rbac"],
)
def test_a_default_install_never_deletes_its_own_model(helm, render, values, on_success):
    """completion.onSuccess=auto scales to zero only where the model outlives the pods: with the
    default emptyDir the workers idle after success, so the exported model is still there."""
    env = env_of(worker_container(render(helm, sets=values)))
    assert env["TFMW_ON_SUCCESS"]["value"] == on_success


def test_scale_to_zero_on_success_with_an_emptydir_is_refused(helm):
    assert refusal_lines(chartkit.template_error(helm, sets=("completion.onSuccess=scaleToZero",))) == [
        "completion.onSuccess=scaleToZero with storage.type=emptyDir would delete the exported model with the "
        "pods the moment the run succeeds: use storage that outlives them (storage.type=createClaim, "
        "existingClaim or objectStore), or completion.onSuccess=auto or idle (the workers idle; copy the model "
        "out with kubectl cp, then uninstall)"
    ]


@pytest.mark.parametrize(
    "sets",
    [("completion.onFailure=idle", *SCALE_ON_SUCCESS), ("completion.onSuccess=idle",)],
    ids=["scale-on-success", "scale-on-failure"],
)
def test_one_scale_to_zero_action_is_enough_for_api_access(helm, render, sets):
    objects = render(helm, sets=sets)
    assert one(objects, "Role", FULLNAME)["rules"] == EXPECTED_RULES
    assert one(objects, "RoleBinding", FULLNAME) and one(objects, "ConfigMap", STATUS)
    assert len(projected_volumes(worker_pod(objects))) == 1
    env = env_of(worker_container(objects))
    assert set(API_ENV) <= set(env)
    assert {env["TFMW_ON_SUCCESS"]["value"], env["TFMW_ON_FAILURE"]["value"]} == {"idle", "scaleToZero"}


# -- API access off -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sets", [BOTH_IDLE, BOTH_IDLE + ("rbac.create=false",)], ids=["both-idle", "both-idle-no-rbac"]
)
def test_both_idle_renders_no_api_access_at_all(helm, render, sets):
    objects = render(helm, ALL_ON, sets=sets)
    assert not find(objects, "Role") and not find(objects, "RoleBinding")
    assert not find(objects, "ConfigMap", STATUS)
    for name, spec, _ in pod_templates(objects):
        assert not projected_volumes(spec), name
    env = env_of(worker_container(objects))
    assert not set(API_ENV) & set(env)
    # What the launcher always needs stays.
    assert env["TFMW_ON_SUCCESS"]["value"] == env["TFMW_ON_FAILURE"]["value"] == "idle"
    assert env["TFMW_ACTIVE_DEADLINE_SECONDS"]["value"] == "0"
    assert "TFMW_POD_REVISION" in env


def test_existing_service_account_by_name_gets_the_binding(helm, render):
    objects = render(helm, sets=("serviceAccount.create=false", "serviceAccount.name=trainer"))
    assert not find(objects, "ServiceAccount")
    assert one(objects, "RoleBinding")["subjects"][0]["name"] == "trainer"
    assert worker_pod(objects)["serviceAccountName"] == "trainer"


def test_no_service_account_of_its_own_is_fine_without_api_access(helm, render):
    objects = render(helm, sets=("serviceAccount.create=false", *BOTH_IDLE))
    assert worker_pod(objects)["serviceAccountName"] == "default"
    assert not find(objects, "RoleBinding")


# -- refusals --------------------------------------------------------------------------------


def refusal_lines(error: str) -> list[str]:
    """The chart's problems in helm's error: the first rides on helm's `Error: ...: ` line,
    each further one is a line of its own; helm's own hints are dropped."""
    lines = [line for line in error.strip().splitlines() if line.strip() and not line.startswith("Use --debug")]
    prefix = "Error: execution error at (tf-multiworker/templates/statefulset.yaml:1:4): "
    assert lines[0].startswith(prefix), error
    return [lines[0][len(prefix) :], *lines[1:]]


def on_success_refusal(key: str) -> str:
    return (
        f"completion.{key}=scaleToZero needs rbac.create=true (the workers scale their own "
        f"StatefulSet): set rbac.create=true or completion.{key}=idle"
    )


REFUSALS = {
    "scale-on-success-without-rbac": (
        ("rbac.create=false", "completion.onFailure=idle", *SCALE_ON_SUCCESS),
        [on_success_refusal("onSuccess")],
    ),
    "scale-on-failure-without-rbac": (
        ("rbac.create=false", "completion.onSuccess=idle"),
        [on_success_refusal("onFailure")],
    ),
    "both-scale-without-rbac": (
        ("rbac.create=false", *SCALE_ON_SUCCESS),
        [on_success_refusal("onSuccess"), on_success_refusal("onFailure")],
    ),
    "api-access-with-the-default-account": (
        ("serviceAccount.create=false",),
        [
            "serviceAccount.name is empty with serviceAccount.create=false: the workers' Role "
            "(completion.onSuccess/onFailure=scaleToZero) would be bound to the namespace's default "
            "ServiceAccount; set serviceAccount.name to an account of these workers' own, or "
            "serviceAccount.create=true"
        ],
    ),
}
NEW_ENV = (
    "TFMW_ON_SUCCESS",
    "TFMW_ON_FAILURE",
    "TFMW_ACTIVE_DEADLINE_SECONDS",
    "TFMW_POD_REVISION",
    "TFMW_API_DIR",
    "TFMW_STATUS_CONFIGMAP",
)
for _name in NEW_ENV:
    REFUSALS[f"extra-env-{_name}"] = (
        (f"workers.extraEnv[0].name={_name}", "workers.extraEnv[0].value=x"),
        [
            f"workers.extraEnv[0].name={_name}: this variable is derived from values by the chart or "
            "the entrypoint (docs/contracts.md); set the matching value instead"
        ],
    )


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusal_is_one_line_naming_the_key(helm, case):
    sets, expected = REFUSALS[case]
    assert refusal_lines(chartkit.template_error(helm, sets=sets)) == expected


def test_an_empty_api_server_port_list_is_refused(helm, tmp_path):
    """No ports would render an egress rule open to every port and address."""
    values = tmp_path / "no-ports.yaml"
    values.write_text("networkPolicy:\n  egress:\n    apiServer:\n      ports: []\n")
    error = chartkit.template_error(helm, [values])
    assert "networkPolicy" in error and "apiServer" in error and "ports" in error


def test_every_problem_is_listed_at_once_one_line_each(helm):
    error = chartkit.template_error(
        helm,
        sets=(
            "rbac.create=false",
            "tensorboard.enabled=true",
            "completion.onSuccess=scaleToZero",
            "workers.extraEnv[0].name=TF_CONFIG",
            "workers.extraEnv[0].value=x",
            "workers.extraEnv[1].name=TFMW_API_DIR",
            "workers.extraEnv[1].value=/x",
        ),
    )
    lines = refusal_lines(error)
    assert [line.split(":")[0].split("=")[0] for line in lines] == [
        "workers.extraEnv[0].name",
        "workers.extraEnv[1].name",
        "tensorboard.enabled",
        "completion.onSuccess",
        "completion.onSuccess",
        "completion.onFailure",
    ]


# -- NOTES -------------------------------------------------------------------------------------


notes = chartkit.notes


def test_notes_show_the_status_object_and_events_with_api_access():
    text = notes()
    assert f"kubectl -n {NAMESPACE} get configmap {STATUS} -o jsonpath='{{.data}}" in text
    assert f"kubectl -n {NAMESPACE} get events --field-selector involvedObject.name={FULLNAME}" in text
    assert "scale StatefulSet" in text and "to 0 replicas" in text
    # The default emptyDir dies with the pods: they idle after success, and NOTES says how to copy the model out.
    assert "NOTE: storage.type=emptyDir is per pod and lost with it, so after success the workers idle" in text
    assert f"kubectl -n {NAMESPACE} cp {FULLNAME}-0:/shared/{RELEASE}/model ./model" in text


def test_notes_without_api_access_promise_no_status_object():
    text = notes(*BOTH_IDLE)
    assert "get configmap" not in text and "get events" not in text
    assert "idles" in text and "to 0 replicas" not in text
