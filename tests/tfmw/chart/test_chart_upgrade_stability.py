"""An upgrade that only bumps the chart's version or appVersion leaves every pod template as
it was (issue 10, problem 1): a changed pod template makes the StatefulSet controller
restart every worker mid-training.

The chart is copied into a temporary directory and its Chart.yaml edited, so the two
renders differ in nothing but the chart metadata. The image is pinned by tag: with an
empty `image.tag` the image follows appVersion, and a new image rightly rolls the pods.
"""

from __future__ import annotations

import shutil

import chartkit
import pytest
import yaml
from chartkit import ALL_ON, NAMESPACE, RELEASE, find, one, pod_labels

VERSION_LABELS = ("helm.sh/chart", "app.kubernetes.io/version")


def chart_with_versions(tmp_path, version: str, app_version: str):
    """A copy of the chart whose Chart.yaml says `version` / `appVersion`."""
    dest = tmp_path / f"tf-multiworker-{version}-{app_version}"
    shutil.copytree(chartkit.CHART, dest)
    chart_yaml = dest / "Chart.yaml"
    meta = yaml.safe_load(chart_yaml.read_text())
    meta["version"], meta["appVersion"] = version, app_version
    chart_yaml.write_text(yaml.safe_dump(meta, sort_keys=False))
    return dest


def render_chart(helm: str, chart_dir, *sets: str) -> list[dict]:
    args = ["template", RELEASE, str(chart_dir), "--namespace", NAMESPACE, "-f", str(ALL_ON)]
    for item in sets:
        args += ["--set", item]
    result = chartkit.run_helm(helm, args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def template_text(obj: dict) -> str:
    """The pod template as the API server would compare it: its canonical YAML."""
    return yaml.safe_dump(obj["spec"]["template"], sort_keys=True)


@pytest.mark.parametrize("helm_name", sorted(chartkit.HELMS))
def test_chart_version_bump_leaves_pod_templates_identical(tmp_path, helm_name):
    helm = chartkit.HELMS[helm_name]()
    old = render_chart(helm, chart_with_versions(tmp_path, "0.1.0", "0.1.0"), "image.tag=1.0.0")
    new = render_chart(helm, chart_with_versions(tmp_path, "0.2.0", "0.3.0"), "image.tag=1.0.0")
    # The bump is visible on the objects themselves, so the comparison below means something.
    assert one(old, "StatefulSet")["metadata"]["labels"]["helm.sh/chart"] == "tf-multiworker-0.1.0"
    assert one(new, "StatefulSet")["metadata"]["labels"]["helm.sh/chart"] == "tf-multiworker-0.2.0"
    assert one(new, "StatefulSet")["metadata"]["labels"]["app.kubernetes.io/version"] == "0.3.0"
    for kind in ("StatefulSet", "Deployment"):
        assert template_text(one(old, kind)) == template_text(one(new, kind)), kind
    old_pod, new_pod = one(old, "Pod"), one(new, "Pod")
    assert old_pod["metadata"]["labels"] == new_pod["metadata"]["labels"]
    assert old_pod["spec"] == new_pod["spec"]


def test_no_pod_carries_a_version_label(helm, render):
    objects = render(helm, ALL_ON)
    pods = [o for o in objects if o["kind"] in ("StatefulSet", "Deployment", "Pod")]
    assert len(pods) == 3  # workers, TensorBoard, the helm test pod
    for obj in pods:
        labels = pod_labels(obj)
        assert not set(VERSION_LABELS) & set(labels), f"{obj['kind']}: {labels}"
        # The stable standard labels stay (kubectl selectors, dashboards).
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert "app.kubernetes.io/component" in labels


def test_an_app_version_bump_with_an_unpinned_tag_rolls_the_image(tmp_path):
    """The image defaults to appVersion: that change (and only it) reaches the pods."""
    helm = chartkit.helm4()
    old = render_chart(helm, chart_with_versions(tmp_path, "0.1.0", "0.1.0"), "image.tag=", "image.digest=")
    new = render_chart(helm, chart_with_versions(tmp_path, "0.1.0", "0.2.0"), "image.tag=", "image.digest=")
    old_spec = one(old, "StatefulSet")["spec"]["template"]["spec"]
    new_spec = one(new, "StatefulSet")["spec"]["template"]["spec"]
    assert old_spec["containers"][0]["image"].endswith(":0.1.0")
    assert new_spec["containers"][0]["image"].endswith(":0.2.0")
    old_spec["containers"][0]["image"] = new_spec["containers"][0]["image"]
    assert old_spec == new_spec
    assert find(old, "Deployment") and find(new, "Deployment")
