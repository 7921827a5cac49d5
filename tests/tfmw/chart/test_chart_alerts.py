"""The release's alert rules and Grafana dashboard (metrics.alerts, metrics.dashboard): one source
rendered as a PrometheusRule where the operator's API is served and as a plain rules file
elsewhere, checked by the real promtool (`check rules`, and `test rules` with series that make
each alert fire or stay quiet); the dashboard is valid JSON whose every query names a metric
the workers' /metrics serves (scraped from the real collector)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import chartkit
import yaml
from chartkit import RELEASE, find, one
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from entrypoint.goodput import Ledger
from entrypoint.lifecycle import fresh
from entrypoint.metrics import RunCollector
from entrypoint.tracker import RunTracker
from tfmw.chart import helmkit

NAMESPACE = "training"  # chartkit's
POD = f"{RELEASE}-tf-multiworker-0"
OPERATOR = "monitoring.coreos.com/v1/PrometheusRule"


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is not installed: make test installs Debian's prometheus package (make host-packages)"
    return found


def template(helm, sets=(), api_versions=()) -> list[dict]:
    args = ["template", RELEASE, str(chartkit.CHART), "--namespace", chartkit.NAMESPACE]
    for api in api_versions:
        args += ["--api-versions", api]
    for item in sets:
        args += ["--set", item]
    result = chartkit.run_helm(helm, args)
    assert result.returncode == 0, result.stderr
    return helmkit.parse_manifests(result.stdout)


def rules_of(helm, render, *sets, api_versions=()) -> dict:
    if api_versions:
        objects = template(helm, ("metrics.alerts.enabled=true", *sets), api_versions)
    else:
        objects = render(helm, sets=("metrics.alerts.enabled=true", *sets))
    if api_versions:
        return one(objects, "PrometheusRule")["spec"]
    configmap = one(objects, "ConfigMap", f"{RELEASE}-tf-multiworker-alert-rules")
    return yaml.safe_load(configmap["data"]["tf-multiworker.rules.yaml"])


def test_no_rules_and_no_dashboard_unless_asked(helm, render):
    objects = render(helm)
    assert not find(objects, "PrometheusRule")
    names = [o["metadata"]["name"] for o in find(objects, "ConfigMap")]
    assert not [n for n in names if n.endswith(("-alert-rules", "-dashboard"))]


def test_the_operator_and_the_plain_file_get_the_same_rules(helm, render):
    plain = rules_of(helm, render)
    operator = rules_of(helm, render, api_versions=(OPERATOR,))
    assert plain == operator
    objects = template(helm, ("metrics.alerts.enabled=true",), (OPERATOR,))
    assert not [o for o in find(objects, "ConfigMap") if o["metadata"]["name"].endswith("-alert-rules")]
    alerts = [r["alert"] for r in plain["groups"][0]["rules"]]
    assert alerts == [
        "TfmwTrainingStalled",
        "TfmwRestartLoop",
        "TfmwGoodputLow",
        "TfmwRunFailed",
        "TfmwWorkerNotScraped",
    ]


def run_promtool(tmp_path, rules: dict, tests: list[dict] | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    if tests is None:
        return subprocess.run(
            [promtool(), "check", "rules", str(tmp_path / "rules.yaml")], capture_output=True, text=True
        )
    suite = {"rule_files": ["rules.yaml"], "evaluation_interval": "15s", "tests": tests}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(suite))
    return subprocess.run([promtool(), "test", "rules", str(tmp_path / "test.yaml")], capture_output=True, text=True)


def test_promtool_checks_the_rules(helm, render, tmp_path):
    proc = run_promtool(tmp_path, rules_of(helm, render))
    assert proc.returncode == 0 and "SUCCESS: 5 rules found" in proc.stdout, proc.stdout + proc.stderr


def series(name: str, values: str, **labels) -> dict:
    labels = {"namespace": NAMESPACE, "pod": POD, **labels}
    inside = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inside}}}", "values": values}


ANNOTATIONS: dict[str, dict] = {}  # alert -> its annotations as the rules give them


def fired(alert: str, at: str, **labels) -> dict:
    """At `at`, `alert` fires with these labels (and its annotations, the pod filled in), or,
    without labels, does not fire."""
    annotations = {k: v.replace("{{ $labels.pod }}", POD) for k, v in ANNOTATIONS.get(alert, {}).items()}
    expected = [{"exp_labels": labels, "exp_annotations": annotations}] if labels else []
    return {"eval_time": at, "alertname": alert, "exp_alerts": expected}


def test_each_alert_fires_when_it_should_and_not_before(helm, render, tmp_path):
    """Stalled after 120 s without a step while Running (not while the step moves); a restart
    loop past 5 in an hour; goodput under 0.8 for 30 min; Failed; a target down for 300 s.
    Series of another release's pods never fire this release's alerts."""
    rules = rules_of(helm, render, "metrics.alerts.stalledSeconds=120")
    ANNOTATIONS.update({r["alert"]: r["annotations"] for r in rules["groups"][0]["rules"]})
    common = {"severity": "warning", "release": RELEASE, "namespace": NAMESPACE}
    running = series("tfmw_phase", "1x40", tfmw_phase="Running")
    tests = [
        {  # the step moves for 5 min, then stops
            "interval": "15s",
            "input_series": [series("tfmw_step", "0+10x20 200x20"), running],
            "alert_rule_test": [
                fired("TfmwTrainingStalled", "4m"),
                fired("TfmwTrainingStalled", "8m", **common),
            ],
        },
        {
            "interval": "1m",
            "input_series": [series("tfmw_restarts", "0 1 2 3 4 5 6 7", kind="failure")],
            "alert_rule_test": [fired("TfmwRestartLoop", "4m"), fired("TfmwRestartLoop", "7m", **common)],
        },
        {
            "interval": "1m",
            "input_series": [series("tfmw_goodput_ratio", "0.5x40")],
            "alert_rule_test": [fired("TfmwGoodputLow", "20m"), fired("TfmwGoodputLow", "35m", **common)],
        },
        {
            "interval": "1m",
            "input_series": [series("tfmw_phase", "0 0 1 1", tfmw_phase="Failed")],
            "alert_rule_test": [fired("TfmwRunFailed", "1m"), fired("TfmwRunFailed", "3m", **common)],
        },
        {
            "interval": "1m",
            "input_series": [series("up", "1 1 0x10")],
            "alert_rule_test": [
                fired("TfmwWorkerNotScraped", "5m"),
                fired("TfmwWorkerNotScraped", "8m", pod=POD, **common),
            ],
        },
        {  # another release in the namespace
            "interval": "1m",
            "input_series": [series("tfmw_phase", "1x5", pod="other-tf-multiworker-0", tfmw_phase="Failed")],
            "alert_rule_test": [fired("TfmwRunFailed", "4m")],
        },
    ]
    proc = run_promtool(tmp_path, rules, tests)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def served_metrics() -> set[str]:
    """Every metric name the workers' /metrics serves, from the real collector."""
    tracker = RunTracker(
        fresh("r1", "rev", "2026-12-02T00:00:00Z"),
        type("R", (), {"record": lambda *a, **k: None, "event": lambda *a, **k: None})(),
        is_chief=True,
        worker_index=0,
        log=lambda line: None,
        ledger=Ledger(0.0),
    )
    for line in (
        "tfmw start run=r1 worker=0/2 replicas=2 resume_step=0 steps=100",
        "tfmw progress step=10/100 epoch=1 loss=0.5000 examples_per_sec=10.0",
        "tfmw checkpoint saved step=10 path=/x/ckpt-10 seconds=0.5",
    ):
        tracker.on_line(line)
    registry = CollectorRegistry()
    registry.register(RunCollector(tracker, worker=0, role="chief"))
    text = generate_latest(registry).decode()
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {sample.name for sample in family.samples} | {family.name}
    return names


def test_the_dashboard_is_a_dashboard_whose_queries_name_served_metrics(helm, render):
    objects = render(helm, sets=("metrics.dashboard.enabled=true",))
    configmap = one(objects, "ConfigMap", f"{RELEASE}-tf-multiworker-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(configmap["data"]["tf-multiworker.json"])
    assert dashboard["title"] == f"tf-multiworker: {NAMESPACE}/{RELEASE}" and dashboard["uid"].startswith("tfmw-")
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["panels"]
    served = served_metrics()
    for panel in dashboard["panels"]:
        assert panel["type"] and panel["title"] and panel["gridPos"] and panel["targets"], panel
        for target in panel["targets"]:
            expr = target["expr"]
            assert f'namespace="{NAMESPACE}", pod=~"{RELEASE}-tf-multiworker-[0-9]+"' in expr, expr
            for name in re.findall(r"\b(tfmw_[a-z_]+)\{", expr):
                assert name in served, (name, panel["title"])
