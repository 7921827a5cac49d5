"""The node agent honours the pod spec (image aside): env from the downward API and
ConfigMaps, projected service-account tokens that the real API server accepts, restart
policies and exit codes, `kubectl logs` (also --previous) through the API server, the
grace period on delete, and cluster DNS names only once the EndpointSlice lists a pod."""
from __future__ import annotations

import time

import pytest

from clusterkit import wait_for
from scripts.kube.api import ns_path

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def _pod(name, code, *, policy="Never", env=None, volumes=None, mounts=None, sa=None, grace=None, extra=None):
    spec = {"restartPolicy": policy, "automountServiceAccountToken": False,
            "containers": [{"name": "main", "image": "not-pulled", "command": ["python", "-c", code],
                            "env": env or [], "volumeMounts": mounts or [],
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                          "limits": {"cpu": "1", "memory": "256Mi"}}}],
            "volumes": volumes or []}
    if sa:
        spec["serviceAccountName"] = sa
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    spec.update(extra or {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}}, "spec": spec}


def _phase(cluster, ns, name):
    return (cluster.api.get(ns_path(ns, "pods", name)).get("status") or {}).get("phase")


def _run(cluster, ns, pod, phase="Succeeded", timeout=60):
    cluster.api.create(ns_path(ns, "pods"), pod)
    name = pod["metadata"]["name"]
    wait_for(lambda: _phase(cluster, ns, name) == phase, timeout, f"pod {name} to be {phase}",
             describe=lambda: cluster.logs(ns, name))
    return cluster.api.get(ns_path(ns, "pods", name))


def test_env_from_downward_api_resources_and_configmaps(cluster, namespace):
    cluster.api.create(ns_path(namespace, "configmaps"), {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"greeting": "hello"}})
    env = [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
           {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
           {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
           {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
           {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
           {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
           {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting"}}},
           {"name": "COMPOSED", "value": "$(GREETING)-$(POD)"}]
    code = "import os; print(' '.join(f'{k}={os.environ[k]}' for k in " \
           "['POD','NS','IP','APP','CPU_LIMIT','MEM_MI','GREETING','COMPOSED','KUBERNETES_SERVICE_HOST']))"
    pod = _run(cluster, namespace, _pod("env", code, env=env))
    out = dict(kv.split("=", 1) for kv in cluster.logs(namespace, "env").split())
    assert out["POD"] == "env" and out["NS"] == namespace and out["APP"] == "env"
    assert out["IP"] == pod["status"]["podIP"]
    assert out["CPU_LIMIT"] == "1" and out["MEM_MI"] == "256"
    assert out["GREETING"] == "hello" and out["COMPOSED"] == "hello-env"
    assert out["KUBERNETES_SERVICE_HOST"] == cluster.state.address


def test_projected_token_is_accepted_by_the_api_server_as_the_pods_service_account(cluster, namespace):
    """The token comes from the real TokenRequest API; RBAC then allows exactly what its Role
    grants: reading one ConfigMap, not listing Secrets."""
    api = cluster.api
    api.create(ns_path(namespace, "serviceaccounts"), {"apiVersion": "v1", "kind": "ServiceAccount",
                                                        "metadata": {"name": "reader"}})
    api.create(ns_path(namespace, "configmaps"), {"apiVersion": "v1", "kind": "ConfigMap",
                                                   "metadata": {"name": "readable"}, "data": {"k": "v"}})
    api.create(ns_path(namespace, "roles", group="rbac.authorization.k8s.io/v1"), {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["readable"], "verbs": ["get"]}]})
    api.create(ns_path(namespace, "rolebindings", group="rbac.authorization.k8s.io/v1"), {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}]})
    volume = {"name": "api", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 600}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}
    code = """
import json, os, ssl, urllib.request, urllib.error
d = os.environ['API_DIR']   # the node rewrites env values under a mountPath to the volume's folder
ns = open(d + '/namespace').read()
ctx = ssl.create_default_context(cafile=d + '/ca.crt')
base = 'https://%s:%s' % (os.environ['KUBERNETES_SERVICE_HOST'], os.environ['KUBERNETES_SERVICE_PORT'])
def get(path):
    req = urllib.request.Request(base + path, headers={'Authorization': 'Bearer ' + open(d + '/token').read()})
    try:
        return urllib.request.urlopen(req, context=ctx, timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code
print('configmap', get('/api/v1/namespaces/%s/configmaps/readable' % ns))
print('secrets', get('/api/v1/namespaces/%s/secrets' % ns))
"""
    _run(cluster, namespace, _pod("token", code, sa="reader", volumes=[volume],
                                  env=[{"name": "API_DIR", "value": "/var/run/api"}],
                                  mounts=[{"name": "api", "mountPath": "/var/run/api", "readOnly": True}]))
    out = cluster.logs(namespace, "token").split("\n")
    assert "configmap 200" in out and "secrets 403" in out


def test_exit_codes_and_restart_policies(cluster, namespace):
    failed = _run(cluster, namespace, _pod("never-3", "raise SystemExit(3)"), phase="Failed")
    term = failed["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error"
    # OnFailure: restarted until it succeeds; the second try sees the first one's file.
    volumes = [{"name": "scratch", "emptyDir": {}}]
    mounts = [{"name": "scratch", "mountPath": "/scratch"}]
    code = ("import os,sys; p=os.environ['SCRATCH']+'/tried'\n"
            "if os.path.exists(p): print('second try'); sys.exit(0)\n"
            "open(p,'w').write('x'); print('first try'); sys.exit(7)")
    pod = _run(cluster, namespace, _pod("onfailure", code, policy="OnFailure", volumes=volumes, mounts=mounts,
                                        env=[{"name": "SCRATCH", "value": "/scratch"}]),
               timeout=90)
    status = pod["status"]["containerStatuses"][0]
    assert status["restartCount"] == 1 and status["lastState"]["terminated"]["exitCode"] == 7
    assert cluster.logs(namespace, "onfailure").strip() == "second try"
    assert cluster.logs(namespace, "onfailure", previous=True).strip() == "first try"


def test_always_restarts_with_back_off_and_counts(cluster, namespace):
    cluster.api.create(ns_path(namespace, "pods"), _pod("crash", "print('run'); raise SystemExit(1)", policy="Always"))

    def restarted():
        s = cluster.api.get(ns_path(namespace, "pods", "crash"))["status"]["containerStatuses"][0]
        return s if s["restartCount"] >= 2 else None
    status = wait_for(restarted, 90, "two restarts")
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert _phase(cluster, namespace, "crash") == "Running"   # restarting is still Running
    reasons = {e["reason"] for e in cluster.events(namespace) if e["involvedObject"]["name"] == "crash"}
    assert {"Started", "BackOff"} <= reasons


def test_delete_gives_the_grace_period_then_kills(cluster, namespace):
    code = ("import signal, sys, time\n"
            "def term(*a):\n    print('got SIGTERM', flush=True); time.sleep(600)\n"
            "signal.signal(signal.SIGTERM, term); print('ready', flush=True); time.sleep(600)")
    _run(cluster, namespace, _pod("graceful", code, policy="Always", grace=3), phase="Running")
    wait_for(lambda: "ready" in cluster.logs(namespace, "graceful"), 30, "the handler to be installed")
    started = time.monotonic()
    cluster.api.delete(ns_path(namespace, "pods", "graceful"))
    wait_for(lambda: "got SIGTERM" in cluster.logs(namespace, "graceful"), 10, "SIGTERM to reach the container")
    wait_for(lambda: cluster.api.get_or_none(ns_path(namespace, "pods", "graceful")) is None, 30,
             "the pod to be killed after its grace period and removed")
    assert time.monotonic() - started >= 2.5   # it was given its grace period, not killed at once


def test_cluster_names_resolve_once_the_endpointslice_lists_the_pod(cluster, namespace):
    cluster.api.create(ns_path(namespace, "services"), {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "grp"},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {"group": "g"},
                 "ports": [{"name": "p", "port": 9999}]}})
    peer = f"b.grp.{namespace}.svc.cluster.local"
    code = ("import socket, time\n"
            f"for i in range(120):\n    try:\n        print('resolved', socket.gethostbyname('{peer}'), flush=True); break\n"
            "    except OSError:\n        time.sleep(0.5)")
    a = _pod("a", code, extra={"hostname": "a", "subdomain": "grp"})
    a["metadata"]["labels"]["group"] = "g"
    cluster.api.create(ns_path(namespace, "pods"), a)
    wait_for(lambda: _phase(cluster, namespace, "a") == "Running", 30, "pod a to run")
    time.sleep(2)
    assert "resolved" not in cluster.logs(namespace, "a")     # b does not exist: its name does not resolve
    b = _pod("b", "import time; time.sleep(600)", policy="Always", extra={"hostname": "b", "subdomain": "grp"})
    b["metadata"]["labels"]["group"] = "g"
    cluster.api.create(ns_path(namespace, "pods"), b)
    wait_for(lambda: _phase(cluster, namespace, "a") == "Succeeded", 60, "pod a to resolve b and finish",
             describe=lambda: cluster.logs(namespace, "a"))
    b_ip = cluster.api.get(ns_path(namespace, "pods", "b"))["status"]["podIP"]
    assert cluster.logs(namespace, "a").strip() == f"resolved {b_ip}"
