"""The fault harness's pure parts and refusals (fast): how a faulted run's logs become the
measurements, the cluster mode's bookkeeping of pod incarnations, and the CLI's one-line
errors. The real faults are in test_faults.py and tests/e2e/cluster/test_cluster_faults.py."""

from __future__ import annotations

import math
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from tfmw.faults import analysis as fault_analysis
from tfmw.faults import cluster as fault_cluster
from tfmw.faults import inject as fault_inject
from tfmw.faults import kube as fault_kube
from tfmw.faults import local as fault_local
from tfmw.faults import nodes as fault_nodes
from tfmw.faults import podlogs as fault_podlogs
from tfmw.faults import tables as fault_tables
from tfmw.faults.analysis import FaultResult
from tfmw.faults.podlogs import Incarnation, Stream

DONE = "tfmw done steps=100 final_loss=0.1 examples_per_sec=9 model=/m weights_digest={}"


def start(resume: int) -> str:
    return f"tfmw start run=r worker=0/2 replicas=2 model=cnn resume_step={resume} steps=100"


def progress(step: int) -> str:
    return f"tfmw progress step={step}/100 epoch=1 loss=0.5 examples_per_sec=10"


def test_fill_result_measures_from_the_chiefs_restart():
    # Fault at t=10 (step 50); the group goes on to 60 (a graceful stop at the boundary),
    # the chief restarts at t=20 from 60 and steps again at t=23.
    chief = Stream(
        [
            start(0),
            progress(50),
            "tfmw stopped step=60/100 reason=sigterm",
            progress(60),
            "tfmw launcher restarting training in place in 1s: x",
            start(60),
            progress(61),
            DONE.format("d"),
        ],
        [1, 9, 12, 11.5, 13, 20, 23, 40],
    )
    worker = Stream(
        [start(0), progress(50), "tfmw sigterm: will checkpoint and stop", start(60), DONE.format("d")],
        [1, 9, 10.5, 21, 40],
    )
    result = FaultResult("delete-worker", False, "", 100, 20)
    fault_analysis.fill_result(result, {0: chief, 1: worker}, {0: 2, 1: 2}, fault_time=10.0)
    assert (result.step_at_fault, result.resume_step, result.steps_lost) == (60, 60, 0)
    assert result.seconds_to_resume == pytest.approx(13.0)
    assert result.seconds_to_detect == pytest.approx(0.5)
    assert result.final_steps == {100} and result.digests == {"d"} and result.model == "/m"
    assert result.trainer_restarts == 1 and result.identical_weights


def test_a_replaced_chiefs_late_start_does_not_count_the_survivors_new_steps_as_before_the_fault():
    # The chief's node cut off at t=10 (step 52). Worker 1 restarts from 40 at t=20 and trains
    # with the new chief; the new chief's log is followed late, so its start arrives at t=40.
    chief = Stream([start(0), progress(52), start(40), progress(94), DONE.format("d")], [1, 9, 40, 41, 60])
    worker = Stream(
        [start(0), progress(52), start(40), progress(41), progress(94), DONE.format("d")], [1, 9, 20, 21, 39, 60]
    )
    result = FaultResult("node-partition", False, "", 100, 20)
    fault_analysis.fill_result(result, {0: chief, 1: worker}, {0: 2, 1: 2}, fault_time=10.0)
    assert (result.step_at_fault, result.resume_step, result.steps_lost) == (52, 40, 12)


def test_fill_result_names_the_first_watchdog_after_the_fault():
    # worker 1 stopped at t=10: its launcher's bound was said before, the watchdog fires after
    chief = Stream([start(0), progress(50), "tfmw error retryable=true worker=0 UnavailableError: x"], [1, 9, 20])
    worker = Stream(
        [
            start(0),
            "tfmw launcher hang bound 6s from step 9 (adaptive: x)",
            "tfmw launcher watchdog: no training progress for 6.2s (hang timeout 6s, adaptive: y); killing training",
            "tfmw launcher watchdog: no training progress for 600s (hang timeout 600s, static); killing training",
        ],
        [1, 5, 16.2, 700],
    )
    result = FaultResult("hang-worker", False, "", 100, 20)
    fault_analysis.fill_result(result, {0: chief, 1: worker}, {0: 2, 1: 2}, fault_time=10.0)
    assert result.watchdog.startswith("watchdog: no training progress for 6.2s (hang timeout 6s, adaptive: y)")
    unfired = FaultResult("hang-worker", False, "", 100, 20)
    fault_analysis.fill_result(unfired, {0: chief, 1: Stream(worker.lines[:2], worker.times[:2])}, {0: 2, 1: 2}, 10.0)
    assert unfired.watchdog == ""


def test_recovery_parts_split_fault_to_resumed_at_the_chiefs_milestones():
    # Fault at t=10; the chief's trainer reports the lost peer at 10.1 and exits, its launcher
    # restarts at 10.5, starts attempt 2 at 10.6 (warm standby), which connects at once; the
    # group forms at 14 (the killed worker's cold start), restores by 14.5, steps at 15.5.
    chief = Stream(
        [
            start(0),
            progress(50),
            "tfmw error retryable=true worker=0 UnavailableError: x",
            "tfmw launcher restarting training in place in 0s: a peer failed",
            "tfmw launcher starting training (attempt 2): python -m entrypoint.training",
            "tfmw connecting worker=0/2",
            "tfmw connected worker=0/2 seconds=3.40",
            start(40),
            progress(41),
            DONE.format("d"),
        ],
        [1, 9, 10.1, 10.5, 10.6, 10.6, 14.0, 14.5, 15.5, 40],
    )
    worker = Stream([start(0), progress(50), start(40), DONE.format("d")], [1, 9, 14.5, 40])
    result = FaultResult("kill-worker", False, "", 100, 20)
    fault_analysis.fill_result(result, {0: chief, 1: worker}, {0: 2, 1: 2}, fault_time=10.0)
    assert list(result.parts) == list(fault_analysis.RECOVERY_PARTS)
    assert result.parts == pytest.approx(
        {
            "detection": 0.1,
            "trainer exit": 0.4,
            "restart": 0.1,
            "process start": 0.0,
            "group re-form": 3.4,
            "restore": 0.5,
            "first step": 1.0,
        }
    )
    assert sum(result.parts.values()) == pytest.approx(result.seconds_to_resume)


def test_recovery_parts_of_a_killed_chief_merge_what_it_never_printed():
    # The chief's pod died: a new launcher, no `restarting training in place`; its attempt-1
    # line ends the restart part, which then holds the pod restart as well.
    chief = Stream(
        [
            start(0),
            progress(50),
            "(local kubelet) container restarted, start #2",
            "tfmw launcher starting training (attempt 1): x",
            "tfmw connecting worker=0/2",
            "tfmw connected worker=0/2 seconds=0.5",
            start(40),
            progress(41),
        ],
        [1, 9, 11, 11.4, 15, 15.5, 16, 17],
    )
    worker = Stream([start(0), progress(50), "tfmw error retryable=true worker=1 UnavailableError: x"], [1, 9, 10.2])
    result = FaultResult("kill-chief", False, "", 100, 20)
    fault_analysis.fill_result(result, {0: chief, 1: worker}, {0: 2, 1: 2}, fault_time=10.0)
    assert "trainer exit" not in result.parts
    assert result.parts == pytest.approx(
        {
            "detection": 0.2,
            "restart": 1.2,
            "process start": 3.6,
            "group re-form": 0.5,
            "restore": 0.5,
            "first step": 1.0,
        }
    )


def test_the_parts_table_shows_each_part_the_cold_start_and_the_ratio():
    result = FaultResult(
        "kill-worker",
        True,
        "",
        100,
        20,
        seconds_to_resume=6.0,
        seconds_cold_start=8.0,
        goodput=0.71,
        parts={"detection": 0.1, "group re-form": 4.9, "first step": 1.0},
    )
    header, rule, row = fault_tables.parts_table([result])
    assert header.startswith("| fault | detection (s) | trainer exit (s) |") and "resumed / cold start" in header
    assert row.startswith("| kill-worker | 0.1 | - | - | - | 4.9 | - | 1.0 | 6.0 | 8.0 | 0.75x | 71.0% |")


def test_fill_result_without_a_restart_leaves_the_resume_unmeasured():
    chief = Stream([start(0), progress(50), DONE.format("a")], [1, 9, 30])
    worker = Stream([start(0), DONE.format("b")], [1, 30])
    result = FaultResult("kill-worker", False, "", 100, 20)
    fault_analysis.fill_result(result, {0: chief, 1: worker}, {0: 2, 1: 1}, fault_time=10.0)
    assert result.resume_step == -1 and result.steps_lost == -1 and math.isnan(result.seconds_to_resume)
    assert not result.identical_weights  # two digests


def test_identical_weights_includes_the_published_marker():
    result = FaultResult("delete-worker", True, "", 100, 20, digests={"d"})
    assert result.identical_weights
    result.marker_digest = "other"
    assert not result.identical_weights


def test_incarnations_merge_per_ordinal_in_arrival_order():
    old = Incarnation("w-1", 1, "uid-a", 0, first_seen=0, lines=["a1", "a2"], times=[1, 5])
    new = Incarnation("w-1", 1, "uid-b", 0, first_seen=6, lines=["b1", "b2"], times=[7, 8])
    chief = Incarnation("w-0", 0, "uid-c", 0, first_seen=0, lines=["c1"], times=[2])
    streams = fault_podlogs.merge_incarnations([new, chief, old])
    assert streams[1].lines == ["a1", "a2", "b1", "b2"] and streams[1].times == [1, 5, 7, 8]
    assert streams[0].lines == ["c1"]
    assert fault_podlogs.first_index_after(streams[1].times, 6) == 2
    assert fault_podlogs.first_index_after(streams[1].times, 99) == 4


def test_pod_ordinal_only_for_the_statefulsets_pods():
    assert fault_podlogs.pod_ordinal("rel-tf-multiworker-1", "rel-tf-multiworker") == 1
    assert fault_podlogs.pod_ordinal("rel-tf-multiworker-test-peers", "rel-tf-multiworker") is None
    assert fault_podlogs.pod_ordinal("other-0", "rel-tf-multiworker") is None


def test_the_watchdog_is_the_charts_unless_asked():
    assert fault_local.hang_sets(None) == []
    assert fault_local.hang_sets(10) == ["training.hangTimeoutSeconds=10"]
    assert not any("hangTimeoutSeconds" in item for item in fault_local.run_sets(100, 20, None))
    assert fault_local.run_sets(100, 20, 10, ("a=b",))[-2:] == ["training.hangTimeoutSeconds=10", "a=b"]
    assert "training.config.logEverySteps=1" in fault_local.run_sets(100, 20, None)  # every step is seen


def test_cluster_install_uses_a_shared_claim():
    sets = fault_cluster.install_sets(100, 20, 20, ("training.runId=x",))
    assert "storage.type=createClaim" in sets and "training.config.steps=100" in sets
    assert "training.config.checkpoint.everySteps=20" in sets and sets[-1] == "training.runId=x"


def test_cluster_table_says_what_the_controller_did():
    ok = FaultResult(
        "delete-worker",
        True,
        "",
        100,
        20,
        digests={"d"},
        victim="w-1",
        recreated_pod="w-1",
        seconds_to_pod_running=4.25,
        marker_digest="d",
        seconds_total=80.0,
    )
    lost = FaultResult("delete-chief", False, "x", 100, 20, digests={"d"}, victim="w-0")
    cut = FaultResult("node-partition", True, "", 100, 20, victim="w-1", recreated_pod="w-1", fenced_writes="none")
    rows = fault_tables.cluster_table([ok, lost, cut])
    assert rows[2] == "| delete-worker | w-1 | w-1 | 4.2 | matches | - | 80.0 |"
    assert "NOT recreated" in rows[3] and "not read" in rows[3]
    assert rows[4].startswith("| node-partition | w-1 | w-1 | nan | not read | none |"), rows[4]
    assert len(fault_tables.table([ok, lost])) == 4


@pytest.mark.parametrize(
    "before, status, after, wrote",
    [
        (["PeerLost"], {"phase": "Succeeded"}, ["PeerLost", "Succeeded"], "none"),
        (["PeerLost"], {"phase": "Failed"}, ["PeerLost", "Failed"], "status phase Failed; Events Failed"),
        (["Restarted"], {"phase": "Succeeded"}, ["Restarted", "Restarted"], "Events Restarted"),
    ],
)
def test_what_the_fenced_side_wrote_is_read_from_the_status_and_new_events(before, status, after, wrote):
    assert fault_nodes.writes_after_heal(before, status, after) == wrote


def test_a_node_fault_needs_make_clusters_state_folder(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    with pytest.raises(fault_nodes.NodeFaultError, match="act on the nodes of `make cluster`"):
        fault_nodes.cluster_dir(kubeconfig)


@pytest.mark.parametrize(
    "args, message, code",
    [
        (["--scenario", "delete-worker"], "--scenario delete-worker: not a local scenario", 2),
        (["--cluster", "--scenario", "kill-worker"], "--scenario kill-worker: not a cluster scenario", 2),
        (["--scenario", "kill-worker", "--steps", "30"], "--steps 30: the fault lands after step 50, so at least", 2),
        (["--cluster", "--steps", "30"], "--steps 30: the fault lands after step 50, so at least 60", 2),
        (
            ["--cluster", "--kubeconfig", "/nonexistent/kubeconfig"],
            "--kubeconfig /nonexistent/kubeconfig: no such file; start a cluster with `make cluster`",
            2,
        ),
        (["--scenario", "kill-worker", "--set", "noequals"], "faults: bad --set 'noequals': not key=value", 2),
        (
            ["--cluster", "--scenario", "node-loss", "--kubeconfig", "/nonexistent/kubeconfig"],
            "--kubeconfig /nonexistent/kubeconfig: node-loss and node-partition act on the nodes of `make cluster`",
            2,
        ),
    ],
)
def test_cli_refusals_are_one_line(repo, args, message, code):
    proc = subprocess.run(
        [sys.executable, "-m", "tfmw.faults", *args], cwd=repo, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == code, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_cli_refuses_an_unreachable_cluster(repo, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: x}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tfmw.faults", "--cluster", "--kubeconfig", str(kubeconfig)],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr
    assert f"the cluster of {kubeconfig} does not answer" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_detection_is_an_error_the_watchdog_a_sigterm_or_a_stop():
    assert fault_analysis.shows_detection("tfmw error retryable=true worker=1 UnavailableError: peer gone")
    assert fault_analysis.shows_detection("tfmw launcher watchdog: no training progress for 30.0s")
    assert fault_analysis.shows_detection("tfmw sigterm: will checkpoint and stop")
    assert fault_analysis.shows_detection("tfmw stopped step=60/100 reason=sigterm")
    assert not fault_analysis.shows_detection("tfmw launcher restarting training in place in 1s: x")
    assert not fault_analysis.shows_detection(progress(50)) and not fault_analysis.shows_detection("error: not ours")


def test_the_fault_waits_for_its_trigger_line():
    past = fault_local.fault_trigger("kill-worker", 50)
    assert past(progress(50)) and not past(progress(49)) and not past("tfmw checkpoint writing step=60")
    mid_write = fault_local.fault_trigger("kill-during-checkpoint", 50)
    assert mid_write("tfmw checkpoint writing step=60") and not mid_write("tfmw checkpoint writing step=40")
    assert not mid_write("tfmw checkpoint saved step=60 path=/c") and not mid_write(progress(60))


def test_cluster_fault_waits_for_a_published_checkpoint_and_the_step():
    saved = "tfmw checkpoint saved step=40 path=/c/ckpt-40"
    assert fault_podlogs.ready_for_fault(Stream([saved, progress(50)], [1, 2]), 50)
    assert not fault_podlogs.ready_for_fault(Stream(["tfmw checkpoint writing step=40", progress(50)], [1, 2]), 50)
    assert not fault_podlogs.ready_for_fault(Stream([saved, progress(49)], [1, 2]), 50)


def test_cluster_run_ends_when_every_pod_is_done_after_the_fault_or_one_failed():
    done = DONE.format("d")
    before = Stream([done], [5])  # a `tfmw done` from before the fault does not count
    after = Stream([progress(60), done], [11, 20])
    assert fault_podlogs.run_end({0: after, 1: after}, fault_time=10) == "done"
    assert fault_podlogs.run_end({0: after, 1: before}, fault_time=10) is None
    assert fault_podlogs.run_end({0: after}, fault_time=10) is None
    failed = Stream(["tfmw failed reason=RestartLimit exit_code=5"], [12])
    assert fault_podlogs.run_end({0: after, 1: failed}, fault_time=10) == "tfmw failed reason=RestartLimit exit_code=5"


def test_table_says_what_each_fault_cost():
    ok = FaultResult(
        "kill-worker",
        True,
        "",
        120,
        20,
        step_at_fault=50,
        resume_step=40,
        seconds_to_detect=0.12,
        seconds_to_resume=12.25,
        trainer_restarts=1,
        digests={"d"},
    )
    rows = fault_tables.table([ok, FaultResult("hang-worker", False, "timeout", 120, 20)])
    assert rows[0].startswith("| fault | completed | fault at step |") and rows[1].startswith("|---|")
    assert rows[2] == "| kill-worker | yes | 50 | 40 | 10 (≤ 20) | 0.1 | 12.2 | 1 | yes |"
    assert rows[3].startswith("| hang-worker | NO: timeout | -1 | -1 | -1 (≤ 20) | nan | nan | 0 | NO |")


def test_unknown_scenario_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="unknown scenario 'melt-worker'"):
        fault_local.run_scenario("melt-worker", runs_dir=tmp_path)
    assert not any(tmp_path.iterdir())


def test_a_node_faults_time_is_split_at_the_clusters_own_marks():
    def event(reason, when, uid=None, micro=False, name=None):
        stamp = f"2026-12-03T10:00:{when:02d}" + (".500000Z" if micro else "Z")
        about = {"kind": "Pod", "name": name} if name else {"uid": uid} if uid else {"kind": "StatefulSet"}
        return {"reason": reason, "involvedObject": about, ("eventTime" if micro else "firstTimestamp"): stamp}

    fault = datetime(2026, 12, 3, 10, 0, 0, tzinfo=UTC).timestamp()
    events = [
        event("NodeNotReady", 40, "old"),
        event("NodeNotReady", 41, "other"),  # another pod's: not the victim's
        event("TaintManagerEviction", 49, name="w-2"),  # another pod's, by name
        event("TaintManagerEviction", 50, micro=True, name="w-1"),  # the taint manager names no UID
        event("PeerLost", 53),
        {"reason": "PeerLost", "involvedObject": {}},  # no time: ignored
    ]
    parts = fault_nodes.node_parts(events, ("w-1", "old"), fault, pod_running=55.0, resumed=62.0)
    assert list(parts) == list(fault_nodes.NODE_PARTS)
    assert parts == {
        "detection": 40.0,
        "eviction": 10.5,
        "force delete": 2.5,
        "pod start": 2.0,
        "re-form and restore": 7.0,
    }
    assert sum(parts.values()) == 62.0
    # A mark not found: its time goes to the next part. An Event from before the fault (an
    # earlier run in the namespace) does not count.
    parts = fault_nodes.node_parts(
        [event("NodeNotReady", 40, "old"), {**event("PeerLost", 0), "firstTimestamp": "2026-12-03T09:59:00Z"}],
        ("w-1", "old"),
        fault,
        pod_running=55.0,
        resumed=float("nan"),
    )
    assert parts == {"detection": 40.0, "pod start": 15.0}


class _QuietCluster:
    """A LocalCluster stand-in whose victim logs progress but never a hang bound, and whose
    training has no process to stop: only stop_while_stepping's order of waits is observed."""

    def __init__(self):
        from types import SimpleNamespace

        self.states = {1: SimpleNamespace(lines=[progress(60)])}

    def wait_for_line(self, ordinal, predicate, timeout, start=0):
        return next((line for line in self.states[ordinal].lines[start:] if predicate(line)), None)

    def training_pids(self, ordinal):
        return []


def test_a_static_watchdog_is_never_waited_on_for_an_adaptive_bound():
    adaptive = fault_local.stop_while_stepping(_QuietCluster(), 50, 0.5, adaptive=True)
    assert adaptive == "worker 1's launcher never said its adaptive hang bound within 0.5s"
    static = fault_local.stop_while_stepping(_QuietCluster(), 50, 0.5, adaptive=False)
    assert static == "worker 1 was never stopped while stepping (0 tries) within 0.5s"


class _Lines:
    def __init__(self, lines):
        self.lines = lines

    def __iter__(self):
        return iter(self.lines)

    def close(self):
        pass


class _CutOffKube:
    """Pod list and logs as the API server gives them while worker 1's node is cut off: the old
    worker 1's log never opens (the kubelet does not answer), its replacement lives briefly."""

    def __init__(self):
        import threading
        from types import SimpleNamespace

        self.hang = threading.Event()
        self.pods = [self._pod("w-1", "old")]
        self.api = SimpleNamespace(follow_log=self.follow_log)

    @staticmethod
    def _pod(name, uid):
        return {
            "metadata": {"name": name, "uid": uid},
            "spec": {"containers": [{"name": "worker"}]},
            "status": {"phase": "Running", "containerStatuses": [{"restartCount": 0, "state": {"running": {}}}]},
        }

    def items(self, path, selector):
        return list(self.pods)

    def follow_log(self, namespace, pod, container=None):
        if self.pods[0]["metadata"]["uid"] == "old":
            self.hang.wait(30)  # the API server waiting on a kubelet it cannot reach
            return _Lines([])
        return _Lines([DONE.format("d")])


def test_a_log_that_cannot_be_opened_does_not_hide_the_pod_that_replaces_it():
    import time as clock

    kube = _CutOffKube()
    logs = fault_podlogs.PodLogs(kube, "ns", "w", "sel", interval=0.05)
    logs.start()
    try:
        clock.sleep(0.3)  # the old pod's follow is opening and hangs
        kube.pods = [kube._pod("w-1", "new")]
        seen = logs.wait_for(lambda pl: [i for i in pl.snapshot() if i.uid == "new" and i.lines], 5)
        assert seen and seen[0].lines == [DONE.format("d")] and seen[0].running_since == seen[0].running_since
    finally:
        kube.hang.set()
        logs.stop()


class _RecordingKube:
    """The API calls inject() makes, answered from a pod table (no cluster)."""

    def __init__(self, pods: dict, kubeconfig="/nowhere/kubeconfig"):
        self.pods, self.deleted, self.kubeconfig = pods, [], kubeconfig

    def get(self, path: str):
        return self.pods.get(path.rsplit("/", 1)[-1])

    def delete(self, path: str) -> None:
        self.deleted.append(path)


def test_one_inject_deletes_a_pod_for_the_chart_and_the_peers_alike():
    kube = _RecordingKube({"w-1": {"spec": {"nodeName": "node-2"}}})
    before = fault_inject.time.monotonic()
    fault_time = fault_inject.inject(kube, "delete-worker", "ns", "w-1", [])
    assert kube.deleted == ["/api/v1/namespaces/ns/pods/w-1"] and fault_time >= before


def test_a_node_fault_on_a_pod_without_a_node_is_refused_before_anything_is_done(tmp_path):
    kube = _RecordingKube({"w-1": {"spec": {}}})
    with pytest.raises(fault_kube.FaultError, match="node-loss: pod w-1 is on no node"):
        fault_inject.inject(kube, "node-loss", "ns", "w-1", [], node_dir=tmp_path)
    assert kube.deleted == []


def test_inject_knows_only_the_cluster_scenarios():
    with pytest.raises(ValueError, match="'hang-worker'"):
        fault_inject.inject(_RecordingKube({}), "hang-worker", "ns", "w-1", [])


def test_a_cut_off_pod_gave_up_once_its_kept_log_has_a_failed_line(monkeypatch):
    kept = iter(
        [
            "2026-01-01T00:00:01Z stdout F tfmw progress step=5/10 loss=0.5\n",
            "2026-01-01T00:00:01Z stdout F tfmw progress step=5/10 loss=0.5\n"
            "2026-01-01T00:00:09Z stdout F tfmw failed run=r reason=PeerLost exit_code=3\n",
        ]
    )
    monkeypatch.setattr(fault_nodes.controlplane, "node_pod_log", lambda *args: next(kept))
    monkeypatch.setattr(fault_nodes.time, "sleep", lambda seconds: None)
    log = fault_nodes.wait_until_given_up("/state", "node-2", "ns", "w-1", "uid")
    assert log.endswith("reason=PeerLost exit_code=3\n")
