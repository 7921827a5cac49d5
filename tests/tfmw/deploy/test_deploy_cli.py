"""`python -m tfmw.cli` end to end, without a cluster: one-line errors, exit codes, files."""

from __future__ import annotations

import pytest
import yaml
from chartkit import STAND_IN_DIGEST
from deploykit import HELM3, HELM4, REPO, assert_one_line_error, run_cli


@pytest.mark.parametrize("helm", [HELM4, HELM3], ids=["helm4", "helm3"])
def test_deploy_to_unreachable_cluster_fails_after_validating_and_rendering(helm, unreachable_kubeconfig):
    kubeconfig, context, server = unreachable_kubeconfig
    proc = run_cli(
        "deploy", "--env", "dev", "--set", "training.runId=run-1", env={"KUBECONFIG": str(kubeconfig), "HELM": helm}
    )
    assert "values: values/dev.yaml + --set training.runId=run-1 validated against" in proc.stdout
    assert "valid for Kubernetes 1.35" in proc.stdout
    assert_one_line_error(proc, "deploy", "cluster unreachable", f"kube context '{context}'", server)
    assert proc.returncode == 3


@pytest.mark.parametrize("command", [["status"], ["logs"], ["undeploy"], ["diff", "--env", "dev"]])
def test_other_cluster_commands_name_the_unreachable_cluster(command, unreachable_kubeconfig):
    kubeconfig, context, server = unreachable_kubeconfig
    proc = run_cli(*command, "--release", "rel", env={"KUBECONFIG": str(kubeconfig)})
    assert_one_line_error(proc, command[0], f"kube context '{context}'", server)


def test_template_prod_writes_build_manifests():
    proc = run_cli("template", "--env", "prod", "--set", f"image.digest={STAND_IN_DIGEST}")
    assert proc.returncode == 0, proc.stderr
    path = REPO / "build" / "prod" / "manifests.yaml"
    assert proc.stdout.strip().splitlines()[-1] == "build/prod/manifests.yaml"
    objects = [o for o in yaml.safe_load_all(path.read_text()) if o]
    assert {"StatefulSet", "Service"} <= {o["kind"] for o in objects}


def test_template_prod_without_a_digest_is_refused_naming_how_to_get_one():
    """values/prod.yaml requires image.digest: a tag could point to another build by the time
    the next node pulls it."""
    proc = run_cli("template", "--env", "prod")
    assert_one_line_error(
        proc, "template", "image.digest is empty and image.requireDigest is true", "make image PUSH=1"
    )


def test_template_to_chosen_output_with_set(tmp_path):
    out = tmp_path / "m.yaml"
    proc = run_cli(
        "template",
        "--env",
        "dev",
        "--set",
        "workers.replicas=3",
        "--output",
        str(out),
        "--release",
        "r1",
        "--namespace",
        "ml",
    )
    assert proc.returncode == 0, proc.stderr
    sts = next(o for o in yaml.safe_load_all(out.read_text()) if o and o["kind"] == "StatefulSet")
    assert sts["spec"]["replicas"] == 3 and sts["metadata"]["namespace"] == "ml"


def test_unknown_env_lists_known_envs():
    proc = run_cli("template", "--env", "qa")
    assert_one_line_error(proc, "template", "unknown ENV 'qa'", "dev, local, prod, staging")
    assert proc.returncode == 2


def test_no_helm():
    proc = run_cli("deploy", "--env", "dev", env={"HELM": "/nonexistent/helm"})
    assert_one_line_error(proc, "deploy", "helm not found: /nonexistent/helm", "make setup")
    assert proc.returncode == 127


def test_bad_set_syntax():
    proc = run_cli("deploy", "--env", "dev", "--set", "workers.replicas")
    assert_one_line_error(proc, "deploy", "bad --set 'workers.replicas': expected key=value")


def test_schema_violation_names_the_key_before_any_cluster_call(mini_chart, values_dir, unreachable_kubeconfig):
    kubeconfig, _, _ = unreachable_kubeconfig
    proc = run_cli(
        "deploy",
        "--env",
        "broken",
        "--chart",
        str(mini_chart),
        "--values-dir",
        str(values_dir),
        env={"KUBECONFIG": str(kubeconfig)},
    )
    line = assert_one_line_error(proc, "deploy", "invalid value for workers.replicas")
    assert "unreachable" not in line and proc.returncode == 2


def test_real_chart_schema_violation_names_the_key():
    proc = run_cli("template", "--env", "dev", "--set", "workers.replicas=-1")
    assert_one_line_error(proc, "template", "invalid value for workers.replicas")


@pytest.mark.parametrize(
    "helm,flags,absent",
    [
        (HELM4, ["--wait=watcher", "--rollback-on-failure"], "--atomic"),
        (HELM3, ["--wait", "--atomic"], "--rollback-on-failure"),
    ],
    ids=["helm4", "helm3"],
)
def test_deploy_dry_run_prints_the_versioned_helm_command_offline(helm, flags, absent, unreachable_kubeconfig):
    kubeconfig, _, _ = unreachable_kubeconfig
    proc = run_cli(
        "deploy",
        "--env",
        "dev",
        "--dry-run",
        "--set",
        "workers.replicas=3",
        "--namespace",
        "ml",
        env={"KUBECONFIG": str(kubeconfig), "HELM": helm},
    )
    assert proc.returncode == 0, proc.stderr
    command = next(line for line in proc.stdout.splitlines() if line.startswith("  "))
    words = command.split()
    # the release is the overlay's (values/dev.yaml target.release); --namespace wins over its namespace
    assert words[1:4] == ["upgrade", "tf-multiworker-dev", str(REPO / "charts" / "tf-multiworker")]
    # dev's kubeContext "*" takes the context in use, and helm is pinned to the one checked
    assert words[-2:] == ["--kube-context", "tfmw-test-ctx"]
    assert all(flag in words for flag in flags) and absent not in words
    assert "--create-namespace" in words and words[words.index("--namespace") + 1] == "ml"
    values = proc.stdout[proc.stdout.index("{") :]
    import json

    assert json.loads(values)["workers"]["replicas"] == 3
