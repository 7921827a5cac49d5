"""The values real GPU clusters need: a RuntimeClass, common labels and annotations, claim
annotations, writable-dir size limits, init and sidecar containers held to Pod Security
"restricted", IPC_LOCK for InfiniBand as an explicit opt-in, CPU images and placement for the
`helm test` and TensorBoard pods, and one worker per node. Rendered by the real helm 3 and 4,
checked by the project's Pod Security oracle (tfmw.chart.pss, the real admission's rules)."""

from __future__ import annotations

import chartkit
import pytest
from chartkit import env_of, find, one, pod_labels, pod_templates

from tfmw.chart import pss
from tfmw.chart import render as host_render

GPU = ("workers.gpus=1",)
SHARED = ("storage.type=createClaim",)
SIDECAR = ("workers.sidecars[0].name=ship", "workers.sidecars[0].image=fluent/fluent-bit:3.2")
INIT = (
    "workers.extraVolumes[0].name=data",
    "workers.extraVolumes[0].emptyDir.sizeLimit=1Gi",
    "workers.initContainers[0].name=fetch",
    "workers.initContainers[0].image=busybox:1.36",
    "workers.initContainers[0].command={sh,-c,echo fetched > /data/ok}",
    "workers.initContainers[0].volumeMounts[0].name=data",
    "workers.initContainers[0].volumeMounts[0].mountPath=/data",
)


def worker_spec(objects) -> dict:
    return one(objects, "StatefulSet")["spec"]["template"]["spec"]


def test_runtime_class_reaches_the_workers_only(helm, render):
    objects = render(helm, sets=("workers.runtimeClassName=nvidia", "tensorboard.enabled=true", *SHARED))
    assert worker_spec(objects)["runtimeClassName"] == "nvidia"
    for name, spec, _ in pod_templates(objects):
        if not name.startswith("StatefulSet/"):
            assert "runtimeClassName" not in spec, name
    assert "runtimeClassName" not in worker_spec(render(helm))


def test_common_labels_on_every_object_and_pod_common_annotations_on_every_object(helm, render):
    objects = render(
        helm,
        chartkit.ALL_ON,
        sets=("commonLabels.cost-centre=cc-1234", "commonAnnotations.example\\.com/billing=ml-platform"),
    )
    assert len(objects) > 15
    for obj in objects:
        meta = obj["metadata"]
        where = f"{obj['kind']}/{meta['name']}"
        assert meta["labels"]["cost-centre"] == "cc-1234", where
        assert meta["annotations"]["example.com/billing"] == "ml-platform", where
    for obj in objects:
        if obj["kind"] in ("StatefulSet", "Deployment", "Job", "Pod"):
            assert pod_labels(obj)["cost-centre"] == "cc-1234", obj["metadata"]["name"]
    for name, _, pod_annotations in pod_templates(objects):
        if not name.startswith("Pod/"):  # the helm test Pod is an object of its own
            assert "example.com/billing" not in pod_annotations, name  # pods take workers.podAnnotations
    # the selector never changes with them (it is immutable)
    selector = one(objects, "StatefulSet")["spec"]["selector"]["matchLabels"]
    assert "cost-centre" not in selector


def test_claim_annotations_go_beside_the_keep_policy(helm, render):
    claim = one(
        render(helm, sets=(*SHARED, "storage.createClaim.annotations.backup\\.example/schedule=daily")),
        "PersistentVolumeClaim",
    )
    assert claim["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep", "backup.example/schedule": "daily"}


def test_writable_dirs_get_the_size_limit_in_every_pod(helm, render):
    objects = render(helm, chartkit.ALL_ON, sets=("writableDirsSizeLimit=5Gi",))
    for name, spec, _ in pod_templates(objects):
        writable = [v for v in spec["volumes"] if v["name"].startswith("writable-")]
        assert writable and all(v["emptyDir"] == {"sizeLimit": "5Gi"} for v in writable), name


def test_ephemeral_storage_is_a_resource_like_the_others(helm, render):
    sets = ("workers.resources.requests.ephemeral-storage=10Gi", "workers.resources.limits.ephemeral-storage=20Gi")
    resources = worker_spec(render(helm, sets=sets))["containers"][0]["resources"]
    assert resources["requests"]["ephemeral-storage"] == "10Gi" and resources["limits"]["ephemeral-storage"] == "20Gi"


def test_init_and_sidecar_containers_get_the_charts_security_context_and_pass_restricted(helm, render):
    objects = render(helm, sets=(*INIT, *SIDECAR, "workers.sidecars[0].securityContext.readOnlyRootFilesystem=false"))
    spec = worker_spec(objects)
    (init,) = spec["initContainers"]
    assert init["name"] == "fetch" and init["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert init["securityContext"]["allowPrivilegeEscalation"] is False
    names = [c["name"] for c in spec["containers"]]
    assert names == ["worker", "ship"]
    ship = spec["containers"][1]
    # its own field wins; what it leaves out is the chart's
    assert ship["securityContext"]["readOnlyRootFilesystem"] is False
    assert ship["securityContext"]["runAsNonRoot"] is True and ship["securityContext"]["runAsUser"] == 1000
    assert pss.all_violations(pss.pod_templates(objects)) == []
    # the worker container keeps its own contract: the env the launcher reads is only on it
    assert "TFMW_POD_NAME" in env_of(spec["containers"][0]) and not env_of(ship)


@pytest.mark.parametrize(
    "sets,says",
    [
        (("workers.sidecars[0].securityContext.privileged=true",), "workers.sidecars[0].securityContext="),
        (("workers.sidecars[0].securityContext.runAsUser=0",), "privileged, privilege escalation or root"),
        (("workers.sidecars[0].securityContext.capabilities.add={NET_ADMIN}",), "add at most NET_BIND_SERVICE"),
        (("workers.sidecars[0].ports[0].containerPort=80", "workers.sidecars[0].ports[0].hostPort=80"), "hostPort 80"),
        (("workers.sidecars[1].name=worker", "workers.sidecars[1].image=x"), "workers.sidecars[1].name=worker"),
        (
            ("workers.initContainers[0].name=ship", "workers.initContainers[0].image=x"),
            "workers.sidecars[0].name=ship: workers.initContainers[0] has that name already",
        ),
        (
            ("workers.sidecars[0].volumeMounts[0].name=api-access", "workers.sidecars[0].volumeMounts[0].mountPath=/a"),
            "names no volume of the worker pods",
        ),
    ],
)
def test_an_unsafe_or_clashing_extra_container_is_refused(helm, sets, says):
    error = chartkit.template_error(helm, sets=(*SIDECAR, *sets))
    assert says in error, error


def test_allow_unsafe_renders_a_privileged_sidecar_on_purpose(helm, render):
    objects = render(
        helm, sets=(*SIDECAR, "workers.sidecars[0].securityContext.privileged=true", "security.allowUnsafe=true")
    )
    assert worker_spec(objects)["containers"][1]["securityContext"]["privileged"] is True


def test_ipc_lock_is_an_explicit_opt_in_for_gpu_workers(helm, render):
    assert "add" not in worker_spec(render(helm, sets=GPU))["containers"][0]["securityContext"]["capabilities"]
    caps = worker_spec(render(helm, sets=(*GPU, "workers.nccl.ipcLock=true")))["containers"][0]["securityContext"][
        "capabilities"
    ]
    assert caps == {"add": ["IPC_LOCK"], "drop": ["ALL"]}
    error = chartkit.template_error(helm, sets=("workers.nccl.ipcLock=true",))
    assert "workers.nccl.ipcLock=true with workers.gpus=0" in error


def test_the_host_tools_say_the_ipc_lock_opt_in_once_and_refuse_nothing_else():
    rendered = host_render.prepare("dev", ["workers.nccl.ipcLock=true"])
    assert len(rendered.warnings) == 1 and "IPC_LOCK" in rendered.warnings[0]
    assert "pod-security.kubernetes.io/enforce=privileged" in rendered.warnings[0]


def test_helm_test_and_tensorboard_pull_the_cpu_image_where_they_are_told(helm, render):
    objects = render(
        helm,
        sets=(
            *GPU,
            *SHARED,
            "tensorboard.enabled=true",
            "tests.nodeSelector.pool=cpu",
            "tests.tolerations[0].key=dedicated",
            "tests.tolerations[0].operator=Exists",
            "tensorboard.nodeSelector.pool=cpu",
        ),
    )
    images = {name: spec["containers"][0]["image"] for name, spec, _ in pod_templates(objects)}
    worker = next(v for k, v in images.items() if k.startswith("StatefulSet/"))
    assert worker.endswith(":0.1.0")  # GPU workers: the GPU image
    others = {k: v for k, v in images.items() if not k.startswith("StatefulSet/")}
    assert len(others) == 2 and all(v.endswith(":0.1.0-cpu") for v in others.values()), others
    test_pod = next(spec for name, spec, _ in pod_templates(objects) if name.startswith("Pod/"))
    assert test_pod["nodeSelector"] == {"pool": "cpu"}
    assert test_pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    tensorboard = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert tensorboard["nodeSelector"] == {"pool": "cpu"}
    # a pinned worker image is the one image there is; an own repository and tag win
    pinned = render(
        helm, sets=(*GPU, "image.tag=2.0.0", "tests.image.repository=reg.example/tools", "tests.image.tag=t1")
    )
    pod = next(spec for name, spec, _ in pod_templates(pinned) if name.startswith("Pod/"))
    assert pod["containers"][0]["image"] == "reg.example/tools:t1"
    pinned_only = render(helm, sets=(*GPU, "image.tag=2.0.0"))
    pod = next(spec for name, spec, _ in pod_templates(pinned_only) if name.startswith("Pod/"))
    assert pod["containers"][0]["image"].endswith(":2.0.0")


@pytest.mark.parametrize(
    "mode,key",
    [
        ("hard", "requiredDuringSchedulingIgnoredDuringExecution"),
        ("soft", "preferredDuringSchedulingIgnoredDuringExecution"),
    ],
)
def test_one_worker_per_node(
    helm,
    render,
    mode,
    key,
):
    objects = render(
        helm,
        sets=(
            f"workers.podAntiAffinity={mode}",
            "workers.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=1",
            "workers.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].key=gpu",
            "workers.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].operator=Exists",
        ),
    )
    affinity = worker_spec(objects)["affinity"]
    assert set(affinity) == {"nodeAffinity", "podAntiAffinity"}  # the user's own affinity stays
    (term,) = affinity["podAntiAffinity"][key]
    term = term.get("podAffinityTerm", term)
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == one(objects, "StatefulSet")["spec"]["selector"]["matchLabels"]
    assert not find(render(helm), "StatefulSet")[0]["spec"]["template"]["spec"].get("affinity")
