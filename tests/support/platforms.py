"""What each platform the README names puts in a pod, rebuilt from that platform's own code.

Each builder follows the cited source line by line (Go -> Python), so a test feeds the
launcher and the trainer exactly what the platform would; none is a description.
"""

from __future__ import annotations

import json

# kubeflow/training-operator v1.9.0 (6f74c7f6b2ed6c27aabd82d0a316b23f0646059c), the last release
# with the v1 TFJob controller (master removed it in #2389):
# - pkg/apis/kubeflow.org/v1/tensorflow_types.go: replica types "PS", "Worker", "Chief",
#   "Master", "Evaluator"; TFJobDefaultPort = 2222 (port name "tfjob-port").
# - pkg/controller.v1/tensorflow/tensorflow.go genClusterSpec: every replica type, lowercased,
#   each replica `common.GenGeneralName(job, rt, i) + "." + namespace + ".svc"` (+ "." +
#   $CUSTOM_CLUSTER_DOMAIN of the operator, when set) + ":" + port.
# - genTFConfigJSONStr: TFConfig{Cluster, Task{Type: strings.ToLower(rtype), Index},
#   Environment: "cloud"}; json.Marshal writes the struct's fields in order and a map's keys
#   sorted. With enableDynamicWorker: SparseTFConfig{Cluster: SparseClusterSpec{Worker:
#   map[int32]string, PS: []string}, Task} (convertClusterSpecToSparseClusterSpec).
# - tfjob_controller.go: TF_CONFIG is the only variable, only on the container "tensorflow",
#   and not set at all when the job has one replica in total (isDistributed).
TFJOB_REPLICA_TYPES = ("Chief", "Master", "Worker", "PS", "Evaluator")


def tfjob_tf_config(
    job: str,
    namespace: str,
    replicas: dict[str, int],
    rtype: str,
    index: int,
    port: int = 2222,
    cluster_domain: str = "",
    dynamic_worker: bool = False,
) -> str:
    cluster: dict[str, list[str]] = {}
    for rt, count in replicas.items():
        assert rt in TFJOB_REPLICA_TYPES, rt
        lower = rt.lower()
        names = []
        for i in range(count):
            host = f"{job}-{lower}-{i}".replace("/", "-")  # common.GenGeneralName
            svc = f"{host}.{namespace}.svc" + (f".{cluster_domain}" if cluster_domain else "")
            names.append(f"{svc}:{port}")
        cluster[lower] = names
    task = {"type": rtype.lower(), "index": index}
    if dynamic_worker:
        sparse: dict = {"worker": {}, "ps": []}
        if rtype.lower() == "ps":
            sparse["ps"] = [cluster["ps"][index]]
        elif rtype.lower() == "worker":
            sparse["ps"] = cluster.get("ps") or []
            sparse["worker"] = {str(index): cluster["worker"][index]}
        return json.dumps({"cluster": sparse, "task": task}, separators=(",", ":"))
    return json.dumps(
        {"cluster": dict(sorted(cluster.items())), "task": task, "environment": "cloud"}, separators=(",", ":")
    )


def tfjob_services(job: str, replicas: dict[str, int]) -> list[str]:
    """common/service.go CreateNewService: one headless Service per pod, named like the pod."""
    return [f"{job}-{rt.lower()}-{i}" for rt, count in replicas.items() for i in range(count)]


# volcano-sh/volcano ed72c7c815a9fd547a787134676f73d42e9d049c,
# pkg/controllers/job/plugins/distributed-framework/tensorflow/tensorflow.go:
# - flags --ps/--worker/--chief/--evaluator name the tasks of each role (defaults: the role
#   names), --port (DefaultPort 2222) is one port for every task;
# - generateTFClusterSpec: for every task of the job, `MakeDomainName(ts, job, i) + ":" + port`,
#   put under the role whose flag names the task; a task named by no flag is left out;
# - tfClusterSpec{Cluster: clusterInfo{PS, Worker, Chief, Evaluator `omitempty`}, Task{Type,
#   Index}}: the roles in that order, empty ones omitted, no "environment";
# - getTaskType: the role of the pod's task, else the raw task name; Index: the pod name's
#   last "-" segment (helpers.GetPodIndexUnderTask);
# - TF_CONFIG on every container, not set for a job of one task with one replica.
# pkg/controllers/job/helpers/helpers.go MakeDomainName: hostName (default MakePodName:
# "<job>-<task>-<i>") + "." + subdomain (default the job's name); the svc plugin (always on
# with the tensorflow plugin) sets pod.Spec.Hostname = pod name, Subdomain = job name and a
# headless Service named like the job.
VOLCANO_ROLES = ("ps", "worker", "chief", "evaluator")


def volcano_tf_config(
    job: str, tasks: list[tuple[str, int]], task: str, index: int, port: int = 2222, names: dict[str, str] | None = None
) -> str:
    names = dict(zip(VOLCANO_ROLES, VOLCANO_ROLES, strict=True)) | (names or {})
    role_of = {name: role for role, name in names.items()}
    cluster: dict[str, list[str]] = {}
    for task_name, count in tasks:
        hosts = [f"{job}-{task_name}-{i}.{job}:{port}" for i in range(count)]
        if task_name in role_of:
            cluster[role_of[task_name]] = hosts
    ordered = {role: cluster[role] for role in VOLCANO_ROLES if cluster.get(role)}
    return json.dumps(
        {"cluster": ordered, "task": {"type": role_of.get(task, task), "index": index}}, separators=(",", ":")
    )


# kubernetes-sigs/jobset 08dfbdfd682714a9ab929633eca8dc95315187e7:
# - JobSet sets no TF_CONFIG and no environment variable of its own (no JOBSET_NAME etc. in
#   pkg/ or api/); its pods are Indexed Job pods: the Job controller's JOB_COMPLETION_INDEX
#   (kubernetes pkg/controller/job/indexed_job_utils.go, completionIndexEnvName) and hostname
#   "<job>-<index>";
# - pkg/util/placement/placement.go GenJobName: "<jobset>-<replicatedJob>-<jobIndex>";
# - pkg/controllers/jobset_controller.go: template.Spec.Subdomain = GetSubdomain(js)
#   (network.subdomain, default the JobSet's name) when enableDNSHostnames (webhook default
#   true); a headless Service named the subdomain, publishNotReadyAddresses default true.
def jobset_pod(jobset: str, replicated_job: str, job_index: int, pod_index: int, subdomain: str = "") -> dict[str, str]:
    """(hostname, subdomain, JOB_COMPLETION_INDEX) of one JobSet pod."""
    job = f"{jobset}-{replicated_job}-{job_index}"
    return {"hostname": f"{job}-{pod_index}", "subdomain": subdomain or jobset, "JOB_COMPLETION_INDEX": str(pod_index)}
