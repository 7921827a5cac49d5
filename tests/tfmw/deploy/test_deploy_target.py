"""One release per environment: the overlay's `target` block names the release, namespace and
kube context (tfmw.chart.target), and deploy/undeploy refuse a cluster the environment is not
meant for (tfmw.deploy.context). No cluster: the kubeconfigs point at closed loopback ports or
at addresses nothing here dials."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from deploykit import REPO, assert_one_line_error, closed_port, run_cli

from tfmw.chart import render
from tfmw.chart.target import Target, target_of
from tfmw.deploy import context


def test_every_environment_is_its_own_release_in_its_own_namespace():
    targets = {env: render.prepare(env).target for env in render.known_envs()}
    assert {(t.release, t.namespace) for t in targets.values()} == {
        ("tf-multiworker", "default"),
        ("tf-multiworker-dev", "tfmw-dev"),
        ("tf-multiworker-staging", "tfmw-staging"),
        ("tf-multiworker-prod", "tfmw-prod"),
    }
    assert targets["prod"].kube_context == "prod"  # prod is tied to a context of its own
    # The run id follows the release, so no two environments share a run directory.
    run_ids = {
        env: next(
            e["value"]
            for o in render.prepare(env).find("StatefulSet")
            for e in o["spec"]["template"]["spec"]["containers"][0]["env"]
            if e["name"] == "TFMW_RUN_ID"
        )
        for env in targets
    }
    assert run_ids == {env: t.release for env, t in targets.items()}


def test_the_command_line_wins_and_says_so():
    values = {"target": {"release": "r-dev", "namespace": "ns-dev", "kubeContext": "dev"}}
    assert target_of(values, "values/dev.yaml") == Target(
        "r-dev", "ns-dev", "dev", "values/dev.yaml", "values/dev.yaml target"
    )
    mixed = target_of(values, "values/dev.yaml", namespace="other")
    assert (mixed.release, mixed.namespace, mixed.origin) == (
        "r-dev",
        "other",
        "release: values/dev.yaml target, namespace: --namespace",
    )
    assert target_of({}, "values/x.yaml") == Target(
        "tf-multiworker", "default", "", "values/x.yaml", "the chart's default"
    )


PROD = Target("tf-multiworker-prod", "tfmw-prod", "prod", "values/prod.yaml", "values/prod.yaml target")
LOCAL = Target("tf-multiworker", "default", "", "values/local.yaml", "values/local.yaml target")
REMOTE = context.InUse("gke-ml-dev", "https://34.1.2.3")


def test_a_context_other_than_the_overlays_is_refused_naming_both():
    with pytest.raises(render.ToolError) as refused:
        context.check(PROD, REMOTE, env_named=True, any_context=False, verb="deploy")
    message = str(refused.value)
    assert message.startswith(
        "values/prod.yaml is meant for kube context 'prod' (target.kubeContext), and the context in use is "
        "'gke-ml-dev' (server https://34.1.2.3)"
    )
    assert "KUBE_CONTEXT=prod" in message and "ANY_CONTEXT=1" in message and refused.value.exit_code == 2
    context.check(PROD, context.InUse("prod", "https://34.9.9.9"), env_named=True, any_context=False, verb="deploy")
    context.check(PROD, REMOTE, env_named=True, any_context=True, verb="deploy")  # the explicit override


def test_no_env_sends_the_local_overlay_only_to_a_local_cluster():
    with pytest.raises(render.ToolError) as refused:
        context.check(LOCAL, REMOTE, env_named=False, any_context=False, verb="undeploy")
    assert "no ENV given" in str(refused.value) and "make undeploy ENV=dev" in str(refused.value)
    context.check(LOCAL, REMOTE, env_named=True, any_context=False, verb="deploy")  # ENV=local, said


@pytest.mark.parametrize(
    "name,server,local",
    [
        ("tfmw-local", "https://10.200.0.1:6443", True),
        ("kind-ml", "https://172.18.0.2:6443", True),
        ("k3d-dev", "https://0.0.0.0:6550", True),
        ("minikube", "https://192.168.49.2:8443", True),
        ("any", "https://127.0.0.1:6443", True),
        ("any", "https://[::1]:6443", True),
        ("any", "https://api.localhost:6443", True),
        ("gke_prj_zone_ml", "https://34.1.2.3", False),
        ("eks", "https://ABC.gr7.eu-west-1.eks.amazonaws.com", False),
    ],
)
def test_what_counts_as_a_local_cluster(name, server, local):
    assert context.is_local(context.InUse(name, server)) is local


def kubeconfig(tmp_path, current: str) -> str:
    """Two contexts on closed loopback ports, `current` selected: nothing answers, nothing is dialled."""
    port = closed_port()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"https://10.255.255.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": n, "context": {"cluster": "c", "user": "u"}} for n in ("gke-ml-dev", "prod")],
        "current-context": current,
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.mark.parametrize("verb", ["deploy", "undeploy"])
def test_the_cli_refuses_a_wrong_context_before_any_cluster_call(tmp_path, verb):
    proc = run_cli(verb, "--env", "prod", env={"KUBECONFIG": kubeconfig(tmp_path, "gke-ml-dev")})
    assert_one_line_error(proc, verb, "meant for kube context 'prod'", "'gke-ml-dev'")
    assert proc.returncode == 2


@pytest.mark.parametrize("verb", ["deploy", "undeploy"])
def test_the_cli_with_no_env_asks_for_one_on_a_remote_cluster(tmp_path, verb):
    proc = run_cli(verb, env={"KUBECONFIG": kubeconfig(tmp_path, "gke-ml-dev")})
    assert_one_line_error(proc, verb, "no ENV given", "'gke-ml-dev'", f"make {verb} ENV=dev")
    assert proc.returncode == 2


@pytest.mark.parametrize(
    "variables,passed,absent",
    [
        ([], ["tfmw deploy"], ["--env", "--release", "--namespace", "--any-context"]),
        (["ENV=dev"], ["--env dev"], ["--release", "--namespace"]),
        (["ENV=prod", "NAMESPACE=x", "ANY_CONTEXT=1"], ["--env prod", "--namespace x", "--any-context"], ["--release"]),
    ],
)
def test_make_passes_only_what_was_given(variables, passed, absent):
    """`make deploy` without ENV must reach tfmw without --env: that is how tfmw knows no
    environment was named (and refuses a non-local cluster)."""
    proc = subprocess.run(
        ["make", "-s", "-n", "deploy", *variables], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    line = next(ln for ln in proc.stdout.splitlines() if "tfmw deploy" in ln)
    assert all(p in line for p in passed) and not any(f" {a} " in f"{line} " for a in absent), line
