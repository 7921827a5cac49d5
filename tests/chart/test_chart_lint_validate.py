"""helm lint --strict passes and every rendered object is a valid Kubernetes object."""
from __future__ import annotations

import kubernetes_validate
import pytest

import chartkit
from chartkit import K8S_VERSIONS, OVERLAYS, overlay_path


def values_sets():
    """Every overlay, and the everything-on values file once it exists."""
    sets = {env: [overlay_path(env)] for env in OVERLAYS}
    if chartkit.ALL_ON.exists():
        sets["all-on"] = [chartkit.ALL_ON]
    return sets


VALUES_SETS = values_sets()


def is_builtin(api_version: str) -> bool:
    """A Kubernetes built-in API group (core, apps, policy, *.k8s.io but not *.x-k8s.io)."""
    group = api_version.rpartition("/")[0]
    return "." not in group or (group.endswith(".k8s.io") and not group.endswith(".x-k8s.io"))


@pytest.mark.parametrize("name", sorted(VALUES_SETS))
def test_helm_lint_strict(helm, name):
    args = ["lint", "--strict", str(chartkit.CHART), "--namespace", chartkit.NAMESPACE]
    for path in VALUES_SETS[name]:
        args += ["-f", str(path)]
    result = chartkit.run_helm(helm, args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_kubernetes_validate_ships_the_versions_we_check():
    shipped = {v.rsplit(".", 1)[0] for v in kubernetes_validate.utils.all_versions()}
    assert set(K8S_VERSIONS) <= shipped


@pytest.mark.parametrize("name", sorted(VALUES_SETS))
def test_every_object_validates_strictly_against_kubernetes(helm, render, name):
    objects = render(helm, *VALUES_SETS[name])
    checked = 0
    for obj in objects:
        if not is_builtin(obj["apiVersion"]):
            continue  # CRD objects (PodGroup): checked against their CRD schema elsewhere
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} invalid for "
                            f"Kubernetes {version}: {exc.message} at {list(exc.path)}")
        checked += 1
    assert checked >= 3


def test_builtin_groups():
    assert is_builtin("v1") and is_builtin("apps/v1") and is_builtin("policy/v1")
    assert is_builtin("networking.k8s.io/v1")
    assert not is_builtin("scheduling.x-k8s.io/v1alpha1")
    assert not is_builtin("scheduling.volcano.sh/v1beta1")


def test_validation_catches_an_invalid_object():
    """The validator is strict: an unknown field in a pod spec is an error."""
    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
           "spec": {"clusterIP": "None", "portz": []}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, "1.35", strict=True)
