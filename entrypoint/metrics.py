"""The launcher's Prometheus endpoint: `/metrics` in the text format (docs/contracts.md, "Metrics"),
and on the same port the workers' readiness, `/ready` (entrypoint.readiness).

Served by the launcher, not the trainer, so it answers through every restart of the training
command: prometheus-client's exposition, on the launcher's own one-thread server
(entrypoint.httpserve: prometheus-client's gives each connection a thread and no timeout).
Nothing is counted twice: each scrape reads the run tracker (entrypoint.tracker), which already
follows the trainer's lines, and its time account (entrypoint.goodput). Any command gets the
launcher's metrics (phase, restarts, goodput); the built-in trainer's lines add the training
ones (step, loss, examples/s, checkpoints).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
    SummaryMetricFamily,
)

from .goodput import CAUSES
from .httpserve import SelectorHTTPServer
from .lifecycle import Phase
from .restarts import RESTART_KINDS
from .tracker import RunTracker


class RunCollector:
    """The run's metrics, computed at scrape time from the tracker."""

    def __init__(self, tracker: RunTracker, *, worker: int, role: str):
        self.tracker = tracker
        self.worker = str(worker)
        self.role = role

    def describe(self) -> list:
        return []  # no registration-time scrape: the tracker may not be ready yet

    def collect(self) -> Iterator[Metric]:
        state, account, observed = self.tracker.view()
        yield InfoMetricFamily(
            "tfmw_run",
            "The run this launcher trains",
            value={"run_id": state.run_id, "worker": self.worker, "role": self.role, "revision": state.revision},
        )
        yield StateSetMetricFamily(
            "tfmw_phase",
            "The run's phase (docs/lifecycle.md), as this launcher sees it",
            value={str(p): p is state.phase for p in Phase},
        )
        yield from _gauges(
            [
                ("tfmw_step", "The last training step seen", state.step),
                ("tfmw_total_steps", "The run's total steps", state.total_steps),
                ("tfmw_loss", "The last loss the trainer printed", _float(state.loss)),
                (
                    "tfmw_examples_per_second",
                    "Global examples per second over the last logging window",
                    observed.examples_per_sec,
                ),
                (
                    "tfmw_last_checkpoint_step",
                    "The step of the chief's last published checkpoint",
                    state.last_checkpoint_step,
                ),
                (
                    "tfmw_checkpoint_last_seconds",
                    "The last checkpoint save's seconds (the chief's)",
                    observed.checkpoint_seconds_last,
                ),
                (
                    "tfmw_checkpoint_interval_seconds",
                    "The checkpoint interval the trainer chose (checkpoint.interval auto)",
                    observed.checkpoint_interval_seconds,
                ),
                (
                    "tfmw_goodput_ratio",
                    "Productive seconds / wall seconds of the run (entrypoint.goodput)",
                    account.goodput,
                ),
            ]
        )
        yield SummaryMetricFamily(
            "tfmw_checkpoint_seconds",
            "Checkpoint saves and their seconds (the chief's)",
            count_value=observed.checkpoints,
            sum_value=observed.checkpoint_seconds_sum,
        )
        restarts = CounterMetricFamily(
            "tfmw_restarts", "In-place restarts of the training command, by kind", labels=["kind"]
        )
        for kind in RESTART_KINDS:
            restarts.add_metric([kind], observed.restarts.get(kind, 0))
        yield restarts
        yield GaugeMetricFamily(
            "tfmw_run_restarts", "The run's restarts as recorded (pod restarts included)", value=state.restarts
        )
        yield CounterMetricFamily(
            "tfmw_productive_seconds", "Seconds of kept training progress", value=account.productive
        )
        if observed.members is not None:  # training.elastic
            yield GaugeMetricFamily(
                "tfmw_members", "The members of the elastic group's epoch (of tfmw_replicas)", value=observed.members
            )
            yield GaugeMetricFamily("tfmw_replicas", "The group's configured workers", value=observed.replicas)
            yield CounterMetricFamily(
                "tfmw_degraded_seconds",
                "Seconds this launcher's elastic group trained with fewer members than workers.replicas",
                value=self.tracker.degraded_seconds(),
            )
        badput = CounterMetricFamily(
            "tfmw_badput_seconds", "Seconds that produced no kept progress, by cause", labels=["cause"]
        )
        for cause in CAUSES:
            badput.add_metric([cause], account.badput[cause])
        yield badput


def _float(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _gauges(rows) -> Iterator[Metric]:
    for name, doc, value in rows:
        if value is not None:  # unknown yet: absent, not a made-up 0
            yield GaugeMetricFamily(name, doc, value=float(value))


def app(registry: CollectorRegistry, ready: Callable[[], tuple[bool, str]] | None) -> Callable:
    """The WSGI app: `/ready` answers 200 or 503 with why (the kubelet's readinessProbe), every
    other path is prometheus-client's exposition of `registry`."""
    metrics = make_wsgi_app(registry)

    def routed(environ, start_response):
        if environ.get("PATH_INFO") == "/ready" and ready is not None:
            ok, why = ready()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [why.encode() + b"\n"]
        return metrics(environ, start_response)

    return routed


def serve(
    port: int,
    collector: RunCollector,
    log: Callable[[str], None],
    ready: Callable[[], tuple[bool, str]] | None = None,
) -> object | None:
    """Serve /metrics (and /ready) on `port` (every address) in a daemon thread; None, after
    one line, when the port cannot be bound: metrics are never worth a training run."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    error: OSError | None = None
    for address, family in (("::", socket.AF_INET6), ("0.0.0.0", socket.AF_INET)):  # dual-stack where there is IPv6
        if family == socket.AF_INET6 and not socket.has_ipv6:
            continue
        try:
            server = SelectorHTTPServer((address, port), family, app(registry, ready))
        except OSError as err:
            error = err
            continue
        threading.Thread(target=server.serve_forever, name="tfmw-metrics", daemon=True).start()
        return server
    log(
        f"metrics: cannot serve on port {port} ({error.strerror or error}); training goes on without "
        "a /metrics endpoint (metrics.port)"
    )
    return None
