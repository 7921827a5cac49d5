"""A real Prometheus on the local cluster (Debian's, on the host: tfmw.devcluster.prometheus)
scrapes a running release through the NetworkPolicy the chart renders (metricsFrom admits the
scraper's address), sees tfmw_step rise and tfmw_goodput_ratio for the release, and fires the
chart's own stall alert (its rules file, from the release's `-alert-rules` ConfigMap) when the
group really hangs: the chief held in a checkpoint write by the test hook, the hang watchdog off."""

from __future__ import annotations

import json
import sys
import time

import pytest
import yaml
from clusterkit import CHART, REPO, wait_for

from tfmw.devcluster import prometheus as prometheus_mod
from tfmw.k8s.api import ns_path, time_seconds

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

POST_RENDERER = REPO / "tests" / "support" / "postrender_env.py"
RELEASE = "watched"
HANG_STEP = 600  # the first checkpoint, where the chief is held


@pytest.fixture(scope="module")
def prometheus(cluster):
    started = prometheus_mod.start(cluster.state, say=print)
    try:
        yield started
    finally:
        prometheus_mod.stop(cluster.state)


def selector(namespace: str) -> str:
    return f'namespace="{namespace}", pod=~"{RELEASE}-tf-multiworker-[0-9]+"'


def test_prometheus_scrapes_the_release_and_its_stall_alert_fires_on_a_real_hang(
    cluster, prometheus, namespace, tmp_path
):
    values = tmp_path / "watched.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "networkPolicy": {"metricsFrom": [prometheus_mod.scraper_peer(cluster.state)]},
                "metrics": {"alerts": {"enabled": True, "stalledSeconds": 30}},
                "training": {
                    "hangTimeoutSeconds": 0,  # the watchdog would restart the hung group
                    "config": {
                        "model": {"name": "mlp"},
                        "steps": 5000,
                        "logEverySteps": 10,
                        "checkpoint": {"everySteps": HANG_STEP},
                    },
                },
            }
        )
    )
    # the test hook (docs/failure-model.md): the chief holds each checkpoint write this long
    script = tmp_path / "postrender"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{POST_RENDERER}" TFMW_FAULT_CHECKPOINT_PAUSE_SECONDS=90\n')
    script.chmod(0o755)
    args = [
        "install",
        RELEASE,
        str(CHART),
        "-n",
        namespace,
        "-f",
        str(REPO / "values" / "local.yaml"),
        "-f",
        str(values),
    ]
    cluster.helm(*args, "--post-renderer", str(script), helm="helm3")
    configmap = cluster.api.get_or_none(ns_path(namespace, "configmaps", f"{RELEASE}-tf-multiworker-alert-rules"))
    assert configmap, "the chart rendered no alert rules ConfigMap"
    prometheus.add_rules(f"{namespace}-{RELEASE}", configmap["data"]["tf-multiworker.rules.yaml"])

    def steps() -> list[float]:
        return [float(r["value"][1]) for r in prometheus.query(f"tfmw_step{{{selector(namespace)}}}")]

    first = wait_for(lambda: steps() if len(steps()) == 2 else None, 180, "both workers scraped", 2)
    wait_for(
        lambda: min(steps()) > max(first),
        120,
        "tfmw_step rising in Prometheus",
        2,
        lambda: json.dumps(prometheus.targets())[:2000],
    )
    goodput = prometheus.query(f"tfmw_goodput_ratio{{{selector(namespace)}}}")
    assert len(goodput) == 2 and all(0.0 <= float(r["value"][1]) <= 1.0 for r in goodput), goodput
    assert all(t["health"] == "up" for t in prometheus.targets() if t["labels"].get("namespace") == namespace)

    # the hang: at each checkpoint (every HANG_STEP steps) the chief is held in its write and the
    # group waits on it. The alert counted is one that became active after the step was seen
    # rising: it fired for a stall of a group seen training, not for one that was already held
    # before Prometheus first scraped it (this machine may be that slow); the window itself
    # (no alert before stalledSeconds) is promtool's test of the rule (test_chart_alerts).
    rose_at = time.time()

    def firing() -> dict | None:
        return next(
            (
                a
                for a in prometheus.alerts()
                if a["labels"].get("alertname") == "TfmwTrainingStalled"
                and a["labels"].get("namespace") == namespace
                and a["state"] == "firing"
                and time_seconds(a["activeAt"]) >= rose_at
            ),
            None,
        )

    alert = wait_for(firing, 300, "the stall alert firing", 2, lambda: json.dumps(prometheus.alerts())[:2000])
    assert alert["labels"]["release"] == RELEASE and alert["labels"]["severity"] == "warning", alert
    assert not [a for a in prometheus.alerts() if a["labels"].get("alertname") == "TfmwRunFailed"]
