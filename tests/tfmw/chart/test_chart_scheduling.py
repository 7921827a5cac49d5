"""GPU nodes, gang scheduling (Volcano, coscheduling, Kueue, Run:ai), disruption budget."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml
from chartkit import ALL_ON, RELEASE, env_of, find, one, overlay_path, pod_labels

FULLNAME = f"{RELEASE}-tf-multiworker"
CRDS = Path(__file__).resolve().parent / "crds"


def worker(objects):
    return one(objects, "StatefulSet")["spec"]["template"]


def strict(schema: dict) -> dict:
    """A CRD schema as `kubectl --validate=strict` applies it: unknown fields are errors."""
    schema = dict(schema)
    if "properties" in schema:
        schema.setdefault("additionalProperties", False)
        schema["properties"] = {k: strict(v) for k, v in schema["properties"].items()}
    if isinstance(schema.get("additionalProperties"), dict):
        schema["additionalProperties"] = strict(schema["additionalProperties"])
    return schema


def crd_validator(api_version: str, kind: str) -> jsonschema.Validator:
    group, version = api_version.split("/")
    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        if (crd["group"], crd["version"], crd["kind"]) == (group, version, kind):
            return jsonschema.Draft7Validator(strict(crd["openAPIV3Schema"]))
    raise AssertionError(f"no vendored CRD schema for {api_version} {kind}")


def test_volcano_gang(helm, render):
    objects = render(
        helm,
        overlay_path("prod"),
        sets=("scheduling.gang=volcano", "scheduling.volcano.queue=ml", "workers.priorityClassName=high"),
    )
    pg = one(objects, "PodGroup")
    assert pg["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert pg["spec"] == {"minMember": 4, "queue": "ml", "priorityClassName": "high"}
    template = worker(objects)
    assert template["spec"]["schedulerName"] == "volcano"
    assert template["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == pg["metadata"]["name"]
    crd_validator(pg["apiVersion"], "PodGroup").validate(pg)


def test_coscheduling_gang(helm, render):
    objects = render(
        helm,
        overlay_path("staging"),
        sets=("scheduling.gang=coscheduling", "scheduling.coscheduling.scheduleTimeoutSeconds=90"),
    )
    pg = one(objects, "PodGroup")
    assert pg["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert pg["spec"] == {"minMember": 2, "scheduleTimeoutSeconds": 90}
    template = worker(objects)
    assert template["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
    assert template["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == pg["metadata"]["name"]
    crd_validator(pg["apiVersion"], "PodGroup").validate(pg)


def test_kueue_gang(helm, render):
    objects = render(helm, overlay_path("prod"), sets=("scheduling.gang=kueue", "scheduling.kueue.queueName=team-a"))
    assert not find(objects, "PodGroup")  # Kueue builds its Workload itself
    # Kueue's StatefulSet integration reads the queue (and the priority) on the StatefulSet ...
    labels = one(objects, "StatefulSet")["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "team-a"
    assert "kueue.x-k8s.io/priority-class" not in labels
    # ... and writes the pods' group name and size itself: a pod-group label of the chart's
    # would be a second name for the group, which Kueue refuses (the pod stays gated).
    template = worker(objects)
    kueue_keys = [k for k in (*template["metadata"]["labels"], *template["metadata"]["annotations"]) if "kueue" in k]
    assert kueue_keys == []
    assert "schedulerName" not in template["spec"]


def test_kueue_priority_class_goes_on_the_statefulset(helm, render):
    sets = ("scheduling.gang=kueue", "scheduling.kueue.queueName=q", "scheduling.kueue.priorityClass=high")
    sts = one(render(helm, overlay_path("prod"), sets=sets), "StatefulSet")
    assert sts["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"


def test_runai_gang(helm, render):
    # NVIDIA/KAI-Scheduler 72de64fc: pkg/common/constants/constants.go DefaultQueueLabel =
    # "kai.scheduler/queue", read from the top owner, then the pod, then the `project` label
    # (defaultgrouper/default_grouper.go CalcPodGroupQueue); the StatefulSet maps to the default
    # grouper with MinAvailable: 1 and no annotation changes it: KAI queues these workers but
    # does not gang them (docs/scheduling.md says so, and NOTES warns).
    objects = render(helm, overlay_path("prod"), sets=("scheduling.gang=runai", "scheduling.runai.project=vision"))
    template = worker(objects)
    assert template["spec"]["schedulerName"] == "runai-scheduler"
    assert one(objects, "StatefulSet")["metadata"]["labels"]["kai.scheduler/queue"] == "vision"
    assert template["metadata"]["labels"]["kai.scheduler/queue"] == "vision"
    assert template["metadata"]["labels"]["project"] == "vision"
    assert not find(objects, "PodGroup")
    assert not any("min-member" in key for key in one(objects, "StatefulSet")["metadata"].get("annotations", {}))


def test_no_gang_by_default_and_scheduler_override(helm, render):
    objects = render(helm)
    assert not find(objects, "PodGroup")
    assert "schedulerName" not in worker(objects)["spec"]
    objects = render(helm, sets=("scheduling.gang=volcano", "scheduling.schedulerName=my-volcano"))
    assert worker(objects)["spec"]["schedulerName"] == "my-volcano"


def test_the_vendored_crd_schemas_are_strict():
    pg = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "x"},
        "spec": {"minMember": 2, "minMembers": 2},
    }
    with pytest.raises(jsonschema.ValidationError, match="minMembers"):
        crd_validator(pg["apiVersion"], "PodGroup").validate(pg)
    pg = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "x"},
        "spec": {"minMember": "two"},
    }
    with pytest.raises(jsonschema.ValidationError):
        crd_validator(pg["apiVersion"], "PodGroup").validate(pg)


def test_gpu_workers_get_shm_nccl_and_grace(helm, render):
    objects = render(helm, ALL_ON)
    template = worker(objects)
    spec = template["spec"]
    container = spec["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
    dshm = next(v for v in spec["volumes"] if v["name"] == "dshm")
    assert dshm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    env = {k: v.get("value") for k, v in env_of(container).items()}
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert env["NCCL_IB_DISABLE"] == "1"
    assert env["NCCL_P2P_LEVEL"] == "NVL"
    assert spec["priorityClassName"] == "training-high"
    assert spec["terminationGracePeriodSeconds"] == 900


def test_cpu_workers_get_no_nccl_and_shm_can_be_off(helm, render):
    objects = render(helm, overlay_path("local"), sets=("workers.shm.enabled=false",))
    spec = worker(objects)["spec"]
    env = env_of(spec["containers"][0])
    assert not [name for name in env if name.startswith("NCCL_")]
    assert "nvidia.com/gpu" not in spec["containers"][0]["resources"]["limits"]
    assert not [v for v in spec["volumes"] if v["name"] == "dshm"]
    assert "priorityClassName" not in spec
    assert spec["terminationGracePeriodSeconds"] == 120


def test_gpu_overlays_tolerate_the_gpu_taint(helm, render):
    for env in ("staging", "prod"):
        spec = worker(render(helm, overlay_path(env)))["spec"]
        assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] >= 1, env
        assert any(t.get("key") == "nvidia.com/gpu" for t in spec["tolerations"]), env
        assert spec["nodeSelector"], env


def test_pod_disruption_budget(helm, render):
    objects = render(helm)
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels(one(objects, "StatefulSet")).items()
    assert one(render(helm, ALL_ON), "PodDisruptionBudget")["spec"]["maxUnavailable"] == 0
    assert not find(render(helm, sets=("podDisruptionBudget.enabled=false",)), "PodDisruptionBudget")


UNREACHABLE = "node.kubernetes.io/unreachable"


def test_a_lost_nodes_worker_is_evicted_after_node_loss_toleration_seconds(helm, render):
    """The chart's NoExecute toleration for an unreachable node: seconds, not Kubernetes' 300
    (docs/failure-model.md, "A lost node"); none with null; the user's own one for that key
    wins; the user's other tolerations stay."""
    spec = worker(render(helm))["spec"]
    assert spec["tolerations"] == [
        {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}
    ]
    spec = worker(render(helm, sets=("workers.nodeLossTolerationSeconds=0",)))["spec"]
    assert spec["tolerations"][0]["tolerationSeconds"] == 0
    assert "tolerations" not in worker(render(helm, sets=("workers.nodeLossTolerationSeconds=null",)))["spec"]
    own = ("workers.tolerations[0].key=" + UNREACHABLE, "workers.tolerations[0].operator=Exists")
    assert worker(render(helm, sets=own))["spec"]["tolerations"] == [{"key": UNREACHABLE, "operator": "Exists"}]
    gpu = ("workers.tolerations[0].key=nvidia.com/gpu", "workers.tolerations[0].operator=Exists")
    keys = [t["key"] for t in worker(render(helm, sets=gpu))["spec"]["tolerations"]]
    assert keys == ["nvidia.com/gpu", UNREACHABLE]


KUEUE_SETS = ("scheduling.gang=kueue", "scheduling.kueue.queueName=q")
SHAPE = "tf-multiworker/kueue-shape"
SIDECAR = "workers.sidecars[0].name=side,workers.sidecars[0].image=busybox:1"


@pytest.mark.parametrize(
    ("change", "kueue_refuses"),
    [
        ("training.config.steps=99", False),  # env: not part of Kueue's shape
        ("image.tag=other", False),
        ("workers.priorityClassName=high", False),  # a template has no resolved priority
        ("workers.terminationGracePeriodSeconds=300", False),
        ("workers.resources.requests.memory=3Gi", True),
        ("workers.resources.limits.memory=128Gi", False),  # prod sets the memory request itself
        ("workers.gpus=2", True),  # a GPU limit is its request
        ("metrics.port=9200", True),
        ("workers.nodeSelector.pool=big", True),
        ("workers.tolerations[0].key=x,workers.tolerations[0].operator=Exists", True),
        ("workers.podAntiAffinity=soft", True),
        ("workers.runtimeClassName=nvidia", True),
        ("workers.nodeLossTolerationSeconds=30", True),  # a toleration the chart adds
    ],
)
def test_kueue_shape_digest_follows_what_kueue_keeps_immutable(helm, render, change, kueue_refuses):
    """The StatefulSet's shape digest (what the chart's upgrade check compares) changes exactly
    when Kueue's own SpecShape of the rendered pod template does, as tfmw.deploy.kueue_update
    reads it from Kueue's code: neither refuses what Kueue allows, nor lets through what it refuses."""
    from tfmw.deploy import kueue_update

    base = one(render(helm, overlay_path("prod"), sets=(*KUEUE_SETS, SIDECAR)), "StatefulSet")
    changed = one(render(helm, overlay_path("prod"), sets=(*KUEUE_SETS, SIDECAR, *change.split(","))), "StatefulSet")
    pod_spec = [sts["spec"]["template"]["spec"] for sts in (base, changed)]
    assert bool(kueue_update.shape_changes(*pod_spec)) is kueue_refuses, kueue_update.shape_changes(*pod_spec)
    digests = [sts["metadata"]["annotations"][SHAPE] for sts in (base, changed)]
    assert (digests[0] != digests[1]) is kueue_refuses, digests


def test_kueue_shape_digest_sees_the_extra_containers_requests_and_ports(helm, render):
    def digest(*sets):
        sts = one(render(helm, overlay_path("prod"), sets=(*KUEUE_SETS, SIDECAR, *sets)), "StatefulSet")
        return sts["metadata"]["annotations"][SHAPE]

    base = digest()
    assert digest("workers.sidecars[0].image=busybox:2") == base
    assert digest("workers.sidecars[0].resources.requests.cpu=100m") != base
    assert digest("workers.sidecars[0].ports[0].containerPort=8080") != base


def test_no_shape_digest_without_kueue(helm, render):
    assert SHAPE not in (one(render(helm, overlay_path("prod")), "StatefulSet")["metadata"].get("annotations") or {})
