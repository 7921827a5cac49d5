"""helm lint --strict passes and every rendered object is a valid Kubernetes object, for each
Kubernetes version the chart supports (helmkit.KUBERNETES_VERSIONS, helmkit.validate_objects)."""

from __future__ import annotations

import chartkit
import pytest
from chartkit import OVERLAYS, overlay_path

from tfmw.chart import helmkit


def values_sets():
    """Every overlay, and the everything-on values file once it exists."""
    sets = {env: [overlay_path(env)] for env in OVERLAYS}
    if chartkit.ALL_ON.exists():
        sets["all-on"] = [chartkit.ALL_ON]
    return sets


VALUES_SETS = values_sets()


@pytest.mark.parametrize("name", sorted(VALUES_SETS))
def test_helm_lint_strict(helm, name):
    args = ["lint", "--strict", str(chartkit.CHART), "--namespace", chartkit.NAMESPACE]
    files, sets = chartkit.with_required_digest(VALUES_SETS[name], ())
    for path in files:
        args += ["-f", str(path)]
    for item in sets:
        args += ["--set", item]
    result = chartkit.run_helm(helm, args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("name", sorted(VALUES_SETS))
def test_every_object_validates_strictly_against_kubernetes(helm, render, name):
    objects = render(helm, *VALUES_SETS[name])
    for version in helmkit.KUBERNETES_VERSIONS:
        checked = helmkit.validate_objects(objects, version)
        assert checked.problems == [], [str(p) for p in checked.problems]
        # CRD objects (PodGroup) are checked against their CRD schema elsewhere (tests/tfmw/chart/crds)
        assert len(objects) - len(checked.custom) >= 3
