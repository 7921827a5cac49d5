"""The node agent's and control plane's pure parts: pod status rules, quantities,
hosts from EndpointSlices, log tails, provisioned volumes, addresses, refusals."""
from __future__ import annotations

import pytest

from scripts.kube import controlplane
from scripts.kube.controlplane import ClusterError
from scripts.kube.node import hosts, kubelet_api, provisioner
from scripts.kube.node.podstatus import (ContainerRecord, parse_quantity, phase, pod_status,
                                         resource_field_value, restart_wanted, terminated_state)
from scripts.kube.node.pods import _expand, rewrite_path
from scripts.kube.pki import PkiError, subject


# ---------------------------------------------------------------- pod status

@pytest.mark.parametrize("policy, code, restart", [
    ("Always", 0, True), ("Always", 3, True), ("OnFailure", 0, False), ("OnFailure", 1, True),
    ("Never", 0, False), ("Never", 2, False)])
def test_restart_policy(policy, code, restart):
    assert restart_wanted(policy, code) is restart


def test_terminated_state_reports_signals_as_128_plus_n():
    state = terminated_state(-9, "2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z")
    assert state["exitCode"] == 137 and state["signal"] == 9 and state["reason"] == "Error"
    assert terminated_state(0, None, "t")["reason"] == "Completed"


def _rec(done=False, code=None, running=False):
    rec = ContainerRecord("c", "img")
    if running:
        rec.running_since = "t"
    if code is not None:
        rec.terminated = {"exitCode": code}
    rec.done = done
    return rec


def test_phase_rules():
    assert phase("Always", [_rec()], ever_started=False) == "Pending"
    assert phase("Always", [_rec(running=True)], ever_started=True) == "Running"
    # restarting after an exit: still Running (CrashLoopBackOff is a container state)
    assert phase("Always", [_rec(code=1)], ever_started=True) == "Running"
    assert phase("Never", [_rec(done=True, code=0), _rec(done=True, code=0)], True) == "Succeeded"
    assert phase("Never", [_rec(done=True, code=0), _rec(done=True, code=2)], True) == "Failed"
    assert phase("Never", [_rec(done=True, code=0), _rec(running=True)], True) == "Running"


def test_pod_status_conditions_and_transition_times_are_kept():
    transitions = {}
    kwargs = dict(policy="Always", init_records=[], initialized=True, network_ready=True, pod_ip="198.19.1.2",
                  host_ip="198.19.0.1", start_time="t0", transitions=transitions)
    first = pod_status(records=[_rec(running=True)], ever_started=True, **kwargs)
    conds = {c["type"]: c for c in first["conditions"]}
    assert conds["Ready"]["status"] == "True" and first["podIP"] == "198.19.1.2"
    assert first["containerStatuses"][0]["state"] == {"running": {"startedAt": "t"}}
    again = pod_status(records=[_rec(running=True)], ever_started=True, **kwargs)
    assert again["conditions"] == first["conditions"]   # nothing changed: same transition times
    crashed = _rec(code=1)
    crashed.waiting_reason, crashed.restart_count = "CrashLoopBackOff", 3
    crashed.last_terminated = {"exitCode": 1}
    down = pod_status(records=[crashed], ever_started=True, **kwargs)
    conds = {c["type"]: c for c in down["conditions"]}
    assert conds["Ready"]["status"] == "False" and conds["Ready"]["reason"] == "ContainersNotReady"
    status = down["containerStatuses"][0]
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert status["restartCount"] == 3 and status["lastState"]["terminated"]["exitCode"] == 1


@pytest.mark.parametrize("text, value", [("500m", 0.5), ("2", 2), ("1Gi", 2**30), ("1.5", 1.5),
                                         ("100M", 1e8), ("1e3", 1000)])
def test_parse_quantity(text, value):
    assert parse_quantity(text) == pytest.approx(value)


def test_parse_quantity_refuses_garbage():
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity("1.5.5")


def test_resource_field_ref_rounds_up_and_defaults_limits_to_the_node():
    container = {"resources": {"limits": {"cpu": "1500m", "memory": "2Gi"}, "requests": {"cpu": "250m"}}}
    node = {"cpu": 2.0, "memory": float(24 * 2**30)}
    assert resource_field_value("limits.cpu", None, container, node) == "2"
    assert resource_field_value("requests.cpu", "1m", container, node) == "250"
    assert resource_field_value("limits.memory", "1Mi", container, node) == "2048"
    assert resource_field_value("limits.cpu", None, {}, node) == "2"           # unset limit: allocatable
    assert resource_field_value("requests.memory", None, {}, node) == "0"
    assert resource_field_value("limits.cpu", "0", container, node) == "2"   # the API server's default divisor
    with pytest.raises(ValueError):
        resource_field_value("cpu", None, container, node)


# ---------------------------------------------------------------- env and paths

def test_dollar_expansion_as_kubernetes_does_it():
    env = {"A": "x", "B": "y"}
    assert _expand("$(A)-$(B)", env) == "x-y"
    assert _expand("$(MISSING)", env) == "$(MISSING)"
    assert _expand("$$(A)", env) == "$(A)"


def test_paths_under_a_mount_are_rewritten_to_the_volume_folder(tmp_path):
    mounts = [("/shared/deep", tmp_path / "deep"), ("/shared", tmp_path / "s"), ("/etc/tf", tmp_path / "cm")]
    assert rewrite_path("/shared/run/x", mounts) == str(tmp_path / "s" / "run" / "x")
    assert rewrite_path("/shared/deep/y", mounts) == str(tmp_path / "deep" / "y")
    assert rewrite_path("/shared", mounts) == str(tmp_path / "s")
    assert rewrite_path("/sharedx", mounts) == "/sharedx"
    assert rewrite_path("relative/shared", mounts) == "relative/shared"


# ---------------------------------------------------------------- hosts from EndpointSlices

def _slice(ns, svc, endpoints, address_type="IPv4"):
    return {"metadata": {"namespace": ns, "labels": {"kubernetes.io/service-name": svc}},
            "addressType": address_type, "endpoints": endpoints}


def test_hosts_lines_only_for_listed_endpoints_of_headless_services():
    services = [{"metadata": {"namespace": "a", "name": "w"}, "spec": {"clusterIP": "None"}},
                {"metadata": {"namespace": "a", "name": "tb"}, "spec": {"clusterIP": "198.19.8.9"}}]
    slices = [
        _slice("a", "w", [{"hostname": "w-0", "addresses": ["198.19.1.2"]},
                          {"hostname": "w-1", "addresses": ["198.19.1.3"]},
                          {"addresses": ["198.19.1.9"]}]),                      # no hostname: no name
        _slice("a", "tb", [{"hostname": "tb-0", "addresses": ["198.19.1.4"]}]),  # not headless
        _slice("b", "w", [{"hostname": "w-0", "addresses": ["198.19.1.5"]}]),    # service not in b
        _slice("a", "w", [{"hostname": "w-2", "addresses": ["fd00::1"]}], "IPv6"),
    ]
    assert hosts.hosts_lines(slices, services, "cluster.local") == [
        "198.19.1.2\tw-0.w.a.svc.cluster.local", "198.19.1.3\tw-1.w.a.svc.cluster.local"]


# ---------------------------------------------------------------- logs, volumes

def test_tail_bytes():
    data = b"a\nb\nc\n"
    assert kubelet_api.tail_bytes(data, -1) == data
    assert kubelet_api.tail_bytes(data, 2) == b"b\nc\n"
    assert kubelet_api.tail_bytes(data, 0) == b""
    assert kubelet_api.tail_bytes(data, 10) == data


def test_provisioned_volume_is_prebound_to_its_claim(tmp_path):
    claim = {"metadata": {"namespace": "n", "name": "shared", "uid": "1234"},
             "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "5Gi"}}}}
    pv = provisioner.volume_for(claim, tmp_path, "local-shared", "tf-multiworker.local/hostpath")
    assert pv["metadata"]["name"] == "pvc-1234"
    assert pv["spec"]["claimRef"] == {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "n",
                                      "name": "shared", "uid": "1234"}
    assert pv["spec"]["hostPath"]["path"] == str(tmp_path / "pvc-1234")
    assert pv["spec"]["accessModes"] == ["ReadWriteMany"] and pv["spec"]["capacity"] == {"storage": "5Gi"}


# ---------------------------------------------------------------- control plane

def test_slots_do_not_overlap():
    nets = [controlplane.slot_network(s) for s in range(controlplane.SLOTS)]
    assert len({n["address"] for n in nets}) == controlplane.SLOTS
    assert nets[1]["address"] == "198.19.16.1" and nets[1]["service_cidr"] == "198.19.24.0/21"
    assert controlplane.node_pod_prefix(1, 2) == "198.19.18"
    with pytest.raises(ValueError):
        controlplane.node_pod_prefix(0, 8)   # node 8 would reach into the service range
    with pytest.raises(ValueError):
        controlplane.slot_network(16)


def test_bootstrap_rbac_is_least_privilege():
    objects = dict((obj["kind"], obj) for _, obj in controlplane.bootstrap_objects())
    rules = objects["ClusterRole"]["rules"]
    verbs = {(g, r): set(rule["verbs"]) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    assert verbs[("", "persistentvolumes")] >= {"create", "delete"}
    assert ("", "pods") not in verbs and ("", "secrets") not in verbs
    assert all("*" not in rule["verbs"] for rule in rules)
    sc = objects["StorageClass"]
    assert sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"


@pytest.mark.parametrize("kwargs, message", [
    ({"nodes": 0}, "1 to 7 nodes"), ({"nodes": 8}, "1 to 7 nodes"),
    ({"gpus_per_node": -1}, "must be 0 or more")])
def test_up_refuses_bad_sizes_before_starting_anything(tmp_path, kwargs, message):
    with pytest.raises(ClusterError, match=message) as info:
        controlplane.up(tmp_path / "state", bins={}, say=lambda line: None, **kwargs)
    assert info.value.exit_code == 2
    assert not (tmp_path / "state").exists()


def test_up_refuses_without_root(tmp_path, monkeypatch):
    monkeypatch.setattr(controlplane.os, "geteuid", lambda: 1000)
    with pytest.raises(ClusterError, match="needs root") as info:
        controlplane.up(tmp_path / "state", bins={}, say=lambda line: None)
    assert info.value.exit_code == 2


def test_cluster_cli_refusal_is_one_line(tmp_path, capsys):
    from scripts.kube import cluster
    code = cluster.main(["up", "--state", str(tmp_path / "s"), "--nodes", "9"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--nodes 9" in err and "Traceback" not in err


def test_down_with_nothing_running_says_so(tmp_path):
    lines = []
    assert controlplane.down(tmp_path / "none", say=lines.append) is False
    assert "none running" in lines[0]


def test_certificate_names_cannot_split_the_subject():
    with pytest.raises(PkiError):
        subject("a/O=system:masters")


# ---------------------------------------------------------------- runAsUser

def _pod_for(security, run_as_ok, tmp_path):
    from scripts.kube.node.pods import NodeContext, Pod
    ctx = NodeContext(name="n", slot=0, bridge="b", host_ip="198.19.0.1", api_host="198.19.0.1", api_port=6443,
                      prefix="198.19.1", netmask="20", directory=tmp_path, volumes_root=tmp_path, allocatable={},
                      base_env={}, python="/venv/python", run_as_ok=run_as_ok)
    obj = {"metadata": {"uid": "u", "name": "p", "namespace": "ns"},
           "spec": {"securityContext": security, "containers": [{"name": "c", "image": "i"}]}}
    return Pod(obj, ctx, api=None, ip_index=2)


def test_run_as_user_is_applied_with_setpriv_when_the_interpreter_is_reachable(tmp_path):
    security = {"runAsUser": 1000, "runAsGroup": 2000, "fsGroup": 3000}
    container = {"securityContext": {"allowPrivilegeEscalation": False}}
    pod = _pod_for(security, True, tmp_path)
    assert pod.user_wrap(container, ["python", "x"]) == [
        "setpriv", "--reuid=1000", "--regid=2000", "--groups=3000", "--no-new-privs", "--", "python", "x"]
    # not reachable by that user (a pyenv under a 0700 /root): runs as the agent's user
    assert _pod_for(security, False, tmp_path).user_wrap(container, ["python"]) == ["python"]
    assert _pod_for({}, True, tmp_path).user_wrap({}, ["python"]) == ["python"]


def test_interpreter_reachability():
    import shutil
    import tempfile
    from pathlib import Path
    from scripts.kube.node.pods import interpreter_reachable_by_others
    root = Path(tempfile.mkdtemp(dir="/tmp"))   # /tmp and / are searchable by everyone
    try:
        python = root / "bin" / "python"
        python.parent.mkdir()
        python.write_text("")
        root.chmod(0o700)
        assert interpreter_reachable_by_others(str(python)) is False
        root.chmod(0o755)
        assert interpreter_reachable_by_others(str(python)) is True
    finally:
        shutil.rmtree(root)


def test_the_nodes_own_env_is_not_rewritten_into_a_tmp_volume(tmp_path):
    """A checkout under /tmp: its PATH and PYTHONPATH must survive a pod that mounts /tmp."""
    pod = _pod_for({}, False, tmp_path)
    pod.ctx.base_env.update(PATH="/tmp/clone/.venv/bin:/usr/bin", PYTHONPATH="/tmp/clone")
    container = {"env": [{"name": "SCRATCH", "value": "/tmp/x"}]}
    env = pod.environment(container, [("/tmp", tmp_path / "tmpvol")])
    assert env["PATH"] == "/tmp/clone/.venv/bin:/usr/bin" and env["PYTHONPATH"] == "/tmp/clone"
    assert env["SCRATCH"] == str(tmp_path / "tmpvol" / "x") and env["TMPDIR"] == str(tmp_path / "tmpvol")
