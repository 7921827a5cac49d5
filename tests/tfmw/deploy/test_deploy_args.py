"""Helm 3 / Helm 4 argument construction, checked against the real binaries' flag parsing."""

from __future__ import annotations

import os
import subprocess

import pytest
from deploykit import HELM3, HELM4

from tfmw.chart.helmkit import ToolError
from tfmw.deploy import helm as deploy_helm


def test_helm3_upgrade_uses_atomic_and_boolean_wait():
    args = deploy_helm.upgrade_args(3, "rel", "/c", "ml", timeout="7m")
    assert args[:4] == ["upgrade", "rel", "/c", "--install"]
    assert "--atomic" in args and "--wait" in args
    assert "--rollback-on-failure" not in args and "--wait=watcher" not in args
    assert args[args.index("--timeout") + 1] == "7m"
    assert args[args.index("--namespace") + 1] == "ml" and "--create-namespace" in args
    assert args[args.index("--values") + 1] == "-"


def test_helm4_upgrade_uses_rollback_on_failure_and_watcher_wait():
    args = deploy_helm.upgrade_args(4, "rel", "/c", "ml")
    assert "--rollback-on-failure" in args and "--wait=watcher" in args
    assert "--atomic" not in args and "--wait" not in args


@pytest.mark.parametrize("major", [3, 4])
def test_no_wait_drops_rollback_since_both_helms_would_wait_for_it(major):
    args = deploy_helm.upgrade_args(major, "rel", "/c", "ml", wait=False)
    assert not [a for a in args if a.startswith(("--wait", "--atomic", "--rollback"))]


@pytest.mark.parametrize("major", [3, 4])
def test_no_rollback_keeps_waiting(major):
    args = deploy_helm.upgrade_args(major, "rel", "/c", "ml", rollback_on_failure=False)
    assert [a for a in args if a.startswith("--wait")] == (["--wait"] if major == 3 else ["--wait=watcher"])
    assert "--atomic" not in args and "--rollback-on-failure" not in args


def test_unsupported_helm_major_is_refused():
    with pytest.raises(ValueError):
        deploy_helm.upgrade_args(2, "rel", "/c", "ml")


def run_helm(helm: str, args: list[str], kubeconfig) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "HELM_CACHE_HOME": str(kubeconfig.parent / "cache"),
        "HELM_CONFIG_HOME": str(kubeconfig.parent / "config"),
    }
    return subprocess.run([helm, *args], input="{}", capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("helm,major", [(HELM4, 4), (HELM3, 3)], ids=["helm4", "helm3"])
def test_real_helm_accepts_the_flags_it_is_given(helm, major, mini_chart, unreachable_kubeconfig):
    """Flags parse (no 'unknown flag'/'invalid argument'): helm gets as far as dialling the cluster."""
    kubeconfig, _, server = unreachable_kubeconfig
    for args in (
        deploy_helm.upgrade_args(major, "rel", mini_chart, "ml"),
        deploy_helm.upgrade_args(major, "rel", mini_chart, "ml", wait=False),
        deploy_helm.uninstall_args(major, "rel", "ml"),
    ):
        proc = run_helm(helm, args, kubeconfig)
        assert proc.returncode != 0
        assert "connection refused" in proc.stderr and server.split("//")[1] in proc.stderr, proc.stderr
        assert "deprecated" not in proc.stderr


def test_real_helm3_rejects_helm4_spelling(mini_chart, unreachable_kubeconfig):
    """The check above can fail: Helm 3 refuses `--wait=watcher` before dialling anything."""
    kubeconfig, _, _ = unreachable_kubeconfig
    proc = run_helm(HELM3, deploy_helm.upgrade_args(4, "rel", mini_chart, "ml"), kubeconfig)
    assert proc.returncode != 0 and "connection refused" not in proc.stderr
    assert 'invalid argument "watcher" for "--wait"' in proc.stderr


def test_real_helm4_only_deprecates_helm3_spelling(mini_chart, unreachable_kubeconfig):
    """Helm 4.1 still parses `--atomic` but warns; the Helm 4 arguments must not trigger it."""
    kubeconfig, _, _ = unreachable_kubeconfig
    old = run_helm(HELM4, deploy_helm.upgrade_args(3, "rel", mini_chart, "ml"), kubeconfig)
    assert "Flag --atomic has been deprecated" in old.stderr
    new = run_helm(HELM4, deploy_helm.upgrade_args(4, "rel", mini_chart, "ml"), kubeconfig)
    assert "deprecated" not in new.stderr


@pytest.mark.parametrize(
    "state,revision,fix",
    [
        ("pending-upgrade", 4, "`helm rollback rel 3 -n ml`"),
        ("pending-rollback", 6, "`helm rollback rel 5 -n ml`"),
        ("pending-install", 1, "`helm uninstall rel -n ml` (nothing to roll back to)"),
        ("uninstalling", 2, "`helm uninstall rel -n ml` to finish"),
    ],
)
def test_release_stuck_pending_is_refused_with_the_fix(state, revision, fix):
    with pytest.raises(ToolError) as err:
        deploy_helm.refuse_pending("rel", "ml", {"version": revision, "info": {"status": state}})
    assert f"stuck in {state} (revision {revision})" in str(err.value) and fix in str(err.value)
    assert err.value.exit_code == 3


@pytest.mark.parametrize("state", ["deployed", "failed", "superseded"])
def test_settled_release_may_be_upgraded(state):
    deploy_helm.refuse_pending("rel", "ml", {"version": 3, "info": {"status": state}})


def test_kube_target_names_context_and_server(unreachable_kubeconfig, monkeypatch):
    kubeconfig, context, server = unreachable_kubeconfig
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert deploy_helm.kube_target() == f"kube context '{context}', server {server}"
    assert "not in KUBECONFIG=" in deploy_helm.kube_target("missing-ctx")
    assert deploy_helm.kube_contexts() == [context]
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig.parent / "missing"))
    assert deploy_helm.kube_target() == f"no current kube context in KUBECONFIG={kubeconfig.parent / 'missing'}"
    assert deploy_helm.kube_contexts() == []


def test_unreachable_message_is_one_line_with_the_target():
    stderr = (
        'Error: Kubernetes cluster unreachable: Get "https://10.0.0.1:6443/version": '
        "dial tcp 10.0.0.1:6443: connect: connection refused\n"
    )
    assert deploy_helm.is_unreachable(stderr)
    msg = deploy_helm.unreachable_message(stderr, "kube context 'prod', server https://10.0.0.1:6443")
    assert msg.startswith("cluster unreachable (kube context 'prod', server https://10.0.0.1:6443): Get ")
    assert "\n" not in msg


def cm(name: str, data: dict, hook: bool = False) -> dict:
    meta = {"name": name, "namespace": "ml"}
    if hook:
        meta["annotations"] = {"helm.sh/hook": "test"}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def test_diff_shows_changed_added_and_removed_objects_but_not_hooks():
    recorded = [cm("same", {"a": "1"}), cm("changed", {"replicas": "2"}), cm("gone", {})]
    rendered = [cm("same", {"a": "1"}), cm("changed", {"replicas": "4"}), cm("new", {}), cm("test-pod", {}, hook=True)]
    text = deploy_helm.diff_manifests(recorded, rendered)
    assert "-  replicas: '2'" in text and "+  replicas: '4'" in text
    assert "rendered: ConfigMap ml/new" in text and "deployed: ConfigMap ml/gone" in text
    assert "same" not in text and "test-pod" not in text
    assert deploy_helm.diff_manifests(recorded, recorded) == ""


@pytest.mark.parametrize(
    "sets,expected",
    [
        ("storage.type=createClaim", "kept: PersistentVolumeClaim rel-tf-multiworker-shared"),
        (
            "storage.type=createClaim,storage.createClaim.keep=false",
            "deleted with the release: PersistentVolumeClaim rel-tf-multiworker-shared",
        ),
        (
            "storage.type=existingClaim,storage.existingClaim.claimName=team-data",
            "existing PersistentVolumeClaim team-data: not part of the release, untouched",
        ),
        ("storage.type=emptyDir", "was an emptyDir: it was deleted with the pods"),
        (
            "storage.type=objectStore,storage.objectStore.uri=gs://bucket/tfmw",
            "shared storage gs://bucket/tfmw (outside the cluster",
        ),
    ],
)
def test_uninstall_reports_what_happens_to_shared_storage(sets, expected):
    """Read from the real chart's rendering for each storage type."""
    from tfmw.chart import render

    objects = render.render("dev", [sets], release="rel", namespace="ml")
    lines = deploy_helm.storage_after_uninstall(objects, "ml")
    assert len(lines) == 1 and expected in lines[0], lines
    if "kept:" in expected:
        assert "`kubectl delete pvc rel-tf-multiworker-shared -n ml`" in lines[0]
