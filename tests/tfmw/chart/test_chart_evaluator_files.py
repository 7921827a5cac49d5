"""Issue 22's chart parts: the evaluator Job, training.files (a user's script without an
image) and workers.extraVolumes / extraVolumeMounts."""

from __future__ import annotations

import pytest
from chartkit import RELEASE, env_of, find, one

FULLNAME = f"{RELEASE}-tf-multiworker"
FILES_DIR = "/opt/tf-multiworker/files"
SHARED = ("storage.type=createClaim",)
EVALUATOR = ("evaluator.enabled=true", *SHARED)


def worker_template(objects) -> dict:
    return one(objects, "StatefulSet")["spec"]["template"]


def evaluator_job(objects) -> dict:
    (job,) = find(objects, "Job")
    return job


# -- training.files --------------------------------------------------------------------------------
def test_files_are_a_configmap_mounted_read_only_where_the_command_names_them(helm, render):
    objects = render(
        helm,
        sets=(
            "training.files.main\\.py=import helper",
            "training.files.helper\\.py=X = 1",
            "training.command={python,/opt/tf-multiworker/files/main.py}",
        ),
    )
    files = one(objects, "ConfigMap", f"{FULLNAME}-files")
    assert files["data"] == {"main.py": "import helper", "helper.py": "X = 1"}
    template = worker_template(objects)
    volume = next(v for v in template["spec"]["volumes"] if v["name"] == "training-files")
    assert volume == {"name": "training-files", "configMap": {"name": f"{FULLNAME}-files"}}
    container = template["spec"]["containers"][0]
    assert {"name": "training-files", "mountPath": FILES_DIR, "readOnly": True} in container["volumeMounts"]
    assert container["args"][:2] == ["python", f"{FILES_DIR}/main.py"]


def test_a_changed_file_rolls_the_workers_and_no_files_render_nothing(helm, render):
    def checksum(*sets):
        return worker_template(render(helm, sets=sets))["metadata"]["annotations"].get("checksum/training-files")

    one_file = checksum("training.files.main\\.py=print(1)")
    assert one_file and one_file != checksum("training.files.main\\.py=print(2)")
    assert one_file == checksum("training.files.main\\.py=print(1)")
    objects = render(helm)
    assert checksum() is None and not find(objects, "ConfigMap", f"{FULLNAME}-files")
    assert all(v["name"] != "training-files" for v in worker_template(objects)["spec"]["volumes"])


# -- workers.extraVolumes / extraVolumeMounts ------------------------------------------------------
def test_extra_volumes_and_mounts_reach_the_worker_pod(helm, render):
    template = worker_template(
        render(
            helm,
            sets=(
                "workers.extraVolumes[0].name=data",
                "workers.extraVolumes[0].persistentVolumeClaim.claimName=imagenet",
                "workers.extraVolumeMounts[0].name=data",
                "workers.extraVolumeMounts[0].mountPath=/data",
                "workers.extraVolumeMounts[0].readOnly=true",
            ),
        )
    )
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}} in template["spec"]["volumes"]
    assert {"name": "data", "mountPath": "/data", "readOnly": True} in template["spec"]["containers"][0]["volumeMounts"]


def test_an_unsafe_extra_volume_renders_only_on_purpose(helm, render):
    template = worker_template(
        render(
            helm,
            sets=(
                "workers.extraVolumes[0].name=host",
                "workers.extraVolumes[0].hostPath.path=/mnt/data",
                "security.allowUnsafe=true",
            ),
        )
    )
    assert {"name": "host", "hostPath": {"path": "/mnt/data"}} in template["spec"]["volumes"]


# -- the evaluator ---------------------------------------------------------------------------------
def test_the_evaluator_is_one_job_outside_the_statefulset_and_tf_config(helm, render):
    objects = render(helm, sets=EVALUATOR)
    job = evaluator_job(objects)
    assert job["metadata"]["name"].startswith(f"{FULLNAME}-evaluator-")
    spec = job["spec"]["template"]["spec"]
    assert spec["restartPolicy"] == "Never"
    assert job["spec"]["podFailurePolicy"]["rules"][0] == {
        "action": "FailJob",
        "onExitCodes": {"containerName": "evaluator", "operator": "In", "values": [2, 4]},
    }
    (container,) = spec["containers"]
    assert container["command"] == ["python", "-m", "entrypoint.training", "--evaluate"]
    env = env_of(container)
    assert env["TFMW_RUN_ID"]["value"] == RELEASE and env["TFMW_SHARED_DIR"]["value"] == "/shared"
    assert "TF_CONFIG" not in env and "TFMW_REPLICAS" not in env  # not a member of the group
    assert "ports" not in container
    claim = next(v for v in spec["volumes"] if v["name"] == "shared")
    assert claim["persistentVolumeClaim"]["claimName"] == f"{FULLNAME}-shared"
    # no chart version in the pod template's labels; the component says what it is
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "evaluator" and "helm.sh/chart" not in labels
    # the StatefulSet's selector does not claim it, and the workers count as before
    assert one(objects, "StatefulSet")["spec"]["replicas"] == 2


def test_the_evaluator_may_only_read_and_patch_the_runs_status(helm, render):
    objects = render(helm, sets=EVALUATOR)
    name = f"{FULLNAME}-evaluator"
    assert evaluator_job(objects)["spec"]["template"]["spec"]["serviceAccountName"] == name
    role = one(objects, "Role", name)
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [f"{FULLNAME}-status"],
            "verbs": ["get", "patch"],
        }
    ]
    binding = one(objects, "RoleBinding", name)
    assert binding["roleRef"]["name"] == name and binding["subjects"][0]["name"] == name
    # without API access (completion idle): no account, no token, no status variables
    objects = render(helm, sets=(*EVALUATOR, "completion.onSuccess=idle", "completion.onFailure=idle"))
    spec = evaluator_job(objects)["spec"]["template"]["spec"]
    assert not find(objects, "Role") and spec["serviceAccountName"] == FULLNAME
    assert all("projected" not in v for v in spec["volumes"])
    assert "TFMW_STATUS_CONFIGMAP" not in env_of(spec["containers"][0])


def test_the_evaluators_network_policy_admits_nothing_and_reaches_no_worker(helm, render):
    policy = one(render(helm, sets=EVALUATOR), "NetworkPolicy", f"{FULLNAME}-evaluator")
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "evaluator"
    assert policy["spec"]["ingress"] == []
    kube_dns = {  # the one pod peer: the cluster DNS's pods in kube-system (networkPolicy.egress.dnsTo)
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    }
    for rule in policy["spec"].get("egress", []):
        for peer in rule.get("to", []):
            assert "podSelector" not in peer or peer == kube_dns
    ports = [p["port"] for rule in policy["spec"]["egress"] for p in rule.get("ports", [])]
    assert 2222 not in ports and 53 in ports and 443 in ports  # DNS and the API server, not gRPC


@pytest.mark.parametrize("change", ["evaluator.resources.limits.cpu=3", "training.config.steps=7"])
def test_a_changed_evaluator_is_a_new_job_not_a_failed_upgrade(helm, render, change):
    # A Job's pod template is immutable: its name carries the template's hash instead.
    same = evaluator_job(render(helm, sets=EVALUATOR))["metadata"]["name"]
    assert evaluator_job(render(helm, sets=EVALUATOR))["metadata"]["name"] == same
    assert evaluator_job(render(helm, sets=(*EVALUATOR, change)))["metadata"]["name"] != same
