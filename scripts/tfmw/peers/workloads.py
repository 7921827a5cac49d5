"""The same training run as a peer's users would write it (pure: objects, no API calls).

Both run the project's image and its built-in trainer, `python -m entrypoint.training`,
directly: what a TFJob or JobSet user runs is a TensorFlow script, and the launcher in front
of it (its peer wait, in-place restarts, watchdog, status) is the chart's own, so it is not
lent to the peers. The config is values/local.yaml's model and data with the fault
harness's steps and checkpoint interval; the checkpoints go to a ReadWriteMany claim, as in
the chart's run.

- TFJob (kubeflow.org/v1): `Worker` replicas, the operator's TF_CONFIG on the container named
  `tensorflow`, port `tfjob-port` 2222, `cleanPodPolicy: Running`, and either restart policy its
  users set: `OnFailure` (the kubelet restarts a failed trainer in place) or `ExitCode` (the
  operator recreates a pod whose trainer died of a signal).
- JobSet (jobset.x-k8s.io/v1alpha2): one replicated job of one Indexed Job with 2 pods; JobSet
  sets no TF_CONFIG, so the container derives it from its Indexed Job identity with the
  image's `python -m entrypoint tf-config` first; `restartPolicy: OnFailure` with the Job's
  `backoffLimit`, and JobSet's `failurePolicy.maxRestarts` recreating the whole group when a
  Job fails. The fields JobSet's mutating webhook would default are set here too.
"""

from __future__ import annotations

import json

import yaml

PORT = 2222
TRAINER = ["python", "-m", "entrypoint.training"]
CONFIG_DIR = "/etc/tfmw"
SHARED = "/shared"
BACKOFF_LIMIT = 6  # each Job's pod failures before the Job fails (Kubernetes' default)
MAX_RESTARTS = 3  # JobSet: whole-group recreations before it is Failed


def training_config(values: dict, steps: int, checkpoint_every: int) -> dict:
    """values/local.yaml's training.config with the harness's steps, checkpoint interval and a
    progress line every step."""
    config = json.loads(json.dumps((values.get("training") or {}).get("config") or {}))
    config["steps"] = steps
    config.setdefault("checkpoint", {})["everySteps"] = checkpoint_every
    config["logEverySteps"] = 1
    return config


def config_map(name: str, config: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"training.yaml": yaml.safe_dump(config, sort_keys=True)},
    }


def shared_claim(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def _container(name: str, image: str, run_id: str, resources: dict, command: list[str]) -> dict:
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "env": [
            {"name": "TFMW_RUN_ID", "value": run_id},
            {"name": "TFMW_SHARED_DIR", "value": SHARED},
            {"name": "TFMW_TRAINING_CONFIG", "value": f"{CONFIG_DIR}/training.yaml"},
        ],
        "ports": [{"name": "tfjob-port", "containerPort": PORT, "protocol": "TCP"}],
        "resources": resources,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "training-config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "shared", "mountPath": SHARED},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "home", "mountPath": "/home/tfmw"},
        ],
    }


def placement(name: str, avoid_nodes: tuple[str, ...] = ()) -> dict:
    """Pod-spec fields putting the run's workers one per node, never on `avoid_nodes` (pure).

    For a node lost: the workers must not share the lost node, and the peer's controller
    (on an avoided node) must survive it, as it would on a cluster whose controllers run on
    nodes of their own. A lost (tainted) node is not counted, so the replacement may join the
    survivor's node. The chart's node-loss runs spread the same way (tfmw.faults.nodes.SPREAD)
    but avoid no node, so on a cluster with a free node its replacement starts there."""
    spec: dict = {
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "nodeTaintsPolicy": "Honor",
                "labelSelector": {"matchLabels": {"app.kubernetes.io/name": name}},
            }
        ]
    }
    if avoid_nodes:
        term = {
            "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": list(avoid_nodes)}]
        }
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
    return spec


def _pod_spec(container: dict, config: str, claim: str, restart_policy: str, extra: dict | None = None) -> dict:
    return (extra or {}) | {
        "restartPolicy": restart_policy,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 30,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
        "containers": [container],
        "volumes": [
            {"name": "training-config", "configMap": {"name": config}},
            {"name": "shared", "persistentVolumeClaim": {"claimName": claim}},
            {"name": "tmp", "emptyDir": {}},
            {"name": "home", "emptyDir": {}},
        ],
    }


# TFJob's two ways a user asks for restarts: the kubelet restarts a failed container in place
# (OnFailure), or the operator recreates the pod when the exit code is 128 or more (a signal)
# and fails the job on 1-127 (ExitCode; pkg/controller.v1/common/pod.go, v1.9.0).
# Each kind's API: (apiVersion, kind, collection). The runs create theirs, the installs probe
# the controller's webhook with a dry-run create of one (tfmw.peers.install).
API = {
    "tfjob": ("kubeflow.org/v1", "TFJob", "tfjobs"),
    "jobset": ("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets"),
}


def collection(kind: str, namespace: str) -> str:
    """The REST path of `kind`'s objects in `namespace` (pure)."""
    api_version, _, plural = API[kind]
    return f"/apis/{api_version}/namespaces/{namespace}/{plural}"


def api_object(kind: str, name: str, spec: dict, **metadata) -> dict:
    """An object of `kind` named `name` with `spec` (pure)."""
    api_version, kind_name, _ = API[kind]
    return {"apiVersion": api_version, "kind": kind_name, "metadata": {"name": name, **metadata}, "spec": spec}


TFJOB_POLICIES = ("OnFailure", "ExitCode")


def tfjob(
    name: str,
    image: str,
    config: str,
    claim: str,
    resources: dict,
    replicas: int = 2,
    policy: str = "OnFailure",
    extra: dict | None = None,
) -> dict:
    """`extra`: pod-spec fields added (placement())."""
    if policy not in TFJOB_POLICIES:
        raise ValueError(f"TFJob restartPolicy {policy!r}; one of {', '.join(TFJOB_POLICIES)}")
    container = _container("tensorflow", image, name, resources, TRAINER)  # the operator's container name
    return api_object(
        "tfjob",
        name,
        {
            "runPolicy": {"cleanPodPolicy": "Running"},
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": replicas,
                    "restartPolicy": policy,
                    "template": {
                        "metadata": {"labels": {"app.kubernetes.io/name": name}},
                        # the operator sets the pods' own policy from the replica's (ExitCode: Never)
                        "spec": _pod_spec(
                            container, config, claim, "OnFailure" if policy == "OnFailure" else "Never", extra
                        ),
                    },
                }
            },
        },
    )


JOBSET_JOB = "workers"


def jobset_command() -> list[str]:
    """TF_CONFIG from the pod's Indexed Job identity, then the trainer, in one process."""
    return ["sh", "-c", 'TF_CONFIG="$(python -m entrypoint tf-config)" exec ' + " ".join(TRAINER)]


def jobset(
    name: str, image: str, config: str, claim: str, resources: dict, replicas: int = 2, extra: dict | None = None
) -> dict:
    """`extra`: pod-spec fields added (placement())."""
    container = _container("worker", image, name, resources, jobset_command())
    container["env"] += [
        {"name": "TFMW_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "TFMW_SERVICE", "value": name},  # the subdomain: the JobSet's name
        {"name": "TFMW_REPLICAS", "value": str(replicas)},
        {"name": "TFMW_PORT", "value": str(PORT)},
    ]
    return api_object(
        "jobset",
        name,
        {
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [JOBSET_JOB]},
            "failurePolicy": {"maxRestarts": MAX_RESTARTS},
            "replicatedJobs": [
                {
                    "name": JOBSET_JOB,
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "completionMode": "Indexed",
                            "completions": replicas,
                            "parallelism": replicas,
                            "backoffLimit": BACKOFF_LIMIT,
                            "template": {
                                "metadata": {"labels": {"app.kubernetes.io/name": name}},
                                "spec": _pod_spec(container, config, claim, "OnFailure", extra),
                            },
                        }
                    },
                }
            ],
        },
    )


def ordinal_of(kind: str):
    """pod object -> its worker index (None: not a worker of the run), from the label each
    controller sets."""
    tfjob = kind.startswith("tfjob")
    label = "training.kubeflow.org/replica-index" if tfjob else "batch.kubernetes.io/job-completion-index"

    def ordinal(pod: dict) -> int | None:
        value = ((pod.get("metadata") or {}).get("labels") or {}).get(label, "")
        return int(value) if value.isdigit() else None

    return ordinal


def phase(kind: str, obj: dict | None) -> str:
    """'Succeeded', 'Failed' or '' (still running) from a TFJob's or JobSet's conditions."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    true = {c.get("type") for c in conditions if c.get("status") == "True"}
    if kind.startswith("tfjob"):
        return "Succeeded" if "Succeeded" in true else "Failed" if "Failed" in true else ""
    return "Succeeded" if "Completed" in true else "Failed" if "Failed" in true else ""


def phase_message(obj: dict | None) -> str:
    """The message of the controller's newest true condition ('' when none) (pure)."""
    conditions = [c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
    if not conditions:
        return ""
    newest = max(conditions, key=lambda c: c.get("lastTransitionTime") or "")
    return f"{newest.get('type')}: {newest.get('reason', '')}: {' '.join(str(newest.get('message', '')).split())}"


def pods_line(pods: list[dict]) -> str:
    """Where the run's pods are, in one line (pure): name, node, phase or Terminating, the
    container's restarts and what it waits for, e.g.
    `peer-jobset-workers-0-0-x on n1: Running, 3 restarts, CrashLoopBackOff`."""
    parts = []
    for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("name", "")):
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        state = "Terminating" if meta.get("deletionTimestamp") else status.get("phase", "?")
        words = [state]
        containers = status.get("containerStatuses") or []
        restarts = sum(c.get("restartCount", 0) for c in containers)
        if restarts:
            words.append(f"{restarts} restart{'s' if restarts != 1 else ''}")
        words += [w for c in containers if (w := ((c.get("state") or {}).get("waiting") or {}).get("reason"))]
        parts.append(f"{meta.get('name', '?')} on {spec.get('nodeName') or 'no node'}: {', '.join(words)}")
    return "; ".join(parts) or "no pods"


def jobs_line(jobs: list[dict]) -> str:
    """A JobSet's Jobs in one line (pure): name, true conditions, pods still terminating, e.g.
    `peer-jobset-workers-0: SuccessCriteriaMet, 1 terminating`. A Job adds Complete only once
    none of its pods is terminating."""
    parts = []
    for job in sorted(jobs, key=lambda j: (j.get("metadata") or {}).get("name", "")):
        status = job.get("status") or {}
        words = [c.get("type", "?") for c in status.get("conditions") or [] if c.get("status") == "True"]
        if status.get("terminating"):
            words.append(f"{status['terminating']} terminating")
        parts.append(f"{(job.get('metadata') or {}).get('name', '?')}: {', '.join(words) or 'no condition'}")
    return "; ".join(parts) or "no Jobs"
