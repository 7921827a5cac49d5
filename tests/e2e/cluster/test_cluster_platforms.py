"""Issue 22 on the real cluster: a TFJob's chief, worker and evaluator pods as the operator
makes them (per-pod headless Services, TF_CONFIG from tests/support/platforms.py, the operator's
own code), the chart's evaluator Job, and TF's two-file tutorial given with --set-file, with
no image built for it. Real TensorFlow, short runs."""

from __future__ import annotations

import json
from pathlib import Path

import chartkit
import platforms
import pytest
import yaml
from clusterkit import CHART, REPO, wait_for

from entrypoint import envfrom
from tfmw.k8s.api import ns_path

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

FAST = [
    "training.config.model.name=mlp",
    "training.config.steps=30",
    "training.config.logEverySteps=5",
    "training.config.checkpoint.everySteps=10",
]


def _describe(cluster, ns):
    return lambda: cluster.kubectl("get", "pods,jobs,svc,events,cm", "-n", ns, "-o", "wide", check=False).stdout


def _status(cluster, ns, release) -> dict:
    cm = cluster.api.get_or_none(ns_path(ns, "configmaps", f"{release}-tf-multiworker-status"))
    return (cm or {}).get("data") or {}


def _install(cluster, ns, release, *sets, files=()):
    args = ["upgrade", "--install", release, str(CHART), "-n", ns, "-f", str(REPO / "values" / "local.yaml")]
    for item in sets:
        args += ["--set", item]
    for item in files:
        args += ["--set-file", item]
    return cluster.helm(*args)


def test_tfjob_chief_worker_and_evaluator_as_the_operator_makes_them(cluster, namespace):
    job, replicas = "mnist", {"Chief": 1, "Worker": 1, "Evaluator": 1}
    api = cluster.api
    api.create(
        ns_path(namespace, "configmaps"),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "mnist-training"},
            "data": {
                "training.yaml": yaml.safe_dump(
                    {
                        "model": {"name": "mlp"},
                        "steps": 20,
                        "batchSizePerReplica": 16,
                        "logEverySteps": 5,
                        "checkpoint": {"everySteps": 10},
                        "evaluation": {"examples": 256, "pollSeconds": 1},
                    }
                )
            },
        },
    )
    api.create(
        ns_path(namespace, "persistentvolumeclaims"),
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "mnist-shared"},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    pods = []
    for rtype, count in replicas.items():
        for i in range(count):
            name = f"{job}-{rtype.lower()}-{i}"
            labels = {
                "training.kubeflow.org/job-name": job,
                "training.kubeflow.org/replica-type": rtype.lower(),
                "training.kubeflow.org/replica-index": str(i),
            }
            # common/service.go CreateNewService: one headless Service per pod, named like it
            api.create(
                ns_path(namespace, "services"),
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": name},
                    "spec": {"clusterIP": "None", "selector": labels, "ports": [{"name": "tfjob-port", "port": 2222}]},
                },
            )
            tf_config = platforms.tfjob_tf_config(job, namespace, replicas, rtype, i)
            api.create(
                ns_path(namespace, "pods"),
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "labels": labels},
                    "spec": {
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
                                "ports": [{"name": "tfjob-port", "containerPort": 2222}],
                                "env": [
                                    {"name": "TF_CONFIG", "value": tf_config},
                                    {"name": "TFMW_TRAINING_CONFIG", "value": "/etc/mnist/training.yaml"},
                                    {"name": "TFMW_SHARED_DIR", "value": "/shared"},
                                    {"name": "TFMW_RUN_ID", "value": job},
                                ],
                                "volumeMounts": [
                                    {"name": "cfg", "mountPath": "/etc/mnist"},
                                    {"name": "shared", "mountPath": "/shared"},
                                ],
                            }
                        ],
                        "volumes": [
                            {"name": "cfg", "configMap": {"name": "mnist-training"}},
                            {"name": "shared", "persistentVolumeClaim": {"claimName": "mnist-shared"}},
                        ],
                    },
                },
            )
            pods.append(name)

    def phases():
        got = {p: (api.get(ns_path(namespace, "pods", p)).get("status") or {}).get("phase") for p in pods}
        return got if all(v in ("Succeeded", "Failed") for v in got.values()) else None

    ended = wait_for(phases, 300, "the TFJob's three pods to exit", describe=_describe(cluster, namespace))
    assert ended == {p: "Succeeded" for p in pods}, {p: cluster.logs(namespace, p)[-1500:] for p in pods}
    chief = cluster.logs(namespace, "mnist-chief-0")
    assert "tfmw start run=mnist worker=0/2" in chief and "tfmw done steps=20" in chief  # the chief is task 0
    assert "worker=1/2" in cluster.logs(namespace, "mnist-worker-0")
    evaluator = cluster.logs(namespace, "mnist-evaluator-0")
    assert "evaluator task: evaluating checkpoints outside the training group" in evaluator
    assert "tfmw eval step=20 " in evaluator and "final=true" in evaluator


def test_the_charts_evaluator_records_the_final_evaluation_and_completes(cluster, namespace):
    _install(
        cluster,
        namespace,
        "ev",
        *FAST,
        "evaluator.enabled=true",
        "training.config.evaluation.examples=256",
        "evaluator.resources.requests.cpu=100m",
    )

    def finished_job():
        jobs = cluster.api.items(ns_path(namespace, "jobs", group="batch/v1"))
        done = [
            j
            for j in jobs
            if any(
                c["type"] in ("Complete", "Failed") and c["status"] == "True"
                for c in (j.get("status") or {}).get("conditions") or []
            )
        ]
        return done[0] if done else None

    job = wait_for(finished_job, 300, "the evaluator Job to finish", describe=_describe(cluster, namespace))
    conditions = {c["type"]: c["status"] for c in job["status"]["conditions"]}
    assert conditions.get("Complete") == "True", job["status"]
    status = _status(cluster, namespace, "ev")
    assert status["phase"] == "Succeeded" and status["evalStep"] == "30"
    assert 0.0 <= float(status["evalAccuracy"]) <= 1.0 and float(status["evalLoss"]) > 0
    (pod,) = cluster.pods(namespace, "app.kubernetes.io/component=evaluator")
    log = cluster.logs(namespace, pod["metadata"]["name"])
    assert "tfmw eval step=30 " in log and "final=true" in log
    # its token could only patch the status: no Event of its own, no scale
    assert pod["spec"]["serviceAccountName"] == "ev-tf-multiworker-evaluator"


def test_the_tutorials_two_files_train_with_set_file_and_no_image(cluster, namespace):
    tutorial = REPO / "examples" / "tutorial"
    # A ConfigMap given whole (workers.extraEnvFrom) with no reserved key: the real kubelet leaves
    # the chart's envFrom probe as rendered, so the launcher refuses nothing and the run trains.
    cluster.api.create(
        ns_path(namespace, "configmaps"),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tut-env"}, "data": {"WANDB_MODE": "off"}},
    )
    _install(
        cluster,
        namespace,
        "tut",
        "training.command={python,/opt/tf-multiworker/files/main.py}",
        "training.args={--epochs,2,--steps-per-epoch,10}",
        "workers.extraEnvFrom[0].configMapRef.name=tut-env",
        files=[
            f"training.files.main\\.py={tutorial / 'main.py'}",
            f"training.files.mnist_setup\\.py={tutorial / 'mnist_setup.py'}",
        ],
    )
    status = wait_for(
        lambda: (lambda s: s if s.get("phase") in ("Succeeded", "Failed") else None)(
            _status(cluster, namespace, "tut")
        ),
        300,
        "the tutorial run to end",
        describe=_describe(cluster, namespace),
    )
    assert status["phase"] == "Succeeded", status
    files = cluster.api.get(ns_path(namespace, "configmaps", "tut-tf-multiworker-files"))
    assert sorted(files["data"]) == ["main.py", "mnist_setup.py"]
    # the pods are the cluster's one image, the files came with the release
    sts = cluster.statefulset(namespace, "tut-tf-multiworker")
    assert sts["spec"]["template"]["spec"]["containers"][0]["image"] == cluster.image
    assert status.get("reason") == "Completed"
    # the chief's save is on the shared volume (the provisioner's hostPath on this machine)
    claim = cluster.api.get(ns_path(namespace, "persistentvolumeclaims", "tut-tf-multiworker-shared"))
    volume = cluster.api.get(f"/api/v1/persistentvolumes/{claim['spec']['volumeName']}")
    assert (Path(volume["spec"]["hostPath"]["path"]) / "tut" / "model" / "saved_model.pb").is_file()


def test_the_kubelet_fills_in_the_envfrom_probe_only_for_the_keys_a_configmap_holds(cluster, namespace):
    """The rule the chart's envFrom probe rests on, on a real kubelet: the worker container's env as
    the chart renders it with an envFrom (the probe first, the chart's TFMW_PORT), in a pod that
    prints its environment; its ConfigMap holds two reserved keys and one of the team's."""
    rendered = chartkit.template(
        chartkit.helm4(), [REPO / "values" / "local.yaml"], ["workers.extraEnvFrom[0].configMapRef.name=env-probe"]
    )
    worker = chartkit.one(rendered, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    env = [e for e in worker["env"] if e["name"] in (envfrom.PROBE, "TFMW_PORT")]
    assert env[0]["name"] == envfrom.PROBE and worker["envFrom"] == [{"configMapRef": {"name": "env-probe"}}]
    data = {"TFMW_PORT": "9999", "TF_CONFIG": "{}|x=$(TFMW_RUN_ID)", "WANDB_MODE": "off"}
    api = cluster.api
    api.create(
        ns_path(namespace, "configmaps"),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "env-probe"}, "data": data},
    )
    show = "import json, os; print(json.dumps({k: os.environ.get(k) for k in %r}))" % [
        envfrom.PROBE,
        "TFMW_PORT",
        "TF_CONFIG",
        "WANDB_MODE",
    ]
    api.create(
        ns_path(namespace, "pods"),
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "env-probe"},
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": "worker",
                        "image": cluster.image,
                        "command": ["python", "-c", show],
                        "env": env,
                        "envFrom": worker["envFrom"],
                    }
                ],
            },
        },
    )
    wait_for(
        lambda: (api.get(ns_path(namespace, "pods", "env-probe")).get("status") or {}).get("phase") == "Succeeded",
        120,
        "the env-probe pod to exit",
        describe=_describe(cluster, namespace),
    )
    seen = json.loads(cluster.logs(namespace, "env-probe").strip().splitlines()[-1])
    assert seen["TFMW_PORT"] == env[1]["value"]  # env wins over envFrom: the ConfigMap's is hidden
    assert (seen["TF_CONFIG"], seen["WANDB_MODE"]) == (data["TF_CONFIG"], "off")
    assert envfrom.collisions(seen[envfrom.PROBE]) == ["TFMW_PORT", "TF_CONFIG"]
    assert "|TFMW_RUN_ID=$(TFMW_RUN_ID)|" in seen[envfrom.PROBE]  # not defined: left as written
