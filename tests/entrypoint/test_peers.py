"""Peer wait: deadline, backoff, progress logging, naming the missing peers."""

from __future__ import annotations

import pytest

from entrypoint.errors import PeersNotFound
from entrypoint.peers import dns_resolves, wait_for_peers


class FakeTime:
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def test_returns_once_every_peer_resolves():
    t = FakeTime()
    ready_at = {"a": 0.0, "b": 3.0, "c": 7.0}
    logs = []
    waited = wait_for_peers(
        ["a", "b", "c"], 60, resolve=lambda h: t.now >= ready_at[h], clock=t.clock, sleep=t.sleep, log=logs.append
    )
    assert 7.0 <= waited < 12.0
    assert logs[0].startswith("tfmw launcher peers: 1/3 resolved, waiting for b, c")
    assert logs[-1] == f"tfmw launcher peers: all 3 resolved after {waited:.1f}s"


def test_backoff_doubles_and_is_capped():
    t = FakeTime()
    with pytest.raises(PeersNotFound):
        wait_for_peers(
            ["x"],
            40,
            resolve=lambda h: False,
            clock=t.clock,
            sleep=t.sleep,
            log=lambda _: None,
            first_delay=0.5,
            max_delay=4,
        )
    assert t.sleeps[:5] == [0.5, 1, 2, 4, 4]
    assert max(t.sleeps) == 4


def test_timeout_names_missing_peers_and_says_what_to_do():
    t = FakeTime()
    with pytest.raises(PeersNotFound) as err:
        wait_for_peers(
            ["ok", "w-1.svc", "w-2.svc"],
            10,
            resolve=lambda h: h == "ok",
            clock=t.clock,
            sleep=t.sleep,
            log=lambda _: None,
        )
    message = str(err.value)
    assert "2 of 3 never resolved: w-1.svc, w-2.svc" in message
    assert "peers.timeoutSeconds" in message
    assert err.value.exit_code == 3
    assert t.now == pytest.approx(10.0)  # never sleeps past the deadline


def test_many_missing_peers_are_summarised():
    t = FakeTime()
    with pytest.raises(PeersNotFound, match=r"w0, w1, w2, w3, w4 and 5 more"):
        wait_for_peers(
            [f"w{i}" for i in range(10)], 1, resolve=lambda h: False, clock=t.clock, sleep=t.sleep, log=lambda _: None
        )


def test_progress_logged_at_most_every_interval():
    t = FakeTime()
    logs = []
    with pytest.raises(PeersNotFound):
        wait_for_peers(
            ["x"], 60, resolve=lambda h: False, clock=t.clock, sleep=t.sleep, log=logs.append, log_every_seconds=10
        )
    assert 5 <= len(logs) <= 8


def test_real_resolver_on_loopback_names():
    assert dns_resolves("localhost")
    assert not dns_resolves("no-such-peer.invalid")


def test_launcher_exits_3_naming_missing_peer(tmp_path):
    # An Indexed Job pod (the Job controller owns the lifecycle): PeersNotFound is exit 3.
    import subprocess
    import sys

    env = {
        "JOB_COMPLETION_INDEX": "0",
        "HOSTNAME": "w-0",
        "TFMW_NAMESPACE": "ns",
        "TFMW_SERVICE": "nosuchsvc",
        "TFMW_REPLICAS": "2",
        "TFMW_CLUSTER_DOMAIN": "invalid",
        "TFMW_PEER_TIMEOUT_SECONDS": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "entrypoint", "run", "--", "true"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 3
    assert "w-0.nosuchsvc.ns.svc.invalid, w-1.nosuchsvc.ns.svc.invalid" in proc.stderr
    assert proc.stderr.startswith("tfmw: PeersNotFound: peers not found after 1s")
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "tfmw failed run=default reason=PeersNotFound exit_code=3" in proc.stdout


def test_lookups_run_concurrently():
    import threading
    import time as real_time

    active = peak = 0
    lock = threading.Lock()

    def slow_resolve(host):
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        real_time.sleep(0.02)
        with lock:
            active -= 1
        return True

    started = real_time.monotonic()
    wait_for_peers([f"w{i}" for i in range(200)], 60, resolve=slow_resolve, log=lambda _: None)
    assert peak > 1
    assert real_time.monotonic() - started < 200 * 0.02 / 4  # far below one-at-a-time
