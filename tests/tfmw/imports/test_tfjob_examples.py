"""`tfmw import tfjob` on the TFJob examples the pinned training-operator ships (manifests nobody
here wrote): each converts, renders with the chart and passes `make template`'s checks (values
schema, strict manifests, Pod Security), or is refused with its reason. Plus one TFJob using every
mapping, rendered, so every key the converter emits exists in the chart."""

from __future__ import annotations

import pytest
import yaml
from gomodules import GOMOD, module_dir

from tfmw import cli
from tfmw.imports import command, tfjob

MODULE = "github.com/kubeflow/training-operator"


@pytest.fixture(scope="session")
def examples():
    """examples/tensorflow of the training-operator version scripts/tfmw/devcluster/gomod pins."""
    return module_dir(GOMOD / "training-operator", MODULE) / "examples" / "tensorflow"


def rendered(conversion: tfjob.Conversion):
    assert conversion.refusal == ""
    return command.check_overlay(tfjob.overlay_yaml(conversion, "tfjob.yaml"))


def worker_pod(objects: list[dict]) -> dict:
    [sts] = [o for o in objects if o["kind"] == "StatefulSet"]
    return sts["spec"]["template"]["spec"] | {"replicas": sts["spec"]["replicas"]}


def worker(pod: dict) -> dict:
    return next(c for c in pod["containers"] if c["name"] == "worker")


def test_simple_converts_and_renders(examples):
    result = rendered(tfjob.convert_text((examples / "simple.yaml").read_text()))
    pod = worker_pod(result.objects)
    assert pod["replicas"] == 2
    assert worker(pod)["image"] == "kubeflow/tf-mnist-with-summaries:latest"
    assert worker(pod)["args"] == ["python", "/var/tf_mnist/mnist_with_summaries.py"]
    assert result.target.release == "tfjob-simple" and result.target.namespace == "kubeflow"


def test_mnist_with_summaries_converts_its_claim_into_shared_storage(examples):
    conversion = tfjob.convert_text((examples / "mnist_with_summaries" / "tf_job_mnist.yaml").read_text())
    assert [line.split(": ", 1)[0] for line in conversion.unmapped] == [
        "spec.tfReplicaSpecs.Worker.restartPolicy Never",
        "spec.runPolicy.cleanPodPolicy None",
    ]
    pod = worker_pod(rendered(conversion).objects)
    assert pod["replicas"] == 1
    assert worker(pod)["args"][-3:] == ["--log_dir=/train/logs", "--learning_rate=0.01", "--batch_size=150"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == ["tfevent-volume"]
    assert {"name": "TFMW_SHARED_DIR", "value": "/train"} in worker(pod)["env"]
    # restartPolicy Never is not copied: the chart's default restarts in place apply
    assert {"name": "TFMW_MAX_RESTARTS", "value": "20"} in worker(pod)["env"]


def test_multi_worker_names_no_command_refused_then_converted_with_the_command_option(examples):
    text = (examples / "distribution_strategy" / "multi_worker_tfjob.yaml").read_text()
    refused = tfjob.convert_text(text)
    assert "names no command" in refused.refusal and "--command" in refused.refusal
    pod = worker_pod(rendered(tfjob.convert_text(text, ["python", "/app/train.py"])).objects)
    assert pod["replicas"] == 2
    assert worker(pod)["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert worker(pod)["args"] == ["python", "/app/train.py"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == ["strategy-volume"]


def test_dist_mnist_with_a_parameter_server_is_refused_in_one_line_by_the_command(examples, tmp_path, capsys):
    out = tmp_path / "values.yaml"
    code = cli.main(["import", "tfjob", str(examples / "dist-mnist" / "tf_job_mnist.yaml"), "-o", str(out)])
    captured = capsys.readouterr()
    assert code == 2 and not out.exists() and captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith("tfmw import: error: ") and line.endswith(
        "spec.tfReplicaSpecs.PS: 1 parameter server(s): the chart runs MultiWorkerMirroredStrategy, which has no "
        "parameter servers (every worker holds the whole model); drop the PS replica spec and train with "
        "tf.distribute.MultiWorkerMirroredStrategy instead of ParameterServerStrategy, then import again"
    )


def test_the_command_writes_the_overlay_and_lists_what_it_did_not_map(examples, tmp_path, capsys):
    source = examples / "mnist_with_summaries" / "tf_job_mnist.yaml"
    code = cli.main(["import", "tfjob", str(source), "--no-check"])
    captured = capsys.readouterr()
    assert code == 0
    assert captured.out.startswith(
        "# Values overlay for charts/tf-multiworker, converted by `tfmw import tfjob` from tf_job_mnist.yaml."
    )
    assert yaml.safe_load(captured.out)["storage"]["existingClaim"]["claimName"] == "tfevent-volume"
    assert captured.err.splitlines() == [
        "tfmw import tfjob: not mapped: spec.tfReplicaSpecs.Worker.restartPolicy Never: a TFJob's restartPolicy "
        "is about one pod, while the launcher restarts the whole group in place from the last checkpoint "
        "(training.maxRestarts, docs/failure-model.md); to restart nothing, as Never did, set "
        "training.maxRestarts: 0",
        "tfmw import tfjob: not mapped: spec.runPolicy.cleanPodPolicy None: a finished run's workers scale to 0 "
        "(completion.onSuccess, onFailure) rather than stay as Completed pods; their logs stay readable with "
        "`make logs` from shared storage (logs.keepMiB)",
    ]


def test_a_file_that_cannot_be_read_is_refused_in_one_line(tmp_path, capsys):
    assert cli.main(["import", "tfjob", str(tmp_path / "missing.yaml")]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == f"tfmw import: error: {tmp_path / 'missing.yaml'}: cannot be read (No such file or directory)"


def test_an_overlay_that_cannot_be_checked_is_written_and_the_exit_is_helms(examples, tmp_path, capsys):
    out = tmp_path / "values.yaml"
    code = cli.main(
        ["import", "tfjob", str(examples / "simple.yaml"), "-o", str(out), "--helm", str(tmp_path / "no-helm")]
    )
    [line] = capsys.readouterr().err.splitlines()
    assert code == 127 and out.exists()
    assert "the overlay was written, but could not be checked:" in line and line.endswith(
        "(--no-check skips the check)"
    )


def test_an_overlay_the_chart_refuses_is_written_and_the_exit_says_why(tmp_path, capsys):
    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "TFJob",
                "metadata": {"name": "t"},
                "spec": {
                    "tfReplicaSpecs": {
                        "Worker": {
                            "template": {
                                "spec": {
                                    "containers": [
                                        {
                                            "name": "tensorflow",
                                            "image": "ml/train:1",
                                            "command": ["python", "t.py"],
                                            # a GPU worker with less memory than the chart's floor
                                            "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "1Gi"}},
                                        }
                                    ]
                                }
                            }
                        }
                    }
                },
            }
        )
    )
    out = tmp_path / "values.yaml"
    code = cli.main(["import", "tfjob", str(manifest), "-o", str(out)])
    [line] = capsys.readouterr().err.splitlines()
    assert code == 2 and out.exists()
    assert "the overlay was written, but the chart refuses it:" in line and "memory" in line


def test_a_tfjob_using_every_mapping_renders_and_passes_the_checks():
    """Every key the converter emits exists in the chart and renders (strict manifests, Pod Security)."""
    volumes = [
        {"name": "runs", "persistentVolumeClaim": {"claimName": "runs"}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "imagenet", "readOnly": True}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}},
    ]
    container = {
        "name": "tensorflow",
        "image": "registry.example.com:5000/ml/train:2.1",
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "/app/train.py"],
        "args": ["--epochs", "3"],
        "env": [
            {"name": "WANDB_PROJECT", "value": "mnist"},
            {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "key"}}},
            {"name": "NCCL_DEBUG", "value": "INFO"},
        ],
        "envFrom": [{"secretRef": {"name": "wandb"}}, {"configMapRef": {"name": "mlflow"}, "prefix": "MLFLOW_"}],
        "resources": {"limits": {"nvidia.com/gpu": 1, "cpu": "4", "memory": "16Gi"}},
        "ports": [{"name": "tfjob-port", "containerPort": 2222}],
        "volumeMounts": [
            {"name": "runs", "mountPath": "/runs"},
            {"name": "data", "mountPath": "/data", "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }
    pod = {
        "containers": [container],
        "volumes": volumes,
        "schedulerName": "volcano",
        "nodeSelector": {"pool": "a100"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}]
                }
            }
        },
        "priorityClassName": "training",
        "imagePullSecrets": [{"name": "regcred"}],
        "serviceAccountName": "trainer",
        "terminationGracePeriodSeconds": 300,
    }
    replica = {"restartPolicy": "OnFailure", "template": {"metadata": {"labels": {"app": "mnist"}}, "spec": pod}}
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "imagenet", "namespace": "team-a", "labels": {"team": "ml"}},
        "spec": {
            "runPolicy": {
                "backoffLimit": 5,
                "activeDeadlineSeconds": 86400,
                "cleanPodPolicy": "Running",
                "schedulingPolicy": {"minAvailable": 4, "queue": "training"},
            },
            "tfReplicaSpecs": {"Chief": {**replica, "replicas": 1}, "Worker": {**replica, "replicas": 3}},
        },
    }
    conversion = tfjob.convert(job)
    assert conversion.unmapped == []
    result = rendered(conversion)
    spec = worker_pod(result.objects)
    main = worker(spec)
    assert spec["replicas"] == 4
    assert main["image"] == "registry.example.com:5000/ml/train:2.1"
    assert main["args"] == ["python", "/app/train.py", "--epochs", "3"]
    assert {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "key"}}} in main["env"]
    assert {"name": "NCCL_DEBUG", "value": "INFO"} in main["env"]
    assert main["envFrom"] == container["envFrom"]
    assert main["resources"]["limits"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 1}
    assert {"name": "data", "mountPath": "/data", "readOnly": True} in main["volumeMounts"]
    assert spec["schedulerName"] == "volcano" and spec["priorityClassName"] == "training"
    assert spec["nodeSelector"] == {"pool": "a100"} and spec["serviceAccountName"] == "trainer"
    [group] = [o for o in result.objects if o["kind"] == "PodGroup"]
    assert group["spec"]["minMember"] == 4 and group["spec"]["queue"] == "training"
    assert {"name": "TFMW_MAX_RESTARTS", "value": "5"} in main["env"]
    assert {"name": "TFMW_ACTIVE_DEADLINE_SECONDS", "value": "86400"} in main["env"]


def test_a_tfjob_of_the_built_in_trainer_with_an_evaluator_renders_the_charts_evaluator():
    container = {
        "name": "tensorflow",
        "image": "ghcr.io/tf-multiworker/tf-multiworker:0.1.0-cpu",
        "command": ["python", "-m", "entrypoint.training"],
        "volumeMounts": [{"name": "runs", "mountPath": "/shared"}],
    }
    template = {
        "spec": {
            "containers": [container],
            "volumes": [{"name": "runs", "persistentVolumeClaim": {"claimName": "runs"}}],
        }
    }
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "builtin"},
        "spec": {
            "tfReplicaSpecs": {
                "Worker": {"replicas": 2, "template": template},
                "Evaluator": {"replicas": 1, "template": template},
            }
        },
    }
    conversion = tfjob.convert(job)
    assert conversion.unmapped == []
    objects = rendered(conversion).objects
    [evaluator] = [o for o in objects if o["kind"] == "Job" and "evaluator" in o["metadata"]["name"]]
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in evaluator["spec"]["template"]["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    ]
    assert claims == ["runs"]
