"""A release with its own kubeconfig (Release.kubeconfig: the fault harness's cluster): helm, the
API client, the context check and the one-line cluster failures all read that file, never the
KUBECONFIG of the environment. Without one, they read the kubeconfig in use, as before."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tfmw.chart.helmkit import ToolError
from tfmw.deploy import context as deploy_context
from tfmw.deploy import helm as deploy_helm
from tfmw.deploy import release

UNREACHABLE = 'Error: Kubernetes cluster unreachable: Get "https://127.0.0.1:1/version": dial tcp: connection refused'


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """The environment's KUBECONFIG names a file that is not there."""
    missing = tmp_path / "elsewhere" / "kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    return missing


def test_a_release_names_its_kubeconfig_as_tfmw_k8s_does():
    assert release.Release().kubeconfig is None and release.Release().kubeconfig_env is None
    rel = release.Release(kubeconfig=Path("/k/config"))
    assert rel.kubeconfig_env == "/k/config"


def test_the_api_client_and_the_offline_reads_use_the_releases_kubeconfig(unreachable_kubeconfig, elsewhere):
    kubeconfig, context, server = unreachable_kubeconfig
    rel = release.Release(name="r", namespace="ns", kubeconfig=kubeconfig)
    target = f"kube context '{context}', server {server}"
    assert release.api(rel.kube_context, rel.kubeconfig_env).target == target
    assert release.api_or_none(rel.kube_context, rel.kubeconfig_env).target == target
    assert deploy_helm.kube_target(rel.kube_context, rel.kubeconfig_env) == target
    assert deploy_helm.kube_contexts(rel.kubeconfig_env) == [context]
    assert deploy_context.in_use(rel.kube_context, rel.kubeconfig_env) == deploy_context.InUse(context, server)


def test_without_a_kubeconfig_the_one_in_use_is_read(unreachable_kubeconfig, elsewhere):
    rel = release.Release(name="r", namespace="ns")
    with pytest.raises(ToolError, match=f"KUBECONFIG={elsewhere} does not exist"):
        release.api(rel.kube_context, rel.kubeconfig_env)
    assert release.api_or_none(rel.kube_context, rel.kubeconfig_env) is None
    assert deploy_context.in_use(rel.kube_context, rel.kubeconfig_env) is None


def test_an_unreachable_cluster_is_named_from_the_releases_kubeconfig(unreachable_kubeconfig, elsewhere):
    kubeconfig, context, server = unreachable_kubeconfig
    failure = release.cluster_failure(UNREACHABLE, None, str(kubeconfig))
    assert failure.exit_code == 3
    assert str(failure).startswith(f"cluster unreachable (kube context '{context}', server {server}): ")
    # the environment's kubeconfig, which is not there, is what a release without one is told about
    assert f"KUBECONFIG={elsewhere} does not exist" in str(release.cluster_failure(UNREACHABLE, None))


@pytest.mark.parametrize("own", [True, False], ids=["own-kubeconfig", "in-use"])
def test_helm_gets_the_releases_kubeconfig(tmp_path, own):
    helm = tmp_path / "helm"
    helm.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')  # prints the arguments it was given
    helm.chmod(0o755)
    kubeconfig = tmp_path / "cluster" / "kubeconfig"
    rel = release.Release(name="r", namespace="ns", kube_context="ctx", kubeconfig=kubeconfig if own else None)
    argv = asyncio.run(release.helm_command(rel, str(helm)).run(["status", "r"])).decode().split("\n")[:-1]
    expected = ["status", "r"] + (["--kubeconfig", str(kubeconfig)] if own else []) + ["--kube-context", "ctx"]
    assert argv == expected
