"""examples/jobset.yaml against JobSet's own naming (tests/support/platforms.py cites the code):
every pod JobSet and the Job controller would make derives the TF_CONFIG that names its
peers by the DNS names JobSet's headless Service gives them. The JobSet controller is not
run here (it is not built on `make cluster`): the shapes are taken from its source."""

from __future__ import annotations

import yaml
from platforms import jobset_pod
from repo import REPO

from entrypoint.launcher import resolve_tf_config
from tfmw.chart import pss

NAMESPACE = "ml"


def jobset() -> dict:
    docs = [d for d in yaml.safe_load_all((REPO / "examples" / "jobset.yaml").read_text()) if d]
    (found,) = [d for d in docs if d["kind"] == "JobSet"]
    return found


def test_every_jobset_pod_derives_its_peers_dns_names():
    js = jobset()
    assert js["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    network = js["spec"].get("network") or {}
    assert network.get("enableDNSHostnames", True)  # the pods get <hostname>.<subdomain> names
    (rjob,) = js["spec"]["replicatedJobs"]
    assert rjob.get("replicas", 1) == 1  # one Job: one MWMS group
    job = rjob["template"]["spec"]
    assert job["completionMode"] == "Indexed" and job["completions"] == job["parallelism"]
    (container,) = job["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TFMW_REPLICAS"] == str(job["completions"])
    assert env["TFMW_SERVICE"] == (network.get("subdomain") or js["metadata"]["name"])
    env["TFMW_NAMESPACE"] = NAMESPACE  # the downward API's metadata.namespace
    env = {k: v for k, v in env.items() if v is not None}
    expected = []
    for index in range(job["completions"]):
        pod = jobset_pod(js["metadata"]["name"], rjob["name"], 0, index, network.get("subdomain", ""))
        expected.append(f"{pod['hostname']}.{pod['subdomain']}.{NAMESPACE}.svc.cluster.local:{env['TFMW_PORT']}")
    for index in range(job["completions"]):
        pod = jobset_pod(js["metadata"]["name"], rjob["name"], 0, index, network.get("subdomain", ""))
        tf_config, _, kind = resolve_tf_config(
            dict(env, JOB_COMPLETION_INDEX=pod["JOB_COMPLETION_INDEX"]), hostname=pod["hostname"]
        )
        assert kind == "indexed-job"
        assert tf_config == {"cluster": {"worker": expected}, "task": {"type": "worker", "index": index}}


def test_the_jobset_fails_on_the_launchers_permanent_codes_and_meets_restricted():
    js = jobset()
    job = js["spec"]["replicatedJobs"][0]["template"]["spec"]
    spec = job["template"]["spec"]
    assert spec["restartPolicy"] == "Never"
    rule = job["podFailurePolicy"]["rules"][0]
    assert rule["action"] == "FailJob" and rule["onExitCodes"]["values"] == [2, 3, 4, 5, 6]
    assert js["spec"]["failurePolicy"]["maxRestarts"] == 0
    assert pss.restricted_violations(spec, {}) == []
