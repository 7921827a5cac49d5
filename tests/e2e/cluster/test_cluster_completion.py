"""A run finishes like a job on the real control plane (issue 11): Succeeded or Failed in
the status ConfigMap and in Events on the StatefulSet, the StatefulSet scaled to 0 by the
workers themselves (real RBAC: the chart's Role, a projected token), GPUs free again, no
CrashLoopBackOff; redeploys; and the platforms that own the lifecycle (an Indexed Job, a
TFJob-shaped pair of pods with a preset TF_CONFIG) get exit codes.

Real TensorFlow trains in these; the runs are short (an MLP on synthetic data where the
model does not matter)."""

from __future__ import annotations

import calendar
import json
import time
from pathlib import Path

import pytest
import yaml
from clusterkit import CHART, GPU_MEMORY, KILL_TRAINER, REPO, wait_for
from gomodules import GOMOD, module_dir

from tfmw.devcluster.controlplane import STORAGE_CLASS
from tfmw.imports.tfjob import split_image
from tfmw.k8s.api import ns_path

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

# GPU values schedule on the nodes' advertised nvidia.com/gpu; the pods run the CPU image
# (the GPU variant, `<appVersion>`, is not built here: there is no GPU to run it).
ON_FAKE_GPUS = ["image.tag=0.1.0-cpu", *GPU_MEMORY]
FAST = [
    "training.config.model.name=mlp",
    "training.config.steps=30",
    "training.config.logEverySteps=5",
    "training.config.checkpoint.everySteps=10",
]


def _install(cluster, ns, release, *sets, helm="helm", files=()):
    args = ["upgrade", "--install", release, str(CHART), "-n", ns, "-f", str(REPO / "values" / "local.yaml")]
    for path in files:  # after the environment's, as make deploy's VALUES= files go
        args += ["-f", str(path)]
    for item in sets:
        args += ["--set", item]
    return cluster.helm(*args, helm=helm)


def _status(cluster, ns, release) -> dict:
    cm = cluster.api.get_or_none(ns_path(ns, "configmaps", f"{release}-tf-multiworker-status"))
    return (cm or {}).get("data") or {}


def _replicas(cluster, ns, release) -> int:
    return cluster.statefulset(ns, f"{release}-tf-multiworker")["spec"]["replicas"]


def _sts_events(cluster, ns, release) -> list[dict]:
    name = f"{release}-tf-multiworker"
    return [
        e
        for e in cluster.events(ns)
        if e["involvedObject"]["kind"] == "StatefulSet" and e["involvedObject"]["name"] == name
    ]


def _when(event) -> float:
    stamp = event.get("lastTimestamp") or event.get("eventTime") or event["metadata"]["creationTimestamp"]
    return calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))


def _describe(cluster, ns):
    return lambda: cluster.kubectl("get", "pods,sts,events,cm", "-n", ns, "-o", "wide", check=False).stdout


def _wait_phase(cluster, ns, release, phase, timeout=180):
    return wait_for(
        lambda: (lambda s: s if s.get("phase") == phase else None)(_status(cluster, ns, release)),
        timeout,
        f"{release}'s status phase {phase}",
        describe=_describe(cluster, ns),
    )


def _never_crash_looped(cluster, ns) -> bool:
    text = cluster.kubectl("get", "events", "-n", ns, "-o", "json").stdout
    return "CrashLoopBackOff" not in text and not [e for e in json.loads(text)["items"] if e["reason"] == "BackOff"]


def test_success_records_scales_to_zero_and_frees_the_gpus(cluster, namespace):
    _install(cluster, namespace, "ok", *FAST, "workers.gpus=1", *ON_FAKE_GPUS)
    status = _wait_phase(cluster, namespace, "ok", "Succeeded")
    assert status["reason"] == "Completed" and status["step"] == status["totalSteps"] == "30"
    assert float(status["loss"]) > 0 and status["finishedAt"] and status["startedAt"]
    wait_for(lambda: _replicas(cluster, namespace, "ok") == 0, 30, "the StatefulSet scaled to 0")
    wait_for(lambda: not cluster.workers(namespace, "ok"), 60, "the workers to be gone")
    events = _sts_events(cluster, namespace, "ok")
    reasons = [e["reason"] for e in events]
    assert "Started" in reasons and "Succeeded" in reasons
    succeeded = next(e for e in events if e["reason"] == "Succeeded")
    deleted = [e for e in events if e["reason"] == "SuccessfulDelete"]
    assert deleted and max(_when(e) for e in deleted) - _when(succeeded) <= 10  # API timestamps
    # Every node's two GPUs are free again: a pod asking for both schedules at once.
    cluster.api.create(
        ns_path(namespace, "pods"),
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "gpu-probe"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "c",
                        "image": cluster.image,
                        "command": ["true"],
                        "resources": {"limits": {"nvidia.com/gpu": 2}},
                    }
                ],
            },
        },
    )
    wait_for(
        lambda: (cluster.api.get(ns_path(namespace, "pods", "gpu-probe")).get("spec") or {}).get("nodeName"),
        30,
        "a 2-GPU pod to be scheduled",
    )
    assert _never_crash_looped(cluster, namespace)

    # Redeploy, same run id: the chart reads the recorded Succeeded and asks for no workers.
    _install(cluster, namespace, "ok", *FAST, "workers.gpus=1", *ON_FAKE_GPUS)
    assert _replicas(cluster, namespace, "ok") == 0 and not cluster.workers(namespace, "ok")
    # Scaled back up by hand (what a GitOps controller's drift correction does): the workers come
    # back, see Succeeded, and return to 0 untrained.
    cluster.kubectl("scale", "statefulset", "-n", namespace, "ok-tf-multiworker", "--replicas=2", check=True)
    wait_for(lambda: cluster.workers(namespace, "ok"), 30, "the workers to come back")
    wait_for(
        lambda: _replicas(cluster, namespace, "ok") == 0,
        90,
        "the workers brought back to return to 0",
        describe=_describe(cluster, namespace),
    )
    assert _status(cluster, namespace, "ok")["finishedAt"] == status["finishedAt"]  # not trained again
    # A new run id trains anew.
    _install(cluster, namespace, "ok", *FAST, "workers.gpus=1", *ON_FAKE_GPUS, "training.runId=second", helm="helm3")
    again = wait_for(
        lambda: (lambda s: s if s.get("runId") == "second" and s.get("phase") == "Succeeded" else None)(
            _status(cluster, namespace, "ok")
        ),
        180,
        "run 'second' to succeed",
        describe=_describe(cluster, namespace),
    )
    assert again["step"] == "30"
    wait_for(lambda: _replicas(cluster, namespace, "ok") == 0, 30, "scale to 0 after the second run")


def test_bad_training_config_fails_once_naming_the_key(cluster, namespace):
    """A config only the trainer's own checks refuse (a model argument mlp does not take: the
    chart's schema leaves model.args to the model), installed with plain helm: the workers refuse
    it at their start, the run is Failed once, never crash-loops. `make template` refuses it
    before any of that."""
    bad = "training.config.model.args.width=8"
    _install(cluster, namespace, "bad", *FAST, bad)
    status = _wait_phase(cluster, namespace, "bad", "Failed", timeout=120)
    assert status["reason"] == "BadConfig" and "model.args.width" in status["message"]
    wait_for(lambda: _replicas(cluster, namespace, "bad") == 0, 30, "the StatefulSet scaled to 0")
    failed = [e for e in _sts_events(cluster, namespace, "bad") if e["reason"] == "Failed"]
    assert failed and failed[0]["type"] == "Warning" and "model.args.width" in failed[0]["message"]
    assert _never_crash_looped(cluster, namespace)
    offline = cluster.tfmw(
        "template", "--env", "local", "--output", "/dev/null", *sum((["--set", s] for s in FAST), []), "--set", bad
    )
    assert offline.returncode == 2 and "training.config.model.args.width: unknown argument" in offline.stderr


def test_peers_that_never_appear_fail_after_the_timeout(cluster, namespace):
    """Both workers are held to node-1 and each asks for both of its GPUs: one is scheduled,
    the other stays Pending."""
    _install(
        cluster,
        namespace,
        "lonely",
        *FAST,
        "workers.gpus=2",
        *ON_FAKE_GPUS,
        "peers.timeoutSeconds=8",
        "workers.nodeSelector.kubernetes\\.io/hostname=node-1",
    )
    status = _wait_phase(cluster, namespace, "lonely", "Failed", timeout=120)
    # Either ordinal may be the one the scheduler places first (both may see a FailedScheduling
    # while the node's GPUs are still counted for an earlier pod): the one placed first ran and
    # timed out; the message names the other. A second placement, if any, came after the 8 s.
    placed = sorted(
        (_when(e), e["involvedObject"]["name"])
        for e in cluster.events(namespace)
        if e["reason"] == "Scheduled" and e["involvedObject"]["kind"] == "Pod"
    )
    assert placed, _describe(cluster, namespace)()
    scheduled = placed[0][1]
    (pending,) = {"lonely-tf-multiworker-0", "lonely-tf-multiworker-1"} - {scheduled}
    # The chief waits for every name (its own too: 2); worker 1 only for the names it must reach
    # before its first step (entrypoint.peers.needed_peers: the chief's, 1).
    waited = 2 if scheduled.endswith("-0") else 1
    assert status["reason"] == "PeersNotFound" and f"1 of {waited} never resolved" in status["message"]
    assert f"{pending}.lonely-tf-multiworker." in status["message"]
    assert f"{scheduled}." not in status["message"]
    wait_for(lambda: _replicas(cluster, namespace, "lonely") == 0, 30, "the StatefulSet scaled to 0")
    wait_for(lambda: not cluster.workers(namespace, "lonely"), 60, "the Pending worker to be gone too")


def test_corrupt_data_fails_after_one_try(cluster, namespace):
    claim = "data"
    cluster.api.create(
        ns_path(namespace, "persistentvolumeclaims"),
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    pvc = wait_for(
        lambda: (lambda c: c if (c.get("status") or {}).get("phase") == "Bound" else None)(
            cluster.api.get(ns_path(namespace, "persistentvolumeclaims", claim))
        ),
        30,
        "the claim to bind",
    )
    pv = cluster.api.get(f"/api/v1/persistentvolumes/{pvc['spec']['volumeName']}")
    Path(pv["spec"]["hostPath"]["path"], "train.npz").write_bytes(b"PK\x03\x04 this is not a zip archive")
    _install(
        cluster,
        namespace,
        "corrupt",
        *FAST,
        "storage.type=existingClaim",
        f"storage.existingClaim.claimName={claim}",
        "training.config.data.source=files",
        "training.config.data.format=npz",
        "training.config.data.path=train.npz",
        "training.config.data.numClasses=10",
    )
    status = _wait_phase(cluster, namespace, "corrupt", "Failed", timeout=150)
    assert status["reason"] == "TrainingFailed" and status["restarts"] == "0"
    assert "train.npz" in status["message"]
    wait_for(lambda: _replicas(cluster, namespace, "corrupt") == 0, 30, "the StatefulSet scaled to 0")
    assert _never_crash_looped(cluster, namespace)


def test_a_killed_worker_is_restarted_in_place_and_the_run_succeeds(cluster, namespace):
    _install(
        cluster,
        namespace,
        "kill",
        "training.config.steps=60",
        "training.config.checkpoint.everySteps=10",
        "training.config.logEverySteps=5",
    )
    wait_for(
        lambda: int(_status(cluster, namespace, "kill").get("lastCheckpointStep") or 0) >= 10,
        180,
        "a first checkpoint",
        describe=_describe(cluster, namespace),
    )
    # SIGKILL the trainer inside worker 1's container (not the launcher, whose command line
    # names the trainer too).
    out = cluster.kubectl(
        "exec", "-n", namespace, "kill-tf-multiworker-1", "-c", "worker", "--", "python", "-c", KILL_TRAINER
    ).stdout
    assert out.strip() == "1", f"worker 1's training process: {out!r}"
    status = _wait_phase(cluster, namespace, "kill", "Succeeded", timeout=240)
    assert int(status["restarts"]) >= 1
    restarted = [e for e in _sts_events(cluster, namespace, "kill") if e["reason"] == "Restarted"]
    assert restarted, "a Restarted event"
    pods = cluster.api.items(ns_path(namespace, "pods"))
    assert all(c["restartCount"] == 0 for p in pods for c in (p.get("status") or {}).get("containerStatuses") or [])


def test_indexed_job_example_completes(cluster, namespace):
    docs = [d for d in yaml.safe_load_all((REPO / "examples" / "indexed-job.yaml").read_text()) if d]
    for doc in docs:  # the example names the GPU image; the nodes here hold the CPU one
        pod_spec = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
        for container in pod_spec.get("containers", []) + pod_spec.get("initContainers", []):
            assert container["image"].startswith("ghcr.io/tf-multiworker/tf-multiworker:")
            container["image"] = cluster.image
    text = yaml.safe_dump_all(docs)
    cluster.run([str(REPO / ".tools" / "bin" / "kubectl"), "apply", "-n", namespace, "-f", "-"], input=text)
    job = wait_for(
        lambda: (
            lambda j: (
                j
                if any(
                    c["type"] in ("Complete", "Failed") and c["status"] == "True"
                    for c in (j.get("status") or {}).get("conditions") or []
                )
                else None
            )
        )(cluster.api.get(ns_path(namespace, "jobs", "tfmw-indexed", group="batch/v1"))),
        240,
        "the Indexed Job to finish",
        describe=_describe(cluster, namespace),
    )
    conditions = {c["type"]: c["status"] for c in job["status"]["conditions"]}
    assert conditions.get("Complete") == "True", job["status"]
    assert job["status"]["succeeded"] == 2


def test_tfjob_style_preset_tf_config_exits_zero_after_training(cluster, namespace):
    """Two pods shaped as a TFJob creates them: a preset TF_CONFIG naming the peers by their
    headless-Service names, restartPolicy Never. Both end Succeeded (exit 0)."""
    cluster.api.create(
        ns_path(namespace, "services"),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "tfjob"},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": {"job": "tfjob"},
                "ports": [{"name": "grpc", "port": 2222}],
            },
        },
    )
    cluster.api.create(
        ns_path(namespace, "configmaps"),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "tfjob-training"},
            "data": {
                "training.yaml": yaml.safe_dump(
                    {
                        "model": {"name": "mlp"},
                        "steps": 20,
                        "batchSizePerReplica": 16,
                        "logEverySteps": 5,
                        "checkpoint": {"everySteps": 10},
                    }
                )
            },
        },
    )
    workers = [f"tfjob-worker-{i}.tfjob.{namespace}.svc.cluster.local:2222" for i in range(2)]
    for i in range(2):
        tf_config = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}})
        cluster.api.create(
            ns_path(namespace, "pods"),
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"tfjob-worker-{i}", "labels": {"job": "tfjob"}},
                "spec": {
                    "hostname": f"tfjob-worker-{i}",
                    "subdomain": "tfjob",
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "tensorflow",
                            "image": cluster.image,
                            "command": [
                                "python",
                                "-m",
                                "entrypoint",
                                "run",
                                "--",
                                "python",
                                "-m",
                                "entrypoint.training",
                            ],
                            "env": [
                                {"name": "TF_CONFIG", "value": tf_config},
                                {"name": "TFMW_TRAINING_CONFIG", "value": "/etc/tfjob/training.yaml"},
                                {"name": "TFMW_SHARED_DIR", "value": "/shared"},
                                {"name": "TFMW_RUN_ID", "value": "tfjob"},
                            ],
                            "volumeMounts": [
                                {"name": "cfg", "mountPath": "/etc/tfjob"},
                                {"name": "shared", "mountPath": "/shared"},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "cfg", "configMap": {"name": "tfjob-training"}},
                        {"name": "shared", "persistentVolumeClaim": {"claimName": "tfjob-shared"}},
                    ],
                },
            },
        )
    cluster.api.create(
        ns_path(namespace, "persistentvolumeclaims"),
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "tfjob-shared"},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )

    def phases():
        got = [
            (cluster.api.get(ns_path(namespace, "pods", f"tfjob-worker-{i}")).get("status") or {}).get("phase")
            for i in range(2)
        ]
        return got if all(p in ("Succeeded", "Failed") for p in got) else None

    assert wait_for(phases, 240, "both TFJob-style workers to exit", describe=_describe(cluster, namespace)) == [
        "Succeeded",
        "Succeeded",
    ]
    assert "tfmw done" in cluster.logs(namespace, "tfjob-worker-0")


def test_status_is_never_worth_lost_training_rbac_removed_mid_run(cluster, namespace):
    """The workers' RoleBinding is removed mid-run: recording fails (403), each kind of failure
    is logged once, training goes on to the end. Put back, the idle launcher's retries record
    Succeeded and scale the StatefulSet to 0 after all."""
    _install(
        cluster,
        namespace,
        "norbac",
        "training.config.steps=100",
        "training.config.checkpoint.everySteps=10",
        "training.config.logEverySteps=5",
    )
    binding_path = ns_path(namespace, "rolebindings", "norbac-tf-multiworker", group="rbac.authorization.k8s.io/v1")
    wait_for(
        lambda: _status(cluster, namespace, "norbac").get("phase") == "Running",
        120,
        "the run to start",
        describe=_describe(cluster, namespace),
    )
    # Mid-run means past the one read a launcher needs before training: the group's size
    # (a 403 there is retried for peers.timeoutSeconds, as an API server restarting would be).
    # The chief records Running from its own start; worker 1, on a loaded machine, may not have
    # read the size yet. Its `tfmw launcher task=worker:1` line comes right after that read.
    wait_for(
        lambda: "task=worker:1 " in cluster.logs(namespace, "norbac-tf-multiworker-1"),
        120,
        "worker 1 to read the group's size",
        describe=_describe(cluster, namespace),
    )
    binding = cluster.api.get(binding_path)
    cluster.api.delete(binding_path)
    chief = "norbac-tf-multiworker-0"
    log = wait_for(
        lambda: (lambda text: text if "tfmw completed" in text else None)(cluster.logs(namespace, chief)),
        240,
        "training to complete without API access",
        describe=_describe(cluster, namespace),
    )
    cannot = [line for line in log.splitlines() if line.startswith("tfmw launcher status: cannot")]
    assert cannot and all("403" in line or "Forbidden" in line or "forbidden" in line for line in cannot), cannot
    assert len(cannot) == len(set(line.split(" (")[0] for line in cannot))  # once per kind
    assert _replicas(cluster, namespace, "norbac") == 2  # nothing could scale it yet
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
        binding["metadata"].pop(key, None)
    cluster.api.create(ns_path(namespace, "rolebindings", group="rbac.authorization.k8s.io/v1"), binding)
    status = _wait_phase(cluster, namespace, "norbac", "Succeeded", timeout=180)
    assert status["step"] == "100"
    wait_for(lambda: _replicas(cluster, namespace, "norbac") == 0, 120, "the retried scale to 0")


def test_an_upstream_tfjob_converted_by_tfmw_import_runs_to_succeeded(cluster, namespace, tmp_path):
    """training-operator v1.9.0's `distribution_strategy/multi_worker_tfjob.yaml` (2 Workers, 1
    nvidia.com/gpu each, the claim `strategy-volume` at /train) converted by `tfmw import tfjob`
    runs on the real cluster to Succeeded, with the converted values: 2 workers, the claim as the
    run's shared storage, the GPU request. Its `pvc.yaml` is applied as upstream ships it, with
    only its placeholder storage class ("Your storageClassName") set to the cluster's.

    Substituted, because nothing here can reach a registry or the internet: the example's image
    (kubeflow/tf-multi-worker-strategy, which cannot be pulled) by the cluster's worker image, and
    its script (which downloads MNIST) by the built-in trainer, given with --command as the
    example names no command; the run is the other completion tests' short one (FAST), the CPU
    image on the nodes' fake GPUs with the chart's GPU memory floor (GPU_MEMORY, as ON_FAKE_GPUS)."""
    examples = (
        module_dir(GOMOD / "training-operator", "github.com/kubeflow/training-operator")
        / "examples"
        / "tensorflow"
        / "distribution_strategy"
    )
    pvc = yaml.safe_load((examples / "pvc.yaml").read_text())
    assert pvc["spec"]["storageClassName"] == "Your storageClassName"  # upstream's placeholder
    pvc["spec"]["storageClassName"] = STORAGE_CLASS
    cluster.kubectl("apply", "-n", namespace, "-f", str(_written(tmp_path / "pvc.yaml", pvc)))
    overlay = tmp_path / "multi-worker.yaml"
    converted = cluster.tfmw(
        "import",
        "tfjob",
        str(examples / "multi_worker_tfjob.yaml"),
        "-o",
        str(overlay),
        "--command",
        "python -m entrypoint.training",
    )
    assert converted.returncode == 0, converted.stderr
    values = yaml.safe_load(overlay.read_text())
    assert values["image"] == {"repository": "kubeflow/tf-multi-worker-strategy", "tag": "latest"}
    release = values["target"]["release"]
    image = split_image(cluster.image)
    _install(
        cluster,
        namespace,
        release,
        *FAST,
        *GPU_MEMORY,
        f"image.repository={image['repository']}",
        f"image.tag={image['tag']}",
        files=[overlay],
    )
    pod = cluster.statefulset(namespace, f"{release}-tf-multiworker")["spec"]["template"]["spec"]
    [worker] = [c for c in pod["containers"] if c["name"] == "worker"]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == "1"  # a quantity, as the API server gives it
    assert {"name": "TFMW_SHARED_DIR", "value": "/train"} in worker["env"]
    assert [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v] == [
        "strategy-volume"
    ]
    assert _replicas(cluster, namespace, release) == 2
    wait_for(  # each on a node with a GPU free for it
        lambda: [w for w in cluster.workers(namespace, release) if w["spec"].get("nodeName")][1:],
        60,
        "2 workers scheduled",
        describe=_describe(cluster, namespace),
    )
    status = _wait_phase(cluster, namespace, release, "Succeeded", timeout=240)
    assert status["reason"] == "Completed" and status["step"] == status["totalSteps"] == "30"
    # The run's record is on the upstream claim: its shared storage.
    claim = cluster.api.get(ns_path(namespace, "persistentvolumeclaims", "strategy-volume"))
    volume = cluster.api.get(f"/api/v1/persistentvolumes/{claim['spec']['volumeName']}")
    assert Path(volume["spec"]["hostPath"]["path"], status["runId"], "COMPLETED").is_file()
    wait_for(lambda: _replicas(cluster, namespace, release) == 0, 30, "the StatefulSet scaled to 0")


def _written(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path
