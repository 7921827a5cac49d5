"""What a real node enforces and the stand-in never could: the chart's pods run the
project's own image in containers (kubelet + containerd + runc), as UID 1000 on a read-only
root with only their writable folders writable, shared storage as a real mount, a memory
limit that OOM-kills, Services through kube-proxy, names from CoreDNS, pods on two nodes
talking across them, and a missing image named with its fix."""

from __future__ import annotations

import json
import time

import pytest
import yaml
from clusterkit import CHART, REPO, SLEEPER, wait_for

from tfmw.k8s.api import ns_path

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

LOCAL_VALUES = REPO / "values" / "local.yaml"

RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "runAsGroup": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _pod(cluster, name, argv, *, policy="Never", labels=None, extra=None, command=None, resources=None):
    container = {
        "name": "main",
        "image": cluster.image,
        "imagePullPolicy": "Never",
        "args": argv,
        "securityContext": RESTRICTED_CONTAINER,
        "resources": resources
        or {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
    }
    if command is not None:
        container["command"] = command
    spec = {
        "restartPolicy": policy,
        "automountServiceAccountToken": False,
        "containers": [container],
        "terminationGracePeriodSeconds": 1,
    }
    spec.update(extra or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": spec,
    }


def _python(cluster, name, code, **kw):
    return _pod(cluster, name, ["-c", code], command=["python"], **kw)


def _phase(cluster, ns, name):
    return (cluster.api.get(ns_path(ns, "pods", name)).get("status") or {}).get("phase")


def _run(cluster, ns, pod, phase="Succeeded", timeout=90):
    cluster.api.create(ns_path(ns, "pods"), pod)
    name = pod["metadata"]["name"]
    wait_for(
        lambda: _phase(cluster, ns, name) == phase,
        timeout,
        f"pod {name} to be {phase}",
        describe=lambda: (
            cluster.logs(ns, name)
            + json.dumps(cluster.api.get(ns_path(ns, "pods", name)).get("status"), indent=1)[:3000]
        ),
    )
    return cluster.api.get(ns_path(ns, "pods", name))


def test_the_image_entrypoint_is_the_launcher(cluster, namespace):
    """No command: the image's own ENTRYPOINT (python -m entrypoint) with `--help`."""
    _run(cluster, namespace, _pod(cluster, "help", ["--help"]))
    out = cluster.logs(namespace, "help")
    assert "usage:" in out and "tf-config" in out and "run" in out


def test_worker_runs_as_1000_on_a_read_only_root_with_only_its_writable_dirs_writable(cluster, namespace, tmp_path):
    """The chart's own worker pod spec (rendered by helm, admitted by the restricted Pod
    Security level) on a real node: the container's identity and file system."""
    code = """
import os, json
def writable(path):
    try:
        with open(os.path.join(path, '.probe'), 'w') as fh:
            fh.write('x')
        os.remove(os.path.join(path, '.probe'))
        return True
    except OSError as err:
        return err.strerror
mounts = {line.split()[1]: line.split()[3].split(',')[0] for line in open('/proc/self/mounts')}
status = dict(line.split(':', 1) for line in open('/proc/self/status') if ':' in line)
print(json.dumps({'uid': os.getuid(), 'gid': os.getgid(), 'groups': sorted(os.getgroups()),
                  'root': writable('/'), 'app': writable('/app'), 'tmp': writable('/tmp'),
                  'home': writable(os.environ.get('HOME', '/home/tfmw')),
                  'shared': writable('/shared'), 'shared_mount': mounts.get('/shared'),
                  'root_mount': mounts.get('/'), 'capeff': status['CapEff'].strip(),
                  'seccomp': status['Seccomp'].strip(), 'nnp': status['NoNewPrivs'].strip()}), flush=True)
import time; time.sleep(600)
"""
    release = "ident"
    values = tmp_path / "probe.yaml"
    values.write_text(yaml.safe_dump({"workers": {"replicas": 1}, "training": {"command": ["python", "-c", code]}}))
    cluster.helm(
        "install",
        release,
        str(CHART),
        "-n",
        namespace,
        "-f",
        str(LOCAL_VALUES),
        "-f",
        str(values),
        "--wait",
        "--timeout",
        "2m",
    )
    pod = f"{release}-tf-multiworker-0"
    wait_for(
        lambda: '"uid"' in cluster.logs(namespace, pod),
        60,
        "the probe's line",
        describe=lambda: cluster.logs(namespace, pod),
    )
    line = next(entry for entry in cluster.logs(namespace, pod).splitlines() if entry.startswith("{"))
    seen = json.loads(line)
    assert (seen["uid"], seen["gid"]) == (1000, 1000) and 1000 in seen["groups"]
    assert seen["root"] == "Read-only file system" and seen["app"] == "Read-only file system"
    assert seen["root_mount"] == "ro"
    assert seen["tmp"] is True and seen["shared"] is True
    assert seen["shared_mount"] == "rw"  # a real mount of the claim's volume
    assert int(seen["capeff"], 16) == 0  # every capability dropped
    assert seen["seccomp"] == "2" and seen["nnp"] == "1"  # RuntimeDefault filter, no privilege escalation
    spec = cluster.api.get(ns_path(namespace, "pods", pod))
    assert spec["spec"]["containers"][0]["image"] == cluster.image


def test_a_worker_over_its_memory_limit_is_oom_killed_and_reported(cluster, namespace):
    """The container's memory limit is the kernel's: a worker that allocates past it is
    OOMKilled (exit 137), which the launcher never sees; the kubelet restarts it."""
    code = "b = bytearray(400 * 1024 * 1024); print('allocated', flush=True)"
    pod = _python(
        cluster,
        "hog",
        code,
        policy="Never",
        resources={"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}},
    )
    done = _run(cluster, namespace, pod, phase="Failed")
    term = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["reason"] == "OOMKilled" and term["exitCode"] == 137
    assert "allocated" not in cluster.logs(namespace, "hog")


def test_pods_on_two_nodes_reach_each_other_and_names_resolve_through_coredns(cluster, namespace):
    """Two pods pinned to different nodes behind a headless Service: each resolves the other's
    stable name from CoreDNS (only once the EndpointSlice lists it) and connects across nodes."""
    cluster.api.create(
        ns_path(namespace, "services"),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "grp"},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": {"group": "g"},
                "ports": [{"name": "p", "port": 8000}],
            },
        },
    )
    server = _pod(
        cluster,
        "b",
        ["-m", "http.server", "--directory", "/tmp", "8000"],
        command=["python"],
        policy="Always",
        labels={"group": "g"},
        extra={"hostname": "b", "subdomain": "grp", "nodeName": "node-2"},
    )
    peer = f"b.grp.{namespace}.svc.cluster.local"
    code = (
        "import socket, time, urllib.request\n"
        f"for i in range(240):\n    try:\n        ip = socket.gethostbyname('{peer}'); break\n"
        "    except OSError:\n        time.sleep(0.5)\n"
        "print('resolved', ip, flush=True)\n"
        f"for i in range(60):\n    try:\n        r = urllib.request.urlopen('http://{peer}:8000/', timeout=5); break\n"
        "    except OSError:\n        time.sleep(0.5)\n"
        "print('status', r.status, flush=True)"
    )
    client = _python(cluster, "a", code, extra={"nodeName": "node-1"})
    cluster.api.create(ns_path(namespace, "pods"), client)
    wait_for(lambda: _phase(cluster, namespace, "a") == "Running", 60, "pod a to run")
    time.sleep(2)
    assert "resolved" not in cluster.logs(namespace, "a")  # b does not exist: its name does not resolve
    cluster.api.create(ns_path(namespace, "pods"), server)
    wait_for(
        lambda: _phase(cluster, namespace, "a") == "Succeeded",
        120,
        "pod a to reach b",
        describe=lambda: cluster.logs(namespace, "a"),
    )
    pods = {p["metadata"]["name"]: p for p in cluster.pods(namespace)}
    assert pods["a"]["spec"]["nodeName"] != pods["b"]["spec"]["nodeName"]
    assert cluster.logs(namespace, "a").split() == ["resolved", pods["b"]["status"]["podIP"], "status", "200"]


def test_a_cluster_ip_service_answers_through_kube_proxy(cluster, namespace):
    """A ClusterIP (a virtual address only kube-proxy's rules give meaning to) reaches a pod
    on the other node; and the API server answers pods at the `kubernetes` Service."""
    cluster.api.create(
        ns_path(namespace, "pods"),
        _pod(
            cluster,
            "web",
            ["-m", "http.server", "--directory", "/tmp", "8000"],
            command=["python"],
            policy="Always",
            labels={"app": "web"},
            extra={"nodeName": "node-2"},
        ),
    )
    svc = cluster.api.create(
        ns_path(namespace, "services"),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8000}]},
        },
    )
    code = (
        "import os, socket, ssl, time, urllib.request, urllib.error\n"
        "for i in range(120):\n    try:\n        r = urllib.request.urlopen('http://web/', timeout=3); break\n"
        "    except OSError:\n        time.sleep(0.5)\n"
        "print('web', r.status, socket.gethostbyname('web'), flush=True)\n"
        "host = os.environ['KUBERNETES_SERVICE_HOST']\n"
        "ctx = ssl._create_unverified_context()\n"
        "try:\n    urllib.request.urlopen('https://%s/version' % host, context=ctx, timeout=5)\n"
        "except urllib.error.HTTPError as e:\n    print('api', host, e.code, flush=True)\n"
    )
    _run(cluster, namespace, _python(cluster, "client", code, extra={"nodeName": "node-1"}), timeout=120)
    words = cluster.logs(namespace, "client").split()
    assert words[:3] == ["web", "200", svc["spec"]["clusterIP"]]
    kubernetes_ip = cluster.api.get("/api/v1/namespaces/default/services/kubernetes")["spec"]["clusterIP"]
    assert words[3:] == ["api", kubernetes_ip, "401"]  # reached, and refused without credentials


def test_a_missing_image_is_named_by_make_status_with_the_fix(cluster, namespace):
    """A worker image that is on no node (no registry here to pull from): the pods wait in
    ErrImageNeverPull / ImagePullBackOff and `make status` says so in one line with the fix."""
    release = "noimg"
    cluster.helm(
        "install",
        release,
        str(CHART),
        "-n",
        namespace,
        "-f",
        str(LOCAL_VALUES),
        "--set",
        "image.tag=0.0.0-missing",
        "--set",
        "image.pullPolicy=Never",
        *sum((["--set", s] for s in SLEEPER), []),
    )

    def waiting_reason():
        pods = cluster.workers(namespace, release)
        reasons = {
            ((c.get("state") or {}).get("waiting") or {}).get("reason")
            for p in pods
            for c in (p.get("status") or {}).get("containerStatuses") or []
        }
        return reasons & {"ErrImageNeverPull", "ImagePullBackOff", "ErrImagePull"}

    wait_for(waiting_reason, 60, "the kubelet to report the missing image")
    status = cluster.tfmw("status", "--release", release, "--namespace", namespace)
    lines = [line for line in status.stdout.splitlines() + status.stderr.splitlines() if "image" in line.lower()]
    assert any("0.0.0-missing" in line and "make image" in line and "make cluster-load" in line for line in lines), (
        status.stdout + status.stderr
    )


# -- the kernel's OOM killer inside a training worker: named by the launcher, recovered in place --
# The training command: the built-in trainer, run in this same process as `python -m
# entrypoint.training` would run it, plus a daemon thread that waits for /tmp/oom-now (an
# emptyDir: writableDirs), deletes it, says how big the process is, then allocates 64 MiB at a
# time (written, so resident) until the kernel kills the process at the container's limit.
# A restarted trainer's thread waits for a trigger that never comes again.
OOM_WRAPPER = """
import os, runpy, sys, threading, time
def hog():
    while not os.path.exists('/tmp/oom-now'):
        time.sleep(0.2)
    os.remove('/tmp/oom-now')
    rss = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmRSS:'))
    usage = open('/sys/fs/cgroup/memory/memory.usage_in_bytes').read().strip() \\
        if os.path.exists('/sys/fs/cgroup/memory/memory.usage_in_bytes') else '-'
    print(f'oom-probe: allocating until killed rss_kib={rss} cgroup_usage={usage}', flush=True)
    held = []
    while True:
        held.append(bytearray(b'\\x01') * (64 << 20))
threading.Thread(target=hog, daemon=True).start()
sys.argv = [sys.argv[0]]
runpy.run_module('entrypoint.training', run_name='__main__', alter_sys=True)
"""
OOM_LIMIT = "1500Mi"


def _oom_status(cluster, ns, release) -> dict:
    cm = cluster.api.get_or_none(ns_path(ns, "configmaps", f"{release}-tf-multiworker-status"))
    return (cm or {}).get("data") or {}


def test_an_oom_killed_trainer_is_named_and_restarted_in_place_from_its_checkpoint(cluster, namespace, tmp_path):
    """Worker 1's trainer grows past the container's memory limit: the kernel's OOM killer
    SIGKILLs it (the biggest process in the container's memory cgroup; the launcher, PID 1,
    lives on). The launcher reads the cgroup's OOM-kill counter, says OOMKilled with the limit
    and the fix, and restarts the trainer in place: the group resumes from the checkpoint and
    the run Succeeds, with no container restart.

    The model is the chart's local `cnn` (~0.2 s a step here), not `mlp`: an mlp step takes
    milliseconds, so 60 of them end before the first checkpoint can be seen and acted on.
    Its trainer is about 0.7 GiB resident, so 1500Mi fits it and a few allocations pass it."""
    import calendar
    import re

    from entrypoint import loglines

    release = "oom"
    started = time.monotonic()
    values = tmp_path / "oom.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "workers": {"resources": {"limits": {"memory": OOM_LIMIT}}},
                "training": {
                    "command": ["python", "-c", OOM_WRAPPER],
                    "config": {"steps": 60, "logEverySteps": 5, "checkpoint": {"everySteps": 10}},
                },
                "completion": {"onSuccess": "idle"},
            }
        )
    )  # the pods stay: their logs are read at the end
    cluster.helm("install", release, str(CHART), "-n", namespace, "-f", str(LOCAL_VALUES), "-f", str(values))

    def describe():
        return cluster.kubectl("get", "pods,sts,events,cm", "-n", namespace, "-o", "wide", check=False).stdout

    wait_for(
        lambda: int(_oom_status(cluster, namespace, release).get("lastCheckpointStep") or 0) >= 10,
        240,
        "a first checkpoint",
        describe=describe,
    )
    pod = f"{release}-tf-multiworker-1"
    cluster.kubectl("exec", "-n", namespace, pod, "-c", "worker", "--", "touch", "/tmp/oom-now")
    status = wait_for(
        lambda: (lambda s: s if s.get("phase") in ("Succeeded", "Failed") else None)(
            _oom_status(cluster, namespace, release)
        ),
        300,
        "the run to end",
        describe=describe,
    )
    log = cluster.logs(namespace, pod)
    assert status["phase"] == "Succeeded", f"{status}\n{log}"
    lines = log.splitlines()
    probe = [line for line in lines if line.startswith("oom-probe:")]
    assert len(probe) == 1, log  # the trigger fired once, in the first trainer
    oom = [
        i
        for i, line in enumerate(lines)
        if (p := loglines.parse_kind(line, loglines.LAUNCHER)) is not None and "OOMKilled" in p.text
    ]
    assert oom, log
    restart = lines[oom[0]]
    assert re.fullmatch(
        r"tfmw launcher restarting training in place in \d+s: OOMKilled: the trainer was killed "
        r"by the kernel's OOM killer at the container's memory limit \(1500 MiB\): raise "
        r"workers\.resources\.limits\.memory or lower training\.config\.batchSizePerReplica",
        restart,
    ), restart
    starts = [loglines.parse_kind(line, loglines.START) for line in lines[oom[0] :]]
    resumed = [s.int_field("resume_step") for s in starts if s is not None]
    assert resumed and resumed[0] >= 10, log  # from a checkpoint, not from step 0
    assert int(status["restarts"]) >= 1
    pods = cluster.workers(namespace, release)
    counts = {p["metadata"]["name"]: [c["restartCount"] for c in p["status"]["containerStatuses"]] for p in pods}
    assert all(n == 0 for c in counts.values() for n in c), counts  # the launcher restarted it, not the kubelet
    # For docs/failure-model.md: by the kubelet's timestamps, the trigger seen, the restart line,
    # the restarted trainer's first progress line.
    stamped = []
    for raw in cluster.kubectl("logs", "--timestamps", "-n", namespace, pod, check=False).stdout.splitlines():
        stamp, _, text = raw.partition(" ")
        seconds = float("0" + stamp[19:].rstrip("Z")) if stamp[19:20] == "." else 0.0
        stamped.append((calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) + seconds, text))
    fault = next(t for t, text in stamped if text.startswith("oom-probe:"))
    restarted = next(t for t, text in stamped if "OOMKilled" in text)
    resumed_at = next((t for t, text in stamped if t > restarted and text.startswith("tfmw progress")), float("nan"))
    print(
        f"\n{probe[0]}\n{restart}\nresume_step={resumed[0]}; fault -> restart line {restarted - fault:.1f}s, "
        f"-> first step after it {resumed_at - fault:.1f}s; test took {time.monotonic() - started:.0f}s"
    )
