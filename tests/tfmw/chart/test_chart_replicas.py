"""How many workers the chart asks for (templates/_replicas.tpl): workers.replicas, 0 when
suspended, and 0 once the status the chief recorded says this run Succeeded — so a re-render
(a GitOps controller's upgrade, `make deploy` of the same values) never brings a finished run's
pods back to claim their GPUs. Rendered with the install-time lookup answered by a stand-in API
server (tests/support/stubapi), with the real Helm 3 and 4."""

from __future__ import annotations

import pytest
import stubapi
from chartkit import NAMESPACE, one

from tfmw.chart import helmkit

FULLNAME = "tfmw-tf-multiworker"
# a model that outlives the pods, so completion.onSuccess=auto is scaleToZero
CLAIM = ("workers.gpus=0", "workers.replicas=3", "storage.type=createClaim")


def status(phase: str, run_id: str = "tfmw") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {  # the release's own object, as Helm labels it (Helm 4 checks before a dry run)
            "name": f"{FULLNAME}-status",
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": "tfmw", "meta.helm.sh/release-namespace": NAMESPACE},
        },
        "data": {"runId": run_id, "phase": phase, "step": "100"},
    }


def replicas(helm: str, tmp_path, objects: list[dict], sets=CLAIM) -> int:
    with stubapi.serving(objects, tmp_path) as kubeconfig:
        result = stubapi.server_render(helm, kubeconfig, sets)
    assert result.returncode == 0, result.stderr
    return one(helmkit.parse_manifests(result.stdout), "StatefulSet", FULLNAME)["spec"]["replicas"]


def test_a_succeeded_run_asks_for_no_workers(helm, tmp_path):
    assert replicas(helm, tmp_path, [status("Succeeded")]) == 0


@pytest.mark.parametrize(
    "objects",
    [
        pytest.param([], id="no-status-yet"),
        pytest.param([status("Running")], id="running"),
        pytest.param([status("Failed")], id="failed-keeps-its-idle-workers"),
        pytest.param([status("Succeeded", run_id="run-6")], id="another-run-succeeded"),
    ],
)
def test_a_run_not_succeeded_asks_for_its_workers(helm, tmp_path, objects):
    assert replicas(helm, tmp_path, objects) == 3


def test_a_new_run_id_trains_after_a_succeeded_one(helm, tmp_path):
    assert replicas(helm, tmp_path, [status("Succeeded")], CLAIM + ("training.runId=run-8",)) == 3
    assert replicas(helm, tmp_path, [status("Succeeded", "run-8")], CLAIM + ("training.runId=run-8",)) == 0


def test_idle_on_success_keeps_its_pods_by_choice(helm, tmp_path):
    assert replicas(helm, tmp_path, [status("Succeeded")], CLAIM + ("completion.onSuccess=idle",)) == 3


def test_suspend_asks_for_none(helm, tmp_path):
    assert replicas(helm, tmp_path, [status("Running")], CLAIM + ("suspend=true",)) == 0


def test_offline_render_asks_for_workers_replicas(helm, render):
    objects = render(helm, sets=CLAIM)
    assert one(objects, "StatefulSet", FULLNAME)["spec"]["replicas"] == 3
