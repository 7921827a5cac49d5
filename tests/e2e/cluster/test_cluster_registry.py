"""The chart and the image the way users get them, through a real OCI registry on the local
cluster (CNCF Distribution from Debian's docker-registry, TLS from the cluster's CA, htpasswd
auth: tfmw.devcluster.registry): the chart pushed with `tfmw.chart.package` (make chart-push)
and installed with plain `helm install oci://...`; the worker image pushed with `make image
PUSH=1` (tfmw.image) and pulled by the nodes' containerd with an imagePullSecrets Secret, pinned
by its digest; without the secret the pull is refused and `make status` names it."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from clusterkit import REPO, status, wait_for, wait_succeeded

from tfmw.chart import package
from tfmw.devcluster import registry as registry_mod
from tfmw.k8s.api import ns_path

# Last on the shared cluster: once a node's kubelet has pulled the worker image's ID with a
# pull secret, it checks every later pod's right to that ID by pulling it again (Kubernetes
# 1.35's KubeletEnsureSecretPulledImages, on by default), and no registry serves the tag the
# other tests' pods name (it was imported into the nodes): they would stay in ImagePullBackOff.
pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.last]

SETS = ("training.config.model.name=mlp", "training.config.steps=300", "training.config.checkpoint.everySteps=100")
VERSION = package.chart_meta()["version"]


@pytest.fixture(scope="module")
def registry(cluster):
    """The cluster's registry for this module's tests, then stopped."""
    started = registry_mod.start(cluster.state, say=print)
    try:
        yield started
    finally:
        registry_mod.stop(cluster.state)


def helm_env(cluster, registry, tmp_path) -> dict:
    """helm's registry credentials of its own (never the user's ~/.config/helm)."""
    return cluster.env(HELM_REGISTRY_CONFIG=str(tmp_path / "helm-registry.json"))


def run(argv, env, timeout=600, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in argv], input=stdin, capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO
    )


def test_the_chart_from_the_oci_registry_installs_and_trains(cluster, registry, namespace, tmp_path):
    """make chart-push (helm registry login first), then a plain `helm install oci://...
    --version` of the packaged chart: it trains to Succeeded."""
    env = helm_env(cluster, registry, tmp_path)
    helm = str(REPO / ".tools" / "bin" / "helm")
    login = run(
        [helm, "registry", "login", registry.host, "--username", registry.username, "--password-stdin"]
        + ["--ca-file", registry.ca_file],
        env,
        stdin=registry.password,
    )
    assert login.returncode == 0, login.stderr
    target = f"oci://{registry.host}/charts"
    pushed = run([sys.executable, "-m", "tfmw.chart.package", "--push", target, "--ca-file", registry.ca_file], env)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert f"chart: pushed to {target}/tf-multiworker" in pushed.stdout, pushed.stdout
    args = [helm, "install", "oci-run", f"{target}/tf-multiworker", "--version", VERSION, "--ca-file", registry.ca_file]
    args += ["-n", namespace, "-f", REPO / "values" / "local.yaml"]
    for item in SETS:
        args += ["--set", item]
    installed = run(args, env)
    assert installed.returncode == 0, installed.stderr
    assert f"tf-multiworker-{VERSION}" in run([helm, "list", "-n", namespace], env).stdout
    final = wait_succeeded(cluster, namespace, "oci-run")
    assert final["step"] == "300", final
    # and `helm show readme` of the published chart prints its README
    readme = run(
        [helm, "show", "readme", f"{target}/tf-multiworker", "--version", VERSION, "--ca-file", registry.ca_file], env
    )
    assert readme.returncode == 0 and readme.stdout.startswith("# tf-multiworker"), readme.stderr


def image_pushed(cluster, registry) -> tuple[str, str]:
    """`make image PUSH=1` to the registry (tfmw.image: the CPU image, tagged for it; podman's
    credentials in the registry's auth file, its CA by PUSH_CERT_DIR): (repository, digest)."""
    repository = f"{registry.host}/ml/tf-multiworker"
    env = cluster.env(REGISTRY_AUTH_FILE=str(registry.auth_file), PUSH_CERT_DIR=str(registry.cert_dir))
    argv = [sys.executable, "-m", "tfmw.image", "--variant", "cpu", "--base", "debian", "--image", repository, "--push"]
    proc = run(argv, env, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    m = re.search(r"pin it with image\.digest=(sha256:[0-9a-f]{64})", proc.stdout)
    assert m, proc.stdout[-2000:]
    return repository, m.group(1)


def test_the_nodes_pull_the_image_with_a_pull_secret_pinned_by_digest_and_not_without(cluster, registry, namespace):
    repository, digest = image_pushed(cluster, registry)
    image_sets = (f"image.repository={repository}", f"image.digest={digest}", *SETS)
    install = ["install", "pulled", str(REPO / "charts" / "tf-multiworker"), "-n", namespace]
    install += ["-f", str(REPO / "values" / "local.yaml")]
    for item in image_sets:
        install += ["--set", item]
    # without the secret: the registry refuses the pull, and make status names it
    cluster.helm(*install)
    wait_for(
        lambda: any(
            (c.get("state") or {}).get("waiting", {}).get("reason") in ("ErrImagePull", "ImagePullBackOff")
            for p in cluster.workers(namespace, "pulled")
            for c in (p.get("status") or {}).get("containerStatuses") or []
        ),
        180,
        "the pull refused without credentials",
    )
    shown = cluster.tfmw("status", "--namespace", namespace, "--release", "pulled")
    assert re.search(r"ErrImagePull|ImagePullBackOff", shown.stdout), shown.stdout
    assert re.search(r"401|[Uu]nauthorized|authoriz", shown.stdout), shown.stdout
    cluster.helm("uninstall", "pulled", "-n", namespace, "--wait")
    wait_for(lambda: not cluster.workers(namespace, "pulled"), 120, "the refused pods gone")
    # with it: pulled, pinned by digest, trained
    cluster.api.create(ns_path(namespace, "secrets"), registry.pull_secret(namespace))
    cluster.helm(*install, "--set", "imagePullSecrets[0].name=regcred")

    def pulled() -> list[dict]:
        pods = cluster.workers(namespace, "pulled")
        started = [p for p in pods if ((p.get("status") or {}).get("containerStatuses") or [{}])[0].get("imageID")]
        return started if len(started) == 2 else []

    for pod in wait_for(pulled, 600, "both workers started from the pulled image"):
        assert pod["spec"]["containers"][0]["image"] == f"{repository}@{digest}", pod["spec"]["containers"][0]
        assert pod["status"]["containerStatuses"][0]["imageID"].endswith(digest), pod["status"]
    final = wait_succeeded(cluster, namespace, "pulled", timeout=600)
    assert final["step"] == "300" and status(cluster, namespace, "pulled")["phase"] == "Succeeded", final
