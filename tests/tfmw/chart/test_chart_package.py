"""The chart as users get it (tfmw.chart.package): its release notes agree, its package holds the
README `helm show readme` prints and not the chart-testing values, and a push target must be an
OCI reference. The push to a real registry: tests/e2e/cluster/test_cluster_registry.py."""

from __future__ import annotations

import tarfile

import pytest
import yaml

from tfmw.chart import package
from tfmw.chart.helmkit import ToolError


def test_the_newest_changelog_section_is_the_charts_version_and_its_changes_annotation():
    meta = package.chart_meta()
    package.check_release_notes(meta, package.CHANGELOG.read_text())  # raises when they disagree
    version, entries = package.changelog_sections(package.CHANGELOG.read_text())[0]
    assert version == meta["version"] and entries
    assert yaml.safe_load(meta["annotations"]["artifacthub.io/changes"]) == entries


def test_release_notes_that_disagree_are_refused_in_one_line():
    meta = package.chart_meta()
    with pytest.raises(ToolError, match="Chart.yaml version 9.9.9 has no CHANGELOG.md section on top"):
        package.check_release_notes(dict(meta, version="9.9.9"), package.CHANGELOG.read_text())
    other = dict(meta, annotations={"artifacthub.io/changes": "- kind: fixed\n  description: other\n"})
    with pytest.raises(ToolError, match="artifacthub.io/changes differs from CHANGELOG.md"):
        package.check_release_notes(other, package.CHANGELOG.read_text())
    with pytest.raises(ToolError, match="is not '- <kind>: <text>'"):
        package.changelog_sections("## 1.0.0\n\n- improved: things\n")


def test_chart_yaml_carries_what_a_chart_repository_shows():
    meta = package.chart_meta()
    assert meta["home"].startswith("https://") and meta["sources"] and meta["icon"].startswith("https://")
    assert meta["maintainers"] and all("name" in m for m in meta["maintainers"])
    annotations = meta["annotations"]
    assert annotations["artifacthub.io/license"] == "Apache-2.0"
    images = yaml.safe_load(annotations["artifacthub.io/images"])
    assert {i["image"] for i in images} == {
        f"ghcr.io/tf-multiworker/tf-multiworker:{meta['appVersion']}",
        f"ghcr.io/tf-multiworker/tf-multiworker:{meta['appVersion']}-cpu",
    }
    assert (package.REPO / "LICENSE").read_text().lstrip().startswith("Apache License")


def test_the_package_holds_the_readme_and_leaves_the_ci_values_out(tmp_path):
    archive = package.package(tmp_path)
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert archive.name == f"tf-multiworker-{package.chart_meta()['version']}.tgz"
    assert "tf-multiworker/README.md" in names and "tf-multiworker/values.schema.json" in names
    assert not [n for n in names if "/ci/" in n]


@pytest.mark.parametrize("target", ["registry.example.com/charts", "https://r.example.com", "oci://", "oci://a b"])
def test_a_push_target_that_is_no_oci_reference_is_refused(target):
    with pytest.raises(ToolError, match="must be an OCI reference oci://<registry>"):
        package.push_args(package.DEST / "x.tgz", target)
    assert package.push_args(package.DEST / "x.tgz", "oci://r:5000/charts", "/ca.crt")[-2:] == ["--ca-file", "/ca.crt"]
