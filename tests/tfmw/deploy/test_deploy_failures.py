"""How `tfmw deploy` and friends explain a failure in one line: a missing kube context, a stopped
local cluster, a value the API server refuses, a failed install or upgrade and what it left.

The helm error strings below are verbatim from Helm 4.1.4 and 3.17.2 against the local control
plane (scripts/tfmw/devcluster); tests/e2e/cluster/test_cluster_ops.py produces them for real."""

from __future__ import annotations

import pytest
from deploykit import assert_one_line_error, run_cli

from tfmw.chart import render
from tfmw.deploy import helm as deploy_helm

REQUESTS_OVER_LIMIT = (
    'StatefulSet.apps "bad-tf-multiworker" is invalid: spec.template.spec.containers[0]'
    '.resources.requests: Invalid value: "2": must be less than or equal to cpu limit of 1'
)
BAD_LABEL = (
    'StatefulSet.apps "bad-tf-multiworker" is invalid: spec.template.labels: Invalid value: "-bad-": '
    "a valid label must be an empty string or consist of alphanumeric characters"
)


@pytest.mark.parametrize(
    "helm_line",
    [
        f"release bad failed, and has been uninstalled due to rollback-on-failure being set: {REQUESTS_OVER_LIMIT}",
        f"release bad failed, and has been uninstalled due to atomic being set: failed to create resource: "
        f"{REQUESTS_OVER_LIMIT}",
        f"UPGRADE FAILED: release bad failed, and has been rolled back due to atomic being set: "
        f'cannot patch "bad-tf-multiworker" with kind StatefulSet: {REQUESTS_OVER_LIMIT}',
    ],
    ids=["helm4-install", "helm3-install", "helm3-upgrade"],
)
def test_api_refusal_names_the_object_the_field_and_the_value_to_change(helm_line):
    line, invalid = deploy_helm.api_refusal(deploy_helm.helm_failure_cause(helm_line))
    assert invalid
    assert line == (
        "the API server refused StatefulSet bad-tf-multiworker: field "
        "spec.template.spec.containers[0].resources.requests (values: workers.resources / "
        'workers.gpus): Invalid value: "2": must be less than or equal to cpu limit of 1'
    )


def test_helm3s_list_of_errors_is_kept_on_the_one_line():
    stderr = (
        "Error: release bad failed, and has been uninstalled due to atomic being set: 1 error occurred:\n"
        f"\t* {REQUESTS_OVER_LIMIT}\n\n"
    )
    text = deploy_helm.helm_error_text(stderr)
    assert text == (
        f"release bad failed, and has been uninstalled due to atomic being set: 1 error occurred: {REQUESTS_OVER_LIMIT}"
    )
    line, _ = deploy_helm.api_refusal(deploy_helm.helm_failure_cause(text))
    assert line.startswith("the API server refused StatefulSet bad-tf-multiworker: field spec.template.spec")
    assert deploy_helm.helm_error_text("Error: one line\n") == "one line"


def test_api_refusal_of_a_pod_label_points_at_workers_pod_labels():
    line, _ = deploy_helm.api_refusal(BAD_LABEL)
    assert "StatefulSet bad-tf-multiworker: field spec.template.labels (values: workers.podLabels)" in line
    assert 'Invalid value: "-bad-"' in line


def test_forbidden_is_a_refusal_but_not_bad_input():
    line, invalid = deploy_helm.api_refusal(
        'pods "x-test-peers" is forbidden: exceeded quota: compute, requested: cpu=1, limited: cpu=0'
    )
    assert not invalid
    assert line == "the API server forbade pods x-test-peers: exceeded quota: compute, requested: cpu=1, limited: cpu=0"


def test_a_timeout_is_no_refusal_and_loses_only_the_rollback_preamble():
    helm4 = (
        "release gpu failed, and has been uninstalled due to rollback-on-failure being set: resource "
        "StatefulSet/ml/gpu-tf-multiworker not ready. status: InProgress, message: Ready: 0/2"
    )
    cause = deploy_helm.helm_failure_cause(helm4)
    assert cause == "resource StatefulSet/ml/gpu-tf-multiworker not ready. status: InProgress, message: Ready: 0/2"
    assert deploy_helm.api_refusal(cause) is None
    assert deploy_helm.helm_failure_cause("context deadline exceeded") == "context deadline exceeded"
    upgrade = f"UPGRADE FAILED: {helm4.replace('uninstalled', 'rolled back')}"
    assert deploy_helm.helm_failure_cause(upgrade) == cause


def status(version: int, state: str) -> dict:
    return {"name": "rel", "version": version, "info": {"status": state}}


def test_after_a_failed_install_says_it_was_uninstalled_and_what_stays():
    assert (
        deploy_helm.after_failure(
            "rel", "ml", previous=None, now=None, rollback=True, namespace_created=False, pods_left=0
        )
        == "the failed install was rolled back: release rel was uninstalled with its objects, no worker pod is left"
    )
    line = deploy_helm.after_failure(
        "rel", "ml", previous=None, now=None, rollback=True, namespace_created=True, pods_left=2, kept=["rel-shared"]
    )
    assert line == (
        "the failed install was rolled back: release rel was uninstalled, 2 worker pods still "
        "terminating; kept by helm.sh/resource-policy: PersistentVolumeClaim rel-shared (the shared "
        "storage; a later deploy reuses it, `kubectl delete pvc rel-shared -n ml` removes it); "
        "namespace ml, created by this deploy, is left: `kubectl delete namespace ml` removes it"
    )


def test_after_a_failed_upgrade_says_which_revision_runs_again():
    assert deploy_helm.after_failure(
        "rel",
        "ml",
        previous=status(3, "deployed"),
        now=status(5, "deployed"),
        rollback=True,
        namespace_created=False,
        pods_left=0,
    ) == (
        "rolled back: release rel is deployed again as revision 5, the configuration of revision 3 "
        "that ran before this deploy"
    )


def test_after_a_failure_without_rollback_says_it_was_kept_and_how_to_clean_up():
    fresh = deploy_helm.after_failure(
        "rel", "ml", previous=None, now=status(1, "failed"), rollback=False, namespace_created=False, pods_left=0
    )
    assert fresh.startswith("kept for debugging (--no-rollback): release rel revision 1 is failed")
    assert "`helm uninstall rel -n ml`" in fresh
    upgrade = deploy_helm.after_failure(
        "rel",
        "ml",
        previous=status(3, "deployed"),
        now=status(4, "failed"),
        rollback=False,
        namespace_created=False,
        pods_left=0,
    )
    assert "`helm rollback rel 3 -n ml`" in upgrade


def test_kept_claims_of_the_local_overlay():
    """values/local.yaml keeps its shared claim (resource-policy keep): a rolled-back install leaves it."""
    objects = render.render("local", release="rel", namespace="ml")
    assert deploy_helm.kept_claims(objects) == ["rel-tf-multiworker-shared"]
    assert deploy_helm.kept_claims(render.render("local", ["storage.createClaim.keep=false"])) == []


def test_missing_context_lists_the_contexts_there_are():
    stderr = 'Error: Kubernetes cluster unreachable: context "nope" does not exist\n'
    line = deploy_helm.missing_context_message(stderr, ["tfmw-local", "prod"], "KUBECONFIG=/k")
    assert line == (
        "kube context 'nope' does not exist in KUBECONFIG=/k (its contexts are tfmw-local, prod); "
        "pass --kube-context / KUBE_CONTEXT= one of them, or point KUBECONFIG at the right file"
    )
    assert deploy_helm.missing_context_message("Error: connection refused", [], "x") is None


def test_a_refused_connection_to_the_local_cluster_suggests_make_cluster():
    stderr = (
        'Error: Kubernetes cluster unreachable: Get "https://198.19.0.1:6443/version": dial tcp '
        "198.19.0.1:6443: connect: connection refused\n"
    )
    local = deploy_helm.unreachable_message(stderr, "kube context 'tfmw-local', server https://198.19.0.1:6443")
    assert local.endswith("is the local cluster running? `make cluster` starts it (`make cluster-down` stopped it)")
    other = deploy_helm.unreachable_message(stderr, "kube context 'prod', server https://198.19.0.1:6443")
    assert "make cluster" not in other


@pytest.mark.parametrize("command", [["status"], ["logs"], ["undeploy"], ["deploy", "--env", "local"]])
def test_a_missing_kube_context_is_named_with_the_ones_there_are(command, unreachable_kubeconfig):
    """Offline: the context does not exist in the kubeconfig, so no cluster is dialled at all."""
    kubeconfig, context, _ = unreachable_kubeconfig
    proc = run_cli(*command, "--kube-context", "nope", env={"KUBECONFIG": str(kubeconfig)})
    assert_one_line_error(
        proc, command[0], "kube context 'nope' does not exist in KUBECONFIG=", f"(its contexts are {context})"
    )
    assert proc.returncode == 3


def test_a_kubeconfig_that_is_gone_is_named_not_localhost_8080():
    assert deploy_helm.missing_kubeconfig_message("/a:/b", exists=lambda p: p == "/b") is None
    assert deploy_helm.missing_kubeconfig_message(None) is None
    line = deploy_helm.missing_kubeconfig_message("/gone/kubeconfig", exists=lambda p: False)
    assert line.startswith("KUBECONFIG=/gone/kubeconfig does not exist, so there is no cluster to talk to")


@pytest.mark.parametrize("command", [["deploy", "--env", "local"], ["status"]])
def test_after_cluster_down_the_removed_kubeconfig_is_the_error(command, tmp_path):
    """`make cluster-down` removes the state folder with its kubeconfig; an exported KUBECONFIG
    still names it. Without the file helm dials localhost:8080; the error says what happened."""
    proc = run_cli(*command, env={"KUBECONFIG": str(tmp_path / "gone" / "kubeconfig")})
    assert_one_line_error(
        proc, command[0], f"KUBECONFIG={tmp_path}/gone/kubeconfig does not exist", "`make cluster-down`"
    )
    assert "localhost:8080" not in proc.stderr and proc.returncode == 3
