"""The chart's side of disruptions: the readinessProbe that means "in a group that trains", the
suspend switch, the retry counter, the autoscalers' annotations, the grace period the launcher
checks. Rendered by the real helm 3 and 4."""

from __future__ import annotations

import chartkit
import pytest
from chartkit import env_of, one

SHARED = ("storage.type=createClaim",)


def worker(objects) -> dict:
    return one(objects, "StatefulSet")["spec"]["template"]


def test_workers_are_ready_only_through_the_launchers_ready_endpoint(helm, render):
    (container,) = worker(render(helm))["spec"]["containers"]
    assert container["readinessProbe"] == {
        "httpGet": {"path": "/ready", "port": "metrics"},
        "periodSeconds": 5,
        "timeoutSeconds": 2,
        "failureThreshold": 1,
    }
    assert "readinessProbe" not in worker(render(helm, sets=("metrics.enabled=false",)))["spec"]["containers"][0]


def test_suspend_removes_every_worker_and_pauses_the_evaluator(helm, render):
    sets = (*SHARED, "evaluator.enabled=true")
    running = render(helm, sets=sets)
    suspended = render(helm, sets=(*sets, "suspend=true"))
    assert (
        one(running, "StatefulSet")["spec"]["replicas"] == 2 and one(suspended, "StatefulSet")["spec"]["replicas"] == 0
    )
    assert one(running, "Job")["spec"]["suspend"] is False and one(suspended, "Job")["spec"]["suspend"] is True
    # the pod template is the same: resuming re-creates the same revision, not a new attempt
    assert worker(running) == worker(suspended)


def test_a_retry_is_a_new_pod_template(helm, render):
    assert "tf-multiworker/retry" not in worker(render(helm))["metadata"]["annotations"]
    assert worker(render(helm, sets=("training.retry=3",)))["metadata"]["annotations"]["tf-multiworker/retry"] == "3"


@pytest.mark.parametrize(
    "sets,annotations",
    [
        ((), {}),
        (("workers.disruption.safeToEvict=false",), {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}),
        (("workers.disruption.safeToEvict=true",), {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}),
        (("workers.disruption.doNotDisrupt=true",), {"karpenter.sh/do-not-disrupt": "true"}),
    ],
)
def test_the_autoscalers_annotations_are_off_by_default(helm, render, sets, annotations):
    rendered = worker(render(helm, sets=sets))["metadata"]["annotations"]
    keys = ("cluster-autoscaler.kubernetes.io/safe-to-evict", "karpenter.sh/do-not-disrupt")
    assert {k: v for k, v in rendered.items() if k in keys} == annotations


def test_the_launcher_knows_the_grace_period_it_checks(helm, render):
    template = worker(render(helm, sets=("workers.terminationGracePeriodSeconds=300",)))
    assert template["spec"]["terminationGracePeriodSeconds"] == 300
    assert env_of(template["spec"]["containers"][0])["TFMW_GRACE_SECONDS"]["value"] == "300"


@pytest.mark.parametrize(
    "sets,says",
    [
        (("workers.podAnnotations.tf-multiworker/retry=x",), "workers.podAnnotations.tf-multiworker/retry: the chart"),
        (("workers.podAnnotations.karpenter\\.sh/do-not-disrupt=yes",), "set the value there"),
        (("workers.extraEnv[0].name=TFMW_GRACE_SECONDS", "workers.extraEnv[0].value=x"), "derived from values"),
        (("suspend=yes",), "suspend"),
        (("training.retry=-1",), "retry"),
        (("workers.disruption.safeToEvict=maybe",), "safeToEvict"),
    ],
)
def test_what_the_chart_sets_itself_is_refused(helm, sets, says):
    assert says in chartkit.template_error(helm, sets=sets)


def test_a_stalled_group_can_still_be_drained(helm, render):
    # Every worker is NotReady while its group stalls: only AlwaysAllow lets a drain evict them.
    spec = one(render(helm), "PodDisruptionBudget")["spec"]
    assert (spec["maxUnavailable"], spec["unhealthyPodEvictionPolicy"]) == (1, "AlwaysAllow")
    sets = ("podDisruptionBudget.unhealthyPodEvictionPolicy=IfHealthyBudget",)
    chosen = one(render(helm, sets=sets), "PodDisruptionBudget")["spec"]
    assert chosen["unhealthyPodEvictionPolicy"] == "IfHealthyBudget"
    refused = chartkit.template_error(helm, sets=("podDisruptionBudget.unhealthyPodEvictionPolicy=Never",))
    assert "unhealthyPodEvictionPolicy" in refused
