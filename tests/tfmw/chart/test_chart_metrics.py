"""The workers' /metrics (issue 21): a named port, the env the launcher reads, the scrape
annotations, and a PodMonitor only where the cluster serves its API."""

from __future__ import annotations

import chartkit
from chartkit import RELEASE, env_of, find, one, overlay_path

FULLNAME = f"{RELEASE}-tf-multiworker"
POD_MONITOR_API = "monitoring.coreos.com/v1/PodMonitor"


def worker_template(objects) -> dict:
    return one(objects, "StatefulSet")["spec"]["template"]


def test_metrics_are_on_by_default_as_a_named_port_with_scrape_annotations(helm, render):
    template = worker_template(render(helm, overlay_path("prod")))
    [container] = template["spec"]["containers"]
    assert {"name": "metrics", "containerPort": 9090, "protocol": "TCP"} in container["ports"]
    assert env_of(container)["TFMW_METRICS_PORT"]["value"] == "9090"
    annotations = template["metadata"]["annotations"]
    assert (
        annotations["prometheus.io/scrape"],
        annotations["prometheus.io/port"],
        annotations["prometheus.io/path"],
    ) == ("true", "9090", "/metrics")


def test_metrics_off_leaves_no_port_env_or_annotation(helm, render):
    template = worker_template(render(helm, overlay_path("prod"), sets=("metrics.enabled=false",)))
    [container] = template["spec"]["containers"]
    assert [p["name"] for p in container["ports"]] == ["grpc"]
    assert "TFMW_METRICS_PORT" not in env_of(container)
    assert not any(k.startswith("prometheus.io/") for k in template["metadata"].get("annotations", {}))
    without_annotations = worker_template(render(helm, overlay_path("prod"), sets=("metrics.annotations=false",)))
    assert not any(k.startswith("prometheus.io/") for k in without_annotations["metadata"]["annotations"])
    assert env_of(without_annotations["spec"]["containers"][0])["TFMW_METRICS_PORT"]["value"] == "9090"


def _template_with_api(helm: str, *sets: str) -> tuple[list[dict], str]:
    args = [
        "template",
        RELEASE,
        str(chartkit.CHART),
        "--namespace",
        chartkit.NAMESPACE,
        "-f",
        str(overlay_path("prod")),
        "--set",
        f"image.digest={chartkit.STAND_IN_DIGEST}",
        "--api-versions",
        POD_MONITOR_API,
    ]
    for item in sets:
        args += ["--set", item]
    result = chartkit.run_helm(helm, args)
    assert result.returncode == 0, result.stderr
    from tfmw.chart import helmkit

    return helmkit.parse_manifests(result.stdout), result.stdout


def test_the_pod_monitor_is_rendered_only_where_the_api_exists(helm, render):
    assert not find(render(helm, overlay_path("prod"), sets=("metrics.podMonitor.enabled=true",)), "PodMonitor")
    objects, _ = _template_with_api(helm)  # the API, but not asked for
    assert not find(objects, "PodMonitor")
    objects, _ = _template_with_api(helm, "metrics.podMonitor.enabled=true", "metrics.podMonitor.labels.release=kps")
    monitor = one(objects, "PodMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["metadata"]["name"] == FULLNAME
    assert monitor["metadata"]["labels"]["release"] == "kps"
    # The fields of the v1 PodMonitor API (prometheus-operator's API reference) this chart sets.
    assert set(monitor["spec"]) == {"selector", "namespaceSelector", "podMetricsEndpoints"}
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [chartkit.NAMESPACE]}
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    worker_labels = worker_template(objects)["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= worker_labels.items()
    objects, _ = _template_with_api(helm, "metrics.podMonitor.enabled=true", "metrics.enabled=false")
    assert not find(objects, "PodMonitor")


def test_notes_say_when_the_pod_monitor_was_left_out():
    # NOTES.txt as `helm install` prints it (Helm 4 renders it offline; Helm 3 wants a cluster).
    # `install` takes no --api-versions: the other branch is the template's same condition,
    # tested above on the PodMonitor itself.
    def notes(*sets: str) -> str:
        args = [
            "install",
            RELEASE,
            str(chartkit.CHART),
            "--dry-run=client",
            "--namespace",
            chartkit.NAMESPACE,
            "-f",
            str(overlay_path("prod")),
            "--set",
            f"image.digest={chartkit.STAND_IN_DIGEST}",
        ]
        for item in sets:
            args += ["--set", item]
        result = chartkit.run_helm(chartkit.helm4(), args)
        assert result.returncode == 0, result.stderr
        return result.stdout.split("NOTES:", 1)[1]

    missing = notes("metrics.podMonitor.enabled=true")
    assert (
        "does not serve monitoring.coreos.com/v1\n  PodMonitor (no prometheus-operator): no PodMonitor was created"
    ) in missing
    unasked = notes()
    assert f"port-forward pod/{FULLNAME}-0 9090" in unasked and "no PodMonitor was created" not in unasked
    assert "Prometheus metrics" not in notes("metrics.enabled=false")
