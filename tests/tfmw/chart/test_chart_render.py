"""The chart renders, for every overlay, with Helm 4 and Helm 3, into what the entrypoint expects."""

from __future__ import annotations

import asyncio

import chartkit
import pyhelm3
import pytest
import yaml
from chartkit import NAMESPACE, OVERLAYS, RELEASE, env_of, find, one, overlay_path

FULLNAME = f"{RELEASE}-tf-multiworker"


def worker_container(objects):
    sts = one(objects, "StatefulSet")
    containers = sts["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "worker")


@pytest.mark.parametrize("env", OVERLAYS)
def test_every_overlay_renders_a_statefulset_and_headless_service(helm, render, env):
    objects = render(helm, overlay_path(env))
    overlay = yaml.safe_load(overlay_path(env).read_text())
    sts = one(objects, "StatefulSet", FULLNAME)
    svc = one(objects, "Service", FULLNAME)
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert sts["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "100%"
    assert sts["spec"]["serviceName"] == svc["metadata"]["name"]
    assert sts["spec"]["replicas"] == overlay["workers"]["replicas"]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["ports"] == [{"name": "grpc", "port": 2222, "targetPort": "grpc", "protocol": "TCP"}]
    # The Service selects exactly the StatefulSet's pods.
    assert svc["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
    template_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert sts["spec"]["selector"]["matchLabels"].items() <= template_labels.items()
    for obj in objects:
        assert obj["metadata"]["namespace"] == NAMESPACE, obj["kind"]


def test_container_command_args_and_env_follow_the_contract(helm, render):
    objects = render(helm, overlay_path("local"), sets=("training.runId=run-7", "training.args={--set,steps=10}"))
    container = worker_container(objects)
    assert container["command"] == ["python", "-m", "entrypoint", "run", "--"]
    assert container["args"] == ["python", "-m", "entrypoint.training", "--set", "steps=10"]
    env = env_of(container)
    assert env["TFMW_POD_NAME"] == {"name": "TFMW_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    assert env["TFMW_NAMESPACE"] == {
        "name": "TFMW_NAMESPACE",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
    }
    plain = {name: item["value"] for name, item in env.items() if name.startswith("TFMW_") and "value" in item}
    assert plain == {
        "TFMW_STATEFULSET": FULLNAME,
        "TFMW_SERVICE": FULLNAME,
        "TFMW_PORT": "2222",
        "TFMW_KEEP_LOG_MIB": "10",
        "TFMW_METRICS_PORT": "9090",
        "TFMW_CLUSTER_DOMAIN": "cluster.local",
        "TFMW_PEER_TIMEOUT_SECONDS": "120",
        "TFMW_MAX_RESTARTS": "20",
        "TFMW_SAME_ERROR_LIMIT": "2",
        "TFMW_HANG_TIMEOUT_SECONDS": "600",
        "TFMW_HANG_DETECTION": "adaptive",
        "TFMW_TRAINING_CONFIG": "/etc/tf-multiworker/training.yaml",
        "TFMW_SHARED_DIR": "/shared",
        "TFMW_RUN_ID": "run-7",
        "TFMW_ADOPT_RUN_DIR": "false",
        "TFMW_ON_SUCCESS": "scaleToZero",
        "TFMW_ON_FAILURE": "scaleToZero",
        "TFMW_ACTIVE_DEADLINE_SECONDS": "0",
        "TFMW_GRACE_SECONDS": "120",
        "TFMW_WARM_STANDBY": "auto",
        "TFMW_API_DIR": "/var/run/secrets/tf-multiworker/api",
        "TFMW_STATUS_CONFIGMAP": f"{FULLNAME}-status",
    }
    assert env["TFMW_POD_REVISION"] == {
        "name": "TFMW_POD_REVISION",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['controller-revision-hash']"}},
    }
    assert container["ports"][0] == {"name": "grpc", "containerPort": 2222, "protocol": "TCP"}


def test_values_reach_the_env_and_ports(helm, tmp_path):
    extra = tmp_path / "extra-env.yaml"
    extra.write_text(yaml.safe_dump({"workers": {"extraEnv": [{"name": "EXTRA", "value": "yes"}]}}))
    objects = chartkit.template(
        helm,
        [extra],
        sets=(
            "workers.replicas=5",
            "workers.port=3333",
            "clusterDomain=corp.example",
            "peers.timeoutSeconds=42",
            "storage.mountPath=/data/shared",
            "training.maxRestarts=3",
            "training.hangTimeoutSeconds=0",
            "training.adoptRunDir=true",
        ),
    )
    container = worker_container(objects)
    env = {name: item.get("value") for name, item in env_of(container).items()}
    # with API access the launchers read the size from the StatefulSet (a resize: docs/failure-model.md)
    assert "TFMW_REPLICAS" not in env
    assert next(o for o in objects if o["kind"] == "StatefulSet")["spec"]["replicas"] == 5
    assert env["TFMW_PORT"] == "3333"
    assert env["TFMW_CLUSTER_DOMAIN"] == "corp.example"
    assert env["TFMW_PEER_TIMEOUT_SECONDS"] == "42"
    assert env["TFMW_SHARED_DIR"] == "/data/shared"
    assert env["TFMW_RUN_ID"] == RELEASE  # default: the release name
    assert env["EXTRA"] == "yes"
    assert env["TFMW_MAX_RESTARTS"] == "3"
    assert env["TFMW_HANG_TIMEOUT_SECONDS"] == "0"
    assert env["TFMW_ADOPT_RUN_DIR"] == "true"
    assert container["ports"][0]["containerPort"] == 3333
    assert {"name": "shared", "mountPath": "/data/shared"} in container["volumeMounts"]
    svc = one(objects, "Service", FULLNAME)
    assert svc["spec"]["ports"][0]["port"] == 3333


def test_training_config_is_a_mounted_configmap(helm, render):
    objects = render(helm, sets=("training.config.model.name=mlp", "training.config.steps=20"))
    cm = one(objects, "ConfigMap", f"{FULLNAME}-training")
    assert yaml.safe_load(cm["data"]["training.yaml"]) == {"model": {"name": "mlp"}, "steps": 20}
    spec = one(objects, "StatefulSet")["spec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if v.get("configMap"))
    assert volume["configMap"]["name"] == cm["metadata"]["name"]
    mount = next(m for m in worker_container(objects)["volumeMounts"] if m["name"] == volume["name"])
    assert mount["readOnly"] is True
    config_path = env_of(worker_container(objects))["TFMW_TRAINING_CONFIG"]["value"]
    assert config_path == mount["mountPath"] + "/training.yaml"


def test_config_change_rolls_the_workers(helm, render):
    def checksum(objects):
        return one(objects, "StatefulSet")["spec"]["template"]["metadata"]["annotations"]["checksum/training-config"]

    assert checksum(render(helm)) != checksum(render(helm, sets=("training.config.steps=1",)))


@pytest.mark.parametrize("gpus,expected", [(0, None), (2, 2)])
def test_gpu_limit_comes_from_workers_gpus(helm, render, gpus, expected):
    # workers.gpus is the one switch (a count in workers.resources is refused: test_chart_bad_values).
    objects = render(helm, sets=(f"workers.gpus={gpus}",))
    resources = worker_container(objects)["resources"]
    assert resources["limits"].get("nvidia.com/gpu") == expected
    assert "nvidia.com/gpu" not in resources.get("requests", {})


def test_image_digest_wins_over_tag(helm, render):
    digest = "sha256:" + "a" * 64
    tagged = worker_container(render(helm, sets=("image.repository=reg.example/tfmw", "image.tag=1.2.3")))
    assert tagged["image"] == "reg.example/tfmw:1.2.3"
    pinned = worker_container(
        render(helm, sets=("image.repository=reg.example/tfmw", "image.tag=1.2.3", f"image.digest={digest}"))
    )
    assert pinned["image"] == f"reg.example/tfmw@{digest}"
    local = worker_container(render(helm, sets=("image.repository=localhost:5000/ml__team/tf-mw",)))
    assert local["image"] == "localhost:5000/ml__team/tf-mw:0.1.0-cpu"
    # An empty tag: the variant `make image` tags for these workers (appVersion, -cpu without GPUs).
    default = worker_container(render(helm))
    assert default["image"].endswith(":0.1.0-cpu")  # workers.gpus defaults to 0
    gpu = worker_container(render(helm, sets=("workers.gpus=1",)))
    assert gpu["image"].endswith(":0.1.0")
    assert worker_container(render(helm, sets=("workers.gpus=1", "image.tag=0.1.0-cpu")))["image"].endswith(
        ":0.1.0-cpu"
    )


def test_scheduling_values_reach_the_pod(helm, render):
    objects = render(
        helm,
        overlay_path("prod"),
        sets=(
            "imagePullSecrets[0].name=regcred",
            "workers.podLabels.team=ml",
            "workers.podAnnotations.note=x",
            "workers.topologySpreadConstraints[0].maxSkew=1",
            "workers.topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
            "workers.topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
        ),
    )
    template = one(objects, "StatefulSet")["spec"]["template"]
    spec = template["spec"]
    selector = one(objects, "StatefulSet")["spec"]["selector"]["matchLabels"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    (constraint,) = spec["topologySpreadConstraints"]
    # A constraint without a labelSelector gets the workers' selector.
    assert constraint["labelSelector"]["matchLabels"] == selector
    # prod: one worker per node, required (workers.podAntiAffinity=hard)
    assert spec["affinity"]["podAntiAffinity"] == {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": selector}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
    assert template["metadata"]["labels"]["team"] == "ml"
    assert template["metadata"]["annotations"]["note"] == "x"
    assert worker_container(objects)["resources"]["limits"]["nvidia.com/gpu"] == 4


def test_standard_labels_on_every_object(helm, render):
    stable = (
        "app.kubernetes.io/name",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/component",
        "app.kubernetes.io/managed-by",
    )
    versioned = ("app.kubernetes.io/version", "helm.sh/chart")
    for obj in render(helm, overlay_path("prod")):
        labels = obj["metadata"]["labels"]
        # A pod (the helm test pod) carries the stable labels only: see test_chart_upgrade_stability.
        expected = stable if obj["kind"] == "Pod" else stable + versioned
        for key in expected:
            assert key in labels, f"{obj['kind']}/{obj['metadata']['name']} lacks {key}"
        assert labels["app.kubernetes.io/instance"] == RELEASE


def test_fullname_override_and_long_release_names(helm):
    objects = chartkit.template(helm, sets=("fullnameOverride=trainer",))
    assert one(objects, "StatefulSet")["metadata"]["name"] == "trainer"
    assert env_of(worker_container(objects))["TFMW_SERVICE"]["value"] == "trainer"
    long_release = "r" * 53
    objects = chartkit.template(helm, release=long_release)
    name = one(objects, "StatefulSet")["metadata"]["name"]
    assert len(name) <= 52 and not name.endswith("-")


def test_release_name_starting_with_a_digit_is_refused_with_the_fix(helm):
    error = chartkit.template_error(helm, release="1abc")
    assert "fullnameOverride" in error and "DNS-1035" in error


@pytest.mark.parametrize("helm_name", sorted(chartkit.HELMS))
def test_pyhelm3_renders_every_overlay(helm_name):
    """The host tools render through pyhelm3: the same chart works through its API."""
    client = pyhelm3.Client(executable=chartkit.HELMS[helm_name]())

    async def render_all():
        chart = await client.get_chart(chartkit.CHART)
        assert chart.metadata.name == "tf-multiworker"
        rendered = {}
        for env in OVERLAYS:
            overlay = yaml.safe_load(overlay_path(env).read_text())
            if (overlay.get("image") or {}).get("requireDigest"):  # prod: the release pipeline's digest
                overlay["image"]["digest"] = chartkit.STAND_IN_DIGEST
            rendered[env] = [
                o for o in await client.template_resources(chart, RELEASE, overlay, namespace=NAMESPACE) if o
            ]
        return rendered

    for env, objects in asyncio.run(render_all()).items():
        overlay = yaml.safe_load(overlay_path(env).read_text())
        sts = one(objects, "StatefulSet", FULLNAME)
        assert sts["spec"]["replicas"] == overlay["workers"]["replicas"], env
        assert find(objects, "Service", FULLNAME), env


# The chart defaults and every overlay file there is (not only the OVERLAYS the other tests name).
SHIPPED_VALUES = {"chart-defaults": [], **{p.stem: [p] for p in sorted(chartkit.VALUES_DIR.glob("*.yaml"))}}


@pytest.mark.parametrize("name", sorted(SHIPPED_VALUES))
def test_overlay_training_config_passes_the_trainers_own_validation(helm, render, name):
    """The ConfigMap the workers read is a config the built-in trainer accepts."""
    from entrypoint.training import config as trainer_config

    objects = render(helm, *SHIPPED_VALUES[name])
    rendered = yaml.safe_load(one(objects, "ConfigMap", f"{FULLNAME}-training")["data"]["training.yaml"])
    trainer_config.validate(rendered)
