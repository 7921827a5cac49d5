"""workers.extraEnvFrom: Secrets and ConfigMaps whole as the workers' (and the evaluator's)
environment, and the probe the chart renders first in the worker's env so the launcher can
refuse a reserved key at run time (entrypoint/envfrom.py). The probe is checked as the kubelet
would expand it (kubeletkit) and read with the launcher's own parse."""

from __future__ import annotations

import chartkit
import pytest
from kubeletkit import kubelet_expand

from entrypoint import envfrom, settings

WANDB = ("workers.extraEnvFrom[0].secretRef.name=wandb",)
MLFLOW = (
    "workers.extraEnvFrom[1].configMapRef.name=mlflow",
    "workers.extraEnvFrom[1].configMapRef.optional=true",
    "workers.extraEnvFrom[1].prefix=MLFLOW_",
)
OBJECT_STORE = (
    "storage.type=objectStore",
    "storage.objectStore.uri=gs://bucket/runs",
    "storage.objectStore.existingSecret=gcs-creds",
)
GPU = ("workers.gpus=1", "workers.nccl.debug=INFO", "workers.nccl.socketIfname=eth0")


def worker(objects: list[dict]) -> dict:
    return chartkit.one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]


def evaluator(objects: list[dict]) -> dict:
    return chartkit.one(objects, "Job")["spec"]["template"]["spec"]["containers"][0]


@pytest.fixture(scope="module")
def helm() -> str:
    return chartkit.helm4()


def test_the_sources_are_the_worker_and_evaluator_envfrom_after_the_object_store_secret(render, helm):
    objects = render(helm, sets=(*OBJECT_STORE, *WANDB, *MLFLOW, "evaluator.enabled=true"))
    expected = [
        {"secretRef": {"name": "gcs-creds"}},
        {"secretRef": {"name": "wandb"}},
        {"configMapRef": {"name": "mlflow", "optional": True}, "prefix": "MLFLOW_"},
    ]
    assert worker(objects)["envFrom"] == expected
    assert evaluator(objects)["envFrom"] == expected


def test_the_probe_is_first_in_env_only_where_there_is_an_envfrom(render, helm):
    assert "envFrom" not in worker(render(helm))
    assert all(e["name"] != envfrom.PROBE for e in worker(render(helm))["env"])
    for sets in (WANDB, OBJECT_STORE):
        assert worker(render(helm, sets=sets))["env"][0]["name"] == envfrom.PROBE, sets


def test_the_probe_asks_about_every_name_the_chart_sets_and_every_one_the_launcher_reads(render, helm):
    container = worker(
        render(helm, sets=(*GPU, *WANDB, "workers.extraEnv[0].name=OWN", "workers.extraEnv[0].value=on"))
    )
    probe = container["env"][0]["value"]
    names = probe.split("|", 1)[0].split(",")
    assert probe == envfrom.probe_value(names)
    rendered = {e["name"] for e in container["env"]} - {"OWN"}  # the user's own may shadow their Secret
    assert {"CUDA_CACHE_PATH", "NCCL_DEBUG", "NCCL_SOCKET_IFNAME"} <= rendered
    assert rendered <= set(names), sorted(rendered - set(names))
    assert {var.name for var in settings.ENV} | {"TF_CONFIG"} <= set(names)


def test_the_probe_as_the_kubelet_expands_it_names_exactly_the_reserved_keys(render, helm):
    probe = worker(render(helm, sets=WANDB))["env"][0]["value"]
    assert envfrom.collisions(kubelet_expand(probe, {"WANDB_API_KEY": "k", "MLFLOW_URI": "$(TF_CONFIG)"})) == []
    secret = {"WANDB_API_KEY": "k", "TF_CONFIG": "{}|x", "TFMW_PORT": "1", "TFMW_ENVFROM_PROBE": ""}
    assert envfrom.collisions(kubelet_expand(probe, secret)) == ["TFMW_PORT", "TFMW_ENVFROM_PROBE", "TF_CONFIG"]


def test_a_secret_given_whole_has_its_checkov_skip_and_a_configmap_needs_none(render, helm):
    def skips(sets) -> list[str]:
        annotations = chartkit.one(render(helm, sets=sets), "StatefulSet")["metadata"]["annotations"]
        return [v for k, v in annotations.items() if k.startswith("checkov.io/skip") and "CKV_K8S_35" in v]

    assert len(skips(WANDB)) == 1 and "workers.extraEnvFrom" in skips(WANDB)[0]
    assert skips(("workers.extraEnvFrom[0].configMapRef.name=mlflow",)) == []
    assert len(skips((*OBJECT_STORE, *WANDB))) == 1  # one skip of the rule, not two
