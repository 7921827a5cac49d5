"""Prometheus on the local cluster, the way a cluster without prometheus-operator runs it:
Debian's `prometheus` on the host, scraping every pod with the standard `prometheus.io/scrape`,
`/port` and `/path` annotations at its pod IP (the host routes each node's pod subnet), with the
target labels the chart's alert rules and dashboard read: `namespace` and `pod`.

Debian builds its prometheus without Kubernetes service discovery (`kubernetes_sd_configs` is
not in its binary), so the pods come to it through `file_sd_configs`: a discoverer on the host
(`python -m tfmw.devcluster.prometheus discover`, started and stopped with it) lists the
cluster's pods every 5 s and writes the targets the usual relabelling of
`kubernetes_sd_configs` (role pod) would keep (`targets_of`). Alert rules are plain rules files
in <state>/prometheus/rules/ (the chart's `<fullname>-alert-rules` ConfigMap holds one per
release: `add_rules`).

The scrapes come from the host's address on the cluster's bridge: a release admits them with
`networkPolicy.metricsFrom: [{ipBlock: {cidr: <that address>/32}}]` (`scraper_peer`).

    python -m tfmw.devcluster.prometheus start|stop [--state DIR]   (on a running `make cluster`)
    python -m tfmw.devcluster.prometheus discover [--state DIR]     (what start runs beside it)
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from tfmw.devcluster import controlplane
from tfmw.devcluster.addoncli import addon_main

BINARY = "prometheus"
INTERVAL = "5s"  # scrape and rule evaluation: the tests wait for a few


class PrometheusError(Exception):
    """One line: why Prometheus could not start or answer."""


@dataclass(frozen=True)
class Prometheus:
    url: str  # http://127.0.0.1:<port>
    rules_dir: Path

    def query(self, expr: str) -> list[dict]:
        """An instant query's result vector ([] when nothing matches)."""
        return self._get("/api/v1/query", {"query": expr})["result"]

    def alerts(self) -> list[dict]:
        return self._get("/api/v1/alerts", {})["alerts"]

    def targets(self) -> list[dict]:
        return self._get("/api/v1/targets", {"state": "active"})["activeTargets"]

    def reload(self) -> None:
        request = urllib.request.Request(self.url + "/-/reload", method="POST")
        urllib.request.urlopen(request, timeout=10).read()

    def add_rules(self, name: str, text: str) -> Path:
        """A rules file (the chart's ConfigMap's) loaded: written, then Prometheus reloaded."""
        path = self.rules_dir / f"{name}.yaml"
        path.write_text(text)
        self.reload()
        return path

    def _get(self, path: str, params: dict) -> dict:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            answer = json.loads(urllib.request.urlopen(url, timeout=10).read())
        except (urllib.error.URLError, OSError, ValueError) as err:
            raise PrometheusError(f"GET {path}: {err}") from None
        if answer.get("status") != "success":
            raise PrometheusError(f"GET {path}: {answer.get('error')}")
        return answer["data"]


def directory(state: controlplane.ClusterState) -> Path:
    return state.dir / "prometheus"


def scraper_peer(state: controlplane.ClusterState) -> dict:
    """The NetworkPolicyPeer of this Prometheus's scrapes (the host's address on the bridge)."""
    return {"ipBlock": {"cidr": f"{state.address}/32"}}


def config(targets: Path, rules_dir: Path) -> dict:
    """prometheus.yml: the pods the discoverer writes to `targets` (pure)."""
    return {
        "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
        "rule_files": [str(rules_dir / "*.yaml")],
        "scrape_configs": [
            {
                "job_name": "kubernetes-pods",
                "file_sd_configs": [{"files": [str(targets)], "refresh_interval": INTERVAL}],
            }
        ],
    }


def targets_of(pods: list[dict]) -> list[dict]:
    """The file_sd target groups of the pods that `kubernetes_sd_configs` (role pod) with the
    standard annotation relabelling would keep (pure): `prometheus.io/scrape: "true"`, a pod IP,
    phase Running; address `<pod IP>:<prometheus.io/port>`, path `prometheus.io/path`; labels
    `namespace` and `pod`."""
    groups = []
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        annotations = meta.get("annotations") or {}
        port, address = annotations.get("prometheus.io/port", ""), status.get("podIP")
        if annotations.get("prometheus.io/scrape") != "true" or not address or not port.isdigit():
            continue
        if status.get("phase") != "Running":
            continue
        labels = {"namespace": meta.get("namespace", ""), "pod": meta.get("name", "")}
        if annotations.get("prometheus.io/path"):
            labels["__metrics_path__"] = annotations["prometheus.io/path"]
        groups.append({"targets": [f"{address}:{port}"], "labels": labels})
    return sorted(groups, key=lambda g: (g["labels"]["namespace"], g["labels"]["pod"]))


def discover(state: controlplane.ClusterState, period: float = 5.0) -> None:
    """Every `period`: the cluster's pods listed, their targets written (atomically) where
    Prometheus's file_sd_configs reads them. Runs until stopped (SIGTERM)."""
    api = state.api("admin")
    out = directory(state) / "targets.json"
    while True:
        try:
            text = json.dumps(targets_of(api.items("/api/v1/pods")), indent=1)
        except Exception as err:  # an API server restarting: keep the last targets, say why
            print(f"prometheus discover: pods not listed: {err}", file=sys.stderr, flush=True)
        else:
            tmp = out.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(out)
        time.sleep(period)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(state: controlplane.ClusterState) -> Prometheus | None:
    try:
        data = json.loads((directory(state) / "prometheus.json").read_text())
    except (OSError, ValueError):
        return None
    return Prometheus(data["url"], Path(data["rules_dir"]))


def start(state: controlplane.ClusterState, say=print) -> Prometheus:
    """This cluster's Prometheus, started if it is not running. Idempotent."""
    running = load(state)
    if running is not None and controlplane.is_ours(state.pids.get("prometheus", 0), state.created.get("prometheus")):
        return running
    binary = shutil.which(BINARY)
    if binary is None:
        raise PrometheusError("prometheus is missing: make host-packages installs it (apt)")
    root = directory(state)
    rules_dir = root / "rules"
    rules_dir.mkdir(parents=True, exist_ok=True)
    targets = root / "targets.json"
    targets.write_text("[]")
    (root / "prometheus.yml").write_text(yaml.safe_dump(config(targets, rules_dir), sort_keys=False))
    discoverer = controlplane.spawn(
        [sys.executable, "-m", "tfmw.devcluster.prometheus", "discover", "--state", str(state.dir)],
        state.dir / "logs" / "prometheus-discover.log",
    )
    state.pids["prometheus-discover"] = discoverer.pid
    state.created["prometheus-discover"] = controlplane.started_at(discoverer.pid)
    port = _free_port()
    argv = [
        binary,
        f"--config.file={root / 'prometheus.yml'}",
        f"--storage.tsdb.path={root / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-lifecycle",  # POST /-/reload once a release's rules are added
        "--storage.tsdb.retention.time=1d",
    ]
    proc = controlplane.spawn(argv, state.dir / "logs" / "prometheus.log")
    state.pids["prometheus"], state.created["prometheus"] = proc.pid, controlplane.started_at(proc.pid)
    state.save()
    prometheus = Prometheus(f"http://127.0.0.1:{port}", rules_dir)
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(prometheus.url + "/-/ready", timeout=2).read()
            break
        except (urllib.error.URLError, OSError):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise PrometheusError(
                    f"Prometheus did not become ready on {prometheus.url} (its log: {state.dir}/logs/prometheus.log)"
                ) from None
            time.sleep(0.3)
    (root / "prometheus.json").write_text(json.dumps({"url": prometheus.url, "rules_dir": str(rules_dir)}))
    say(f"prometheus: {prometheus.url}, scraping pods by the prometheus.io annotations (from {state.address})")
    return prometheus


def stop(state: controlplane.ClusterState) -> None:
    for name in ("prometheus", "prometheus-discover"):
        controlplane.stop_pid(state.pids.get(name, 0), state.created.get(name), 5.0)
    shutil.rmtree(directory(state), ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    verbs = {"start": start, "stop": stop, "discover": discover}
    return addon_main(argv, "prometheus", __doc__, verbs, (PrometheusError,), without_api=("stop",))


if __name__ == "__main__":
    sys.exit(main())
