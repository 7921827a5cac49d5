"""The chart as a dependency of an umbrella chart (issue 10, problem 2).

Helm hands a subchart its parent's `global` values (an empty map when the parent sets
none) and validates them against the subchart's schema: a root `additionalProperties:
false` without `global` made every umbrella install fail. The umbrella here is built the
way users build one (`helm dependency build` over a `file://` repository) with each helm,
in private HELM_*_HOME directories.
"""

from __future__ import annotations

import chartkit
import pytest
import yaml
from chartkit import NAMESPACE, find, one

UMBRELLA_RELEASE = "platform"
SUBCHART_FULLNAME = f"{UMBRELLA_RELEASE}-tf-multiworker"


@pytest.fixture(scope="module", params=sorted(chartkit.HELMS))
def umbrella(request, tmp_path_factory):
    """(helm, umbrella chart dir, env) with the chart vendored by `helm dependency build`."""
    helm = chartkit.HELMS[request.param]()
    root = tmp_path_factory.mktemp(f"umbrella-{request.param}")
    env = {f"HELM_{kind}_HOME": str(root / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")}
    chart = root / "umbrella"
    (chart / "templates").mkdir(parents=True)
    version = yaml.safe_load((chartkit.CHART / "Chart.yaml").read_text())["version"]
    (chart / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": "umbrella",
                "version": "1.0.0",
                "dependencies": [
                    {"name": "tf-multiworker", "version": version, "repository": f"file://{chartkit.CHART}"}
                ],
            }
        )
    )
    (chart / "values.yaml").write_text("")
    built = chartkit.run_helm(helm, ["dependency", "build", str(chart)], env=env)
    assert built.returncode == 0, built.stderr
    assert (chart / "charts" / f"tf-multiworker-{version}.tgz").is_file()
    return helm, chart, env


def render_umbrella(umbrella, values: dict | None = None, expect_ok: bool = True):
    helm, chart, env = umbrella
    args = ["template", UMBRELLA_RELEASE, str(chart), "--namespace", NAMESPACE]
    if values is not None:
        path = chart.parent / "umbrella-values.yaml"
        path.write_text(yaml.safe_dump(values))
        args += ["-f", str(path)]
    result = chartkit.run_helm(helm, args, env=env)
    if not expect_ok:
        assert result.returncode != 0, "the umbrella rendered values that must be refused"
        return result.stderr
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_umbrella_with_empty_values_renders_the_workers(umbrella):
    objects = render_umbrella(umbrella)
    sts = one(objects, "StatefulSet", SUBCHART_FULLNAME)
    assert sts["spec"]["replicas"] == 2
    assert find(objects, "Service", SUBCHART_FULLNAME)


def test_umbrella_with_global_values_renders_and_passes_subchart_values(umbrella):
    objects = render_umbrella(
        umbrella,
        {
            "global": {"imageRegistry": "registry.example.com", "labels": {"team": "ml"}},
            "tf-multiworker": {"workers": {"replicas": 3}, "training": {"runId": "nightly"}},
        },
    )
    sts = one(objects, "StatefulSet", SUBCHART_FULLNAME)
    assert sts["spec"]["replicas"] == 3
    env = chartkit.env_of(sts["spec"]["template"]["spec"]["containers"][0])
    assert env["TFMW_RUN_ID"]["value"] == "nightly"


def test_umbrella_still_validates_the_subchart_values(umbrella):
    """Allowing `global` left the rest of the schema strict."""
    error = render_umbrella(umbrella, {"tf-multiworker": {"workers": {"replica": 3}}}, expect_ok=False)
    assert "tf-multiworker" in error and "replica" in error


def test_global_is_accepted_standalone_but_must_be_a_map(helm):
    assert chartkit.template(helm, sets=("global.imageRegistry=registry.example.com",))
    error = chartkit.template_error(helm, sets=("global=registry.example.com",))
    assert "global" in error
