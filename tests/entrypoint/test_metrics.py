"""entrypoint.metrics: the launcher's /metrics, scraped over HTTP and read with prometheus-client's
own parser; the port refusals of entrypoint.settings."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from entrypoint.errors import ConfigError
from entrypoint.goodput import Ledger
from entrypoint.lifecycle import Phase, fresh
from entrypoint.metrics import RunCollector, serve
from entrypoint.settings import load_settings
from entrypoint.tracker import RunTracker


class _Recorder:
    def record(self, *a, **kw):
        pass

    def event(self, *a, **kw):
        pass


class _Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict[str, list]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(body)}


def _value(samples, **labels) -> float:
    [sample] = [s for s in samples if all(s.labels.get(k) == v for k, v in labels.items())]
    return sample.value


def test_a_scrape_shows_the_run_as_the_tracker_follows_it():
    clock = _Clock()
    tracker = RunTracker(
        fresh("r1", "rev", "2026-12-02T00:00:00Z"),
        _Recorder(),
        is_chief=True,
        worker_index=0,
        log=lambda line: None,
        clock=clock,
        ledger=Ledger(clock.now),
    )
    port = _free_port()
    server = serve(port, RunCollector(tracker, worker=0, role="chief"), log=pytest.fail)
    try:
        before = _scrape(port)
        assert _value(before["tfmw_phase"], tfmw_phase="Pending") == 1.0
        assert "tfmw_step" not in before and "tfmw_loss" not in before  # unknown: absent, not 0
        tracker.transition(Phase.RUNNING)
        clock.now += 4.0
        tracker.beat(1, "train")  # training from here
        tracker.on_line("tfmw start run=r1 worker=0/2 steps=100 resume_step=0")
        tracker.on_line("tfmw progress step=20/100 epoch=1 loss=0.5000 examples_per_sec=640.0")
        clock.now += 10.0
        tracker.on_line("tfmw checkpoint saved step=20 path=/x/ckpt-20 seconds=2.000")
        tracker.restart_counted("group")
        after = _scrape(port)
    finally:
        server.shutdown()
        server.server_close()
    assert _value(after["tfmw_phase"], tfmw_phase="Running") == 1.0
    assert _value(after["tfmw_phase"], tfmw_phase="Pending") == 0.0
    assert _value(after["tfmw_run_info"], run_id="r1", worker="0", role="chief") == 1.0
    assert _value(after["tfmw_step"]) == 20 and _value(after["tfmw_total_steps"]) == 100
    assert _value(after["tfmw_loss"]) == 0.5 and _value(after["tfmw_examples_per_second"]) == 640.0
    assert _value(after["tfmw_last_checkpoint_step"]) == 20
    counts = {s.name: s.value for s in after["tfmw_checkpoint_seconds"]}
    assert counts == {"tfmw_checkpoint_seconds_count": 1.0, "tfmw_checkpoint_seconds_sum": 2.0}
    assert _value(after["tfmw_restarts"], kind="group") == 1.0 and _value(after["tfmw_restarts"], kind="oom") == 0
    assert _value(after["tfmw_badput_seconds"], cause="startup") == pytest.approx(4.0)
    assert _value(after["tfmw_badput_seconds"], cause="checkpoint") == pytest.approx(2.0)
    assert _value(after["tfmw_productive_seconds"]) == pytest.approx(8.0)
    assert _value(after["tfmw_goodput_ratio"]) == pytest.approx(8.0 / 14.0)


def test_a_taken_port_is_one_line_and_no_endpoint():
    with socket.socket(socket.AF_INET6 if socket.has_ipv6 else socket.AF_INET) as taken:
        taken.bind(("::" if socket.has_ipv6 else "0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with socket.socket() as taken4:
            try:
                taken4.bind(("0.0.0.0", port))
                taken4.listen()
            except OSError:
                pass  # the dual-stack socket holds IPv4 too
            lines: list[str] = []
            tracker = RunTracker(
                fresh("r", "", "2026-12-02T00:00:00Z"),
                _Recorder(),
                is_chief=False,
                worker_index=1,
                log=lambda line: None,
            )
            assert serve(port, RunCollector(tracker, worker=1, role="worker"), log=lines.append) is None
    [line] = lines
    assert line.startswith(f"metrics: cannot serve on port {port} (") and "training goes on" in line


BASE = {"TFMW_POD_NAME": "w-0", "TFMW_NAMESPACE": "ns", "TFMW_SERVICE": "w", "TFMW_REPLICAS": "2", "TFMW_PORT": "2222"}


def test_the_metrics_port_is_read_and_off_by_default():
    assert load_settings(BASE).metrics_port == 0
    assert load_settings({**BASE, "TFMW_METRICS_PORT": "9090"}).metrics_port == 9090
    loopback = {**BASE, "TFMW_LOOPBACK_PORTS": "1", "TFMW_PORT": "30000", "TFMW_METRICS_PORT": "30002"}
    assert load_settings(loopback).metrics_port == 30002  # 30000-30001 gRPC, 30002-30003 metrics


@pytest.mark.parametrize(
    "env, needle",
    [
        ({"TFMW_METRICS_PORT": "x"}, "TFMW_METRICS_PORT='x' must be a TCP port 1-65535, or 0"),
        ({"TFMW_METRICS_PORT": "70000"}, "TFMW_METRICS_PORT='70000' must be a TCP port"),
        ({"TFMW_METRICS_PORT": "2222"}, "TFMW_METRICS_PORT=2222 is a port the workers' gRPC uses (TFMW_PORT=2222)"),
        (
            {"TFMW_LOOPBACK_PORTS": "1", "TFMW_PORT": "30000", "TFMW_METRICS_PORT": "30001"},
            "TFMW_METRICS_PORT=30001 is a port the workers' gRPC uses (TFMW_PORT=30000 to 30001)",
        ),
        ({"TFMW_LOOPBACK_PORTS": "1", "TFMW_METRICS_PORT": "65535"}, "set metrics.port to at most 65534"),
    ],
)
def test_a_bad_metrics_port_is_refused_in_one_line(env, needle):
    with pytest.raises(ConfigError) as err:
        load_settings({**BASE, **env})
    assert needle in str(err.value) and "\n" not in str(err.value)


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_ready_answers_the_kubelets_probe_from_the_tracker_on_the_metrics_port():
    tracker = RunTracker(
        fresh("r1", "rev", "2026-12-02T00:00:00Z"), _Recorder(), is_chief=False, worker_index=1, log=lambda _: None
    )
    port = _free_port()
    server = serve(port, RunCollector(tracker, worker=1, role="worker"), log=pytest.fail, ready=tracker.ready)
    try:
        assert _get(port, "/ready") == (503, "the group is not training: Pending\n")
        tracker.transition(Phase.RUNNING)
        tracker.attempt_started()
        tracker.beat(3, "train")
        assert _get(port, "/ready") == (200, "the group trains\n")
        tracker.transition(Phase.WAITING, message="waiting for workers that are not running (w-0: Unschedulable)")
        assert _get(port, "/ready") == (503, "the group is not training: Waiting\n")
        assert _get(port, "/metrics")[0] == 200  # the same server still serves the metrics
    finally:
        server.shutdown()
        server.server_close()


def test_an_elastic_group_shows_its_members_and_degraded_seconds():
    mono = [50.0]
    tracker = RunTracker(
        fresh("r1", "rev", "2026-12-02T00:00:00Z"),
        _Recorder(),
        is_chief=False,
        worker_index=1,
        log=lambda line: None,
        monotonic=lambda: mono[0],
    )
    collector = RunCollector(tracker, worker=1, role="worker")
    assert "tfmw_members" not in {m.name for m in collector.collect()}  # not elastic: absent
    tracker.members(3, 4)  # shrunk
    mono[0] += 30.0
    tracker.members(4, 4)  # grown back
    mono[0] += 100.0
    metrics = {m.name: m for m in collector.collect()}
    assert metrics["tfmw_members"].samples[0].value == 4 and metrics["tfmw_replicas"].samples[0].value == 4
    assert metrics["tfmw_degraded_seconds"].samples[0].value == pytest.approx(30.0)
