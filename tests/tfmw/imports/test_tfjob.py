"""tfmw.imports.tfjob, rule by rule, on small hand-written TFJobs (pure: no helm, no files)."""

from __future__ import annotations

import copy

import pytest
import yaml

from tfmw.imports import tfjob

DIGEST = "sha256:" + "a" * 64


def job(worker: dict | None = None, replicas: int = 2, **spec) -> dict:
    """A TFJob of `replicas` Workers whose container is `worker` over a plain default; other
    replica specs and spec keys (runPolicy, Chief, ...) as keyword arguments."""
    container = {"name": "tensorflow", "image": "registry.example.com/ml/train:1", "command": ["python", "/app/t.py"]}
    container.update(worker or {})
    specs = {
        "Worker": {
            "replicas": replicas,
            "restartPolicy": "OnFailure",
            "template": {"spec": {"containers": [container]}},
        }
    }
    for kind in ("Chief", "Master", "PS", "Evaluator"):
        if kind in spec:
            specs[kind] = spec.pop(kind)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "mnist", "namespace": "team-a"},
        "spec": {"tfReplicaSpecs": specs, **spec},
    }


def pod_of(manifest: dict) -> dict:
    return manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]


def converted(manifest: dict, command=None) -> tfjob.Conversion:
    conversion = tfjob.convert(manifest, command)
    assert conversion.refusal == ""
    return conversion


def refusal(manifest: dict, command=None) -> str:
    conversion = tfjob.convert(manifest, command)
    assert conversion.refusal and conversion.overlay == {}
    assert "\n" not in conversion.refusal
    return conversion.refusal


def unmapped_paths(conversion: tfjob.Conversion) -> list[str]:
    return [line.split(": ", 1)[0] for line in conversion.unmapped]


# ---------------------------------------------------------------- replicas


def test_workers_are_the_chief_and_the_workers_since_the_charts_worker_0_is_the_chief():
    chief = {"replicas": 1, "template": copy.deepcopy(job()["spec"]["tfReplicaSpecs"]["Worker"]["template"])}
    chief["restartPolicy"] = "OnFailure"
    assert converted(job(replicas=3, Chief=chief)).overlay["workers"]["replicas"] == 4
    assert converted(job(replicas=0, Master=chief)).overlay["workers"]["replicas"] == 1


def test_a_replica_spec_without_replicas_is_one_as_in_the_operator():
    manifest = job()
    del manifest["spec"]["tfReplicaSpecs"]["Worker"]["replicas"]
    assert converted(manifest).overlay["workers"]["replicas"] == 1


def test_replica_types_are_read_in_any_case_as_the_operator_does():
    manifest = job()
    manifest["spec"]["tfReplicaSpecs"]["worker"] = manifest["spec"]["tfReplicaSpecs"].pop("Worker")
    assert converted(manifest).overlay["workers"]["replicas"] == 2


def test_a_chief_that_differs_from_the_workers_is_listed_and_the_workers_template_used():
    chief = copy.deepcopy(job()["spec"]["tfReplicaSpecs"]["Worker"])
    chief["replicas"] = 1
    chief["template"]["spec"]["containers"][0]["image"] = "registry.example.com/ml/chief:1"
    chief["template"]["spec"]["nodeSelector"] = {"pool": "cpu"}
    conversion = converted(job(Chief=chief))
    assert conversion.overlay["image"]["repository"] == "registry.example.com/ml/train"
    assert "nodeSelector" not in conversion.overlay["workers"]
    assert unmapped_paths(conversion) == [
        "spec.tfReplicaSpecs.Chief.template.spec.nodeSelector",
        "spec.tfReplicaSpecs.Chief.template.spec.containers[0].image",
    ]


def test_an_evaluator_is_listed_not_refused():
    evaluator = copy.deepcopy(job()["spec"]["tfReplicaSpecs"]["Worker"])
    evaluator["replicas"] = 1
    conversion = converted(job(Evaluator=evaluator))
    assert conversion.overlay["workers"]["replicas"] == 2
    assert "evaluator" not in conversion.overlay
    [line] = conversion.unmapped
    assert line.startswith("spec.tfReplicaSpecs.Evaluator: not run") and "evaluator.enabled" in line


def test_an_evaluator_of_the_built_in_trainer_is_the_charts_evaluator():
    builtin = {"command": ["python", "-m", "entrypoint.training"]}
    evaluator = copy.deepcopy(job(builtin)["spec"]["tfReplicaSpecs"]["Worker"])
    evaluator["replicas"] = 1
    evaluator["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "2Gi"}}
    evaluator["template"]["spec"]["nodeSelector"] = {"pool": "cpu"}
    conversion = converted(job(builtin, Evaluator=evaluator))
    assert conversion.overlay["workers"]["replicas"] == 2
    assert conversion.overlay["evaluator"] == {
        "enabled": True,
        "resources": {"limits": {"cpu": "1", "memory": "2Gi"}},
        "nodeSelector": {"pool": "cpu"},
    }
    assert conversion.unmapped == []


# ---------------------------------------------------------------- refusals


def test_a_parameter_server_job_is_refused_saying_why_and_what_to_change():
    ps = copy.deepcopy(job()["spec"]["tfReplicaSpecs"]["Worker"])
    ps["replicas"] = 1
    text = refusal(job(PS=ps))
    assert text.startswith("spec.tfReplicaSpecs.PS: 1 parameter server(s)")
    assert "MultiWorkerMirroredStrategy, which has no parameter servers" in text
    assert "drop the PS replica spec" in text


def test_a_ps_spec_of_zero_replicas_is_no_parameter_server():
    ps = copy.deepcopy(job()["spec"]["tfReplicaSpecs"]["Worker"])
    ps["replicas"] = 0
    assert converted(job(PS=ps)).overlay["workers"]["replicas"] == 2


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda j: j["spec"]["tfReplicaSpecs"].update(Chief={"replicas": 2}),
            "Chief.replicas is 2: TensorFlow has one chief",
        ),
        (
            lambda j: j["spec"]["tfReplicaSpecs"].update(Chief={"replicas": 1}, Master={"replicas": 1}),
            "both Chief and Master",
        ),
        (lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].update(replicas=0), "no Chief, Master or Worker replica"),
        (lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].update(replicas="two"), "'two' is not a number of replicas"),
        (lambda j: j["spec"]["tfReplicaSpecs"].update(Launcher={}), "Launcher: not a TFJob replica type"),
        (lambda j: j["spec"].pop("tfReplicaSpecs"), "spec.tfReplicaSpecs is missing"),
        (lambda j: pod_of(j).update(containers=[]), "containers is empty"),
        (lambda j: pod_of(j)["containers"][0].pop("image"), "containers[0].image is missing"),
        (
            lambda j: pod_of(j)["containers"][0].update(resources={"limits": {"nvidia.com/gpu": "1.5"}}),
            "'1.5' is not a whole number of GPUs",
        ),
        (lambda j: pod_of(j)["containers"][0].update(image="train@sha256:abc"), "is not sha256:<64 hex>"),
    ],
    ids=[
        "two-chiefs",
        "chief-and-master",
        "no-workers",
        "bad-replicas",
        "unknown-type",
        "no-specs",
        "no-container",
        "no-image",
        "fractional-gpu",
        "bad-digest",
    ],
)
def test_a_job_that_could_not_run_is_refused_in_one_line(change, expected):
    manifest = job()
    change(manifest)
    assert expected in refusal(manifest)


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        (job(runPolicy={"backoffLimit": "three"}), "spec.runPolicy.backoffLimit: 'three' is not a whole number"),
        (job(runPolicy={"activeDeadlineSeconds": -1}), "spec.runPolicy.activeDeadlineSeconds: -1 is not a whole"),
        (
            job({"ports": [{"name": "tfjob-port", "containerPort": "grpc"}]}),
            "containers[0].ports[0].containerPort: 'grpc' is not a whole number",
        ),
        (job({"env": "A=1"}), "containers[0].env: a str where Kubernetes takes a list"),
        (job({"volumeMounts": {"name": "x"}}), "containers[0].volumeMounts: a dict where Kubernetes takes a list"),
        (job({"env": ["A=1"]}), "containers[0].env: every item must be a map"),
        (job({"envFrom": {"secretRef": {"name": "k"}}}), "containers[0].envFrom: a dict where Kubernetes takes a list"),
        (job({"resources": ["cpu"]}), "not a valid TFJob: a field has the wrong type"),
    ],
    ids=[
        "backoff-text",
        "negative-deadline",
        "port-name",
        "env-string",
        "mounts-map",
        "env-items",
        "env-from-map",
        "resources-list",
    ],
)
def test_a_field_of_the_wrong_type_is_refused_in_one_line_never_a_traceback(manifest, expected):
    assert expected in refusal(manifest)


def test_no_command_is_refused_naming_the_command_option_and_the_value():
    manifest = job()
    pod_of(manifest)["containers"][0].pop("command")
    text = refusal(manifest)
    assert "names no command" in text and "--command" in text and "training.command" in text
    pod_of(manifest)["containers"][0]["args"] = ["--epochs", "3"]
    assert "names no command (only args)" in refusal(manifest)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("spec: [unclosed", "not YAML (line 1)"),
        ("", "no document in it"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n", "no TFJob in it (found ConfigMap c)"),
        (
            "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: p}\n",
            "no TFJob in it (found PyTorchJob p): only a TensorFlow job",
        ),
        ("apiVersion: kubeflow.org/v1beta1\nkind: TFJob\nmetadata: {name: t}\n", "apiVersion 'kubeflow.org/v1beta1'"),
        (
            "kind: TFJob\napiVersion: kubeflow.org/v1\n---\nkind: TFJob\napiVersion: kubeflow.org/v1\n",
            "2 TFJobs in one",
        ),
    ],
    ids=["not-yaml", "empty", "other-kind", "pytorchjob", "old-api", "two-tfjobs"],
)
def test_a_file_that_is_no_single_v1_tfjob_is_refused(text, expected):
    conversion = tfjob.convert_text(text)
    assert expected in conversion.refusal
    assert conversion.overlay == {}


def test_other_documents_in_the_file_are_ignored_each_with_a_note():
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"}}
    conversion = tfjob.convert_text(yaml.safe_dump_all([pvc, job()]))
    assert conversion.refusal == ""
    assert conversion.overlay["workers"]["replicas"] == 2
    assert conversion.notes[0] == (
        "document 1 (PersistentVolumeClaim data) ignored: not a TFJob; apply it yourself if the job needs it"
    )


# ---------------------------------------------------------------- image and command


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("kubeflow/tf-mnist", {"repository": "kubeflow/tf-mnist", "tag": "latest"}),
        ("registry:5000/ml/train", {"repository": "registry:5000/ml/train", "tag": "latest"}),
        ("registry:5000/ml/train:2.1", {"repository": "registry:5000/ml/train", "tag": "2.1"}),
        (f"ml/train@{DIGEST}", {"repository": "ml/train", "digest": DIGEST}),
        (f"ml/train:2@{DIGEST}", {"repository": "ml/train", "tag": "2", "digest": DIGEST}),
    ],
)
def test_the_image_is_split_into_repository_tag_and_digest_as_the_chart_wants(image, expected):
    conversion = converted(job({"image": image, "imagePullPolicy": "IfNotPresent"}))
    assert conversion.overlay["image"] == {**expected, "pullPolicy": "IfNotPresent"}
    assert any("build the image FROM the chart's" in note for note in conversion.notes)


def test_command_and_args_become_training_command_and_args():
    overlay = converted(job({"command": ["python", "t.py"], "args": ["--steps", 5]})).overlay
    assert overlay["training"]["command"] == ["python", "t.py"]
    assert overlay["training"]["args"] == ["--steps", "5"]


def test_the_command_option_supplies_the_images_command_or_replaces_the_jobs():
    manifest = job({"args": ["--epochs", "2"]})
    pod_of(manifest)["containers"][0].pop("command")
    overlay = converted(manifest, ["python", "/app/train.py"]).overlay
    assert overlay["training"] == {"command": ["python", "/app/train.py"], "args": ["--epochs", "2"]}
    replaced = converted(job(), ["python", "/app/other.py"])
    assert replaced.overlay["training"]["command"] == ["python", "/app/other.py"]
    assert "--command replaced spec.tfReplicaSpecs.Worker.template.spec.containers[0].command python /app/t.py" in (
        replaced.notes
    )


def test_the_tensorflow_container_is_the_main_one_and_the_others_are_sidecars():
    manifest = job()
    main = pod_of(manifest)["containers"][0]
    pod_of(manifest)["containers"] = [{"name": "log-shipper", "image": "fluent-bit:3"}, main]
    overlay = converted(manifest).overlay
    assert overlay["image"]["repository"] == "registry.example.com/ml/train"
    assert overlay["workers"]["sidecars"] == [{"name": "log-shipper", "image": "fluent-bit:3"}]


# ---------------------------------------------------------------- env


def test_env_goes_to_extra_env_with_value_from_and_what_the_chart_sets_is_listed():
    env = [
        {"name": "WANDB_PROJECT", "value": "mnist"},
        {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "key"}}},
        {"name": "TF_CONFIG", "value": "{}"},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        {"name": "NCCL_DEBUG", "value": "INFO"},
        {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"},
    ]
    conversion = converted(job({"env": env}))
    assert conversion.overlay["workers"]["extraEnv"] == env[:2]
    assert conversion.overlay["workers"]["nccl"] == {"debug": "INFO", "socketIfname": "eth0"}
    assert unmapped_paths(conversion) == [
        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].env[2] TF_CONFIG",
        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].env[3] NVIDIA_VISIBLE_DEVICES",
    ]


def test_env_from_is_workers_extra_env_from_as_given():
    sources = [
        {"secretRef": {"name": "keys"}},
        {"configMapRef": {"name": "mlflow", "optional": True}, "prefix": "MLFLOW_"},
    ]
    conversion = converted(job({"envFrom": sources}))
    assert conversion.overlay["workers"]["extraEnvFrom"] == sources
    assert conversion.unmapped == []


# ---------------------------------------------------------------- resources


def test_the_gpu_limit_is_workers_gpus_and_the_rest_is_workers_resources():
    resources = {"limits": {"nvidia.com/gpu": 2, "cpu": "8", "memory": "32Gi"}, "requests": {"cpu": "4"}}
    workers = converted(job({"resources": resources})).overlay["workers"]
    assert workers["gpus"] == 2
    # a limit without a request is also the request (Kubernetes' default), never the chart's default
    assert workers["resources"] == {
        "requests": {"cpu": "4", "memory": "32Gi"},
        "limits": {"cpu": "8", "memory": "32Gi"},
    }


def test_a_request_without_a_limit_deletes_the_charts_default_limit():
    workers = converted(job({"resources": {"requests": {"cpu": "16", "memory": "64Gi"}}})).overlay["workers"]
    assert workers["resources"] == {
        "requests": {"cpu": "16", "memory": "64Gi"},
        "limits": {"cpu": None, "memory": None},
    }
    assert "gpus" not in workers


def test_no_resources_keeps_the_charts_defaults_and_says_so():
    conversion = converted(job())
    assert "resources" not in conversion.overlay["workers"]
    assert any(
        note.startswith("workers.resources: the TFJob's container sets no CPU or memory") for note in conversion.notes
    )


# ---------------------------------------------------------------- volumes


def with_volumes(volumes: list, mounts: list) -> dict:
    manifest = job({"volumeMounts": mounts})
    pod_of(manifest)["volumes"] = volumes
    return manifest


def test_the_one_writable_claim_is_the_charts_shared_storage():
    conversion = converted(
        with_volumes(
            [{"name": "training", "persistentVolumeClaim": {"claimName": "runs"}}],
            [{"name": "training", "mountPath": "/train"}],
        )
    )
    assert conversion.overlay["storage"] == {
        "type": "existingClaim",
        "existingClaim": {"claimName": "runs"},
        "mountPath": "/train",
    }
    assert "extraVolumes" not in conversion.overlay["workers"]
    assert any(note.startswith("storage: the claim runs at /train") for note in conversion.notes)


def test_read_only_claims_and_a_second_writable_claim_are_extra_volumes():
    volumes = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "imagenet", "readOnly": True}},
        {"name": "a", "persistentVolumeClaim": {"claimName": "a"}},
        {"name": "b", "persistentVolumeClaim": {"claimName": "b"}},
    ]
    mounts = [
        {"name": "data", "mountPath": "/data", "readOnly": True},
        {"name": "a", "mountPath": "/a"},
        {"name": "b", "mountPath": "/b"},
    ]
    overlay = converted(with_volumes(volumes, mounts)).overlay
    assert "storage" not in overlay
    assert overlay["workers"]["extraVolumes"] == volumes
    assert overlay["workers"]["extraVolumeMounts"] == mounts


def test_a_host_path_volume_is_listed_with_its_mount_and_left_out():
    volumes = [{"name": "host", "hostPath": {"path": "/mnt"}}, {"name": "cfg", "configMap": {"name": "cfg"}}]
    mounts = [{"name": "host", "mountPath": "/mnt"}, {"name": "cfg", "mountPath": "/etc/cfg"}]
    conversion = converted(with_volumes(volumes, mounts))
    assert conversion.overlay["workers"]["extraVolumes"] == volumes[1:]
    assert conversion.overlay["workers"]["extraVolumeMounts"] == mounts[1:]
    assert unmapped_paths(conversion) == [
        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].volumeMounts[0] /mnt",
        "spec.tfReplicaSpecs.Worker.template.spec.volumes[0] host",
    ]


def test_a_memory_dev_shm_is_the_charts_shm():
    conversion = converted(
        with_volumes(
            [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}],
            [{"name": "dshm", "mountPath": "/dev/shm"}],
        )
    )
    assert conversion.overlay["workers"]["shm"] == {"sizeLimit": "8Gi"}
    assert "extraVolumes" not in conversion.overlay["workers"]
    assert conversion.unmapped == []


# ---------------------------------------------------------------- the pod


def test_placement_keys_map_one_to_one_onto_workers():
    manifest = job()
    placement = {
        "nodeSelector": {"pool": "a100"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {}},
        "priorityClassName": "training",
        "runtimeClassName": "nvidia",
        "terminationGracePeriodSeconds": 300,
    }
    pod_of(manifest).update(placement, imagePullSecrets=[{"name": "regcred"}], serviceAccountName="trainer")
    conversion = converted(manifest)
    assert {k: conversion.overlay["workers"][k] for k in placement} == placement
    assert conversion.overlay["imagePullSecrets"] == [{"name": "regcred"}]
    assert conversion.overlay["serviceAccount"] == {"create": False, "name": "trainer"}
    assert conversion.unmapped == []


def test_pod_labels_and_annotations_and_the_jobs_labels():
    manifest = job()
    manifest["metadata"]["labels"] = {"team": "ml"}
    manifest["metadata"]["annotations"] = {"owner": "me"}
    manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"] = {
        "labels": {"app": "mnist"},
        "annotations": {"sidecar.istio.io/inject": "false"},
    }
    conversion = converted(manifest)
    assert conversion.overlay["commonLabels"] == {"team": "ml"}
    assert conversion.overlay["workers"]["podLabels"] == {"app": "mnist"}
    assert conversion.overlay["workers"]["podAnnotations"] == {"sidecar.istio.io/inject": "false"}
    assert conversion.overlay["target"] == {"release": "mnist", "namespace": "team-a"}
    assert unmapped_paths(conversion) == ["metadata.annotations.owner"]


@pytest.mark.parametrize(
    ("scheduler", "expected"),
    [
        ("volcano", {"gang": "volcano"}),
        ("scheduler-plugins-scheduler", {"gang": "coscheduling"}),
        ("my-scheduler", {"schedulerName": "my-scheduler"}),
    ],
)
def test_the_scheduler_name_chooses_the_charts_gang_where_it_renders_one(scheduler, expected):
    manifest = job()
    pod_of(manifest)["schedulerName"] = scheduler
    assert converted(manifest).overlay["scheduling"] == expected


def test_a_kueue_queue_label_is_the_kueue_gang():
    manifest = job()
    manifest["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-a", "kueue.x-k8s.io/priority-class": "high"}
    overlay = converted(manifest).overlay
    assert overlay["scheduling"] == {"gang": "kueue", "kueue": {"queueName": "team-a", "priorityClass": "high"}}
    assert "commonLabels" not in overlay


def test_pod_and_container_keys_the_chart_has_no_value_for_are_listed():
    manifest = job(
        {
            "workingDir": "/app",
            "livenessProbe": {"exec": {"command": ["true"]}},
            "ports": [
                {"name": "tfjob-port", "containerPort": 2223},
                {"name": "http", "containerPort": 8080},
            ],
        }
    )
    pod_of(manifest).update(hostNetwork=True, dnsPolicy="None")
    conversion = converted(manifest)
    assert conversion.overlay["workers"]["port"] == 2223
    where = "spec.tfReplicaSpecs.Worker.template.spec"
    assert unmapped_paths(conversion) == [
        f"{where}.containers[0].livenessProbe",
        f"{where}.containers[0].ports[1] http",
        f"{where}.containers[0].workingDir",
        f"{where}.dnsPolicy",
        f"{where}.hostNetwork",
    ]


# ---------------------------------------------------------------- runPolicy and restartPolicy


def test_backoff_limit_and_deadline_and_suspend():
    overlay = converted(job(runPolicy={"backoffLimit": 3, "activeDeadlineSeconds": 7200, "suspend": True})).overlay
    assert overlay["training"]["maxRestarts"] == 3
    assert overlay["training"]["activeDeadlineSeconds"] == 7200
    assert overlay["suspend"] is True


def test_restart_policy_never_is_listed_not_copied_since_the_chart_restarts_the_group_in_place():
    """Never is about one pod: copied as maxRestarts 0 it would switch off the restarts in place
    from the last checkpoint for nearly every job. Listed (stderr and header) with how to match it."""
    manifest = job()
    manifest["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "Never"
    conversion = converted(manifest)
    assert "maxRestarts" not in conversion.overlay["training"]
    [line] = conversion.unmapped
    assert line.startswith("spec.tfReplicaSpecs.Worker.restartPolicy Never: a TFJob's restartPolicy is about one pod")
    assert line.endswith("to restart nothing, as Never did, set training.maxRestarts: 0")
    header = tfjob.overlay_yaml(conversion, "mnist.yaml")
    assert "#   - restartPolicy Never is not copied: a TFJob's restartPolicy is about one pod" in header


def test_backoff_limit_is_max_restarts_with_restart_policy_never_too():
    manifest = job(runPolicy={"backoffLimit": 3})
    manifest["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "Never"
    conversion = converted(manifest)
    assert conversion.overlay["training"]["maxRestarts"] == 3
    assert unmapped_paths(conversion) == ["spec.tfReplicaSpecs.Worker.restartPolicy Never"]


@pytest.mark.parametrize("restart", ["OnFailure", "Always", "ExitCode"])
def test_restarting_policies_keep_the_launchers_restarts(restart):
    manifest = job()
    manifest["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = restart
    conversion = converted(manifest)
    assert "maxRestarts" not in conversion.overlay["training"]
    assert conversion.unmapped == []


def test_clean_pod_policy_none_and_ttl_are_listed_all_is_the_charts_own_behaviour():
    assert converted(job(runPolicy={"cleanPodPolicy": "All"})).unmapped == []
    conversion = converted(job(runPolicy={"cleanPodPolicy": "None", "ttlSecondsAfterFinished": 60}))
    assert unmapped_paths(conversion) == [
        "spec.runPolicy.cleanPodPolicy None",
        "spec.runPolicy.ttlSecondsAfterFinished",
    ]


def test_a_scheduling_policy_maps_onto_the_volcano_gang():
    manifest = job(runPolicy={"schedulingPolicy": {"minAvailable": 2, "queue": "training", "priorityClass": "high"}})
    pod_of(manifest)["schedulerName"] = "volcano"
    conversion = converted(manifest)
    assert conversion.overlay["scheduling"] == {"gang": "volcano", "volcano": {"queue": "training"}}
    assert conversion.overlay["workers"]["priorityClassName"] == "high"
    assert conversion.unmapped == []


def test_a_smaller_min_available_is_listed_since_the_chart_gangs_every_worker():
    manifest = job(runPolicy={"schedulingPolicy": {"minAvailable": 1, "scheduleTimeoutSeconds": 30}})
    pod_of(manifest)["schedulerName"] = "scheduler-plugins-scheduler"
    conversion = converted(manifest)
    assert conversion.overlay["scheduling"]["coscheduling"] == {"scheduleTimeoutSeconds": 30}
    assert unmapped_paths(conversion) == ["spec.runPolicy.schedulingPolicy.minAvailable 1"]


def test_a_scheduling_policy_without_a_gang_scheduler_is_listed():
    conversion = converted(job(runPolicy={"schedulingPolicy": {"minAvailable": 2}}))
    assert "scheduling" not in conversion.overlay
    [line] = conversion.unmapped
    assert line.startswith("spec.runPolicy.schedulingPolicy: ") and "scheduling.gang" in line


def test_the_overlay_file_has_a_header_naming_its_source_and_the_notes():
    conversion = converted(job())
    text = tfjob.overlay_yaml(conversion, "mnist.yaml")
    assert text.startswith(
        "# Values overlay for charts/tf-multiworker, converted by `tfmw import tfjob` from mnist.yaml."
    )
    assert yaml.safe_load(text) == conversion.overlay
    assert all(len(line) <= 110 for line in text.splitlines() if line.startswith("#   "))
