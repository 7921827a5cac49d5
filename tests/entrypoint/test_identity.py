"""Who owns the run's lifecycle, and an Indexed Job (or JobSet) pod's identity; the shipped
examples/indexed-job.yaml checked against the launcher it runs."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
import yaml
from repo import REPO

from entrypoint.errors import ConfigError
from entrypoint.identity import (
    INDEXED_JOB,
    PRESET_TF_CONFIG,
    STATEFULSET,
    parse_indexed_hostname,
    platform_owns_lifecycle,
    pod_kind,
)
from entrypoint.launcher import resolve_tf_config
from entrypoint.lifecycle import EXIT_CODE
from tfmw.chart.helmkit import KUBERNETES_VERSIONS, validate_objects

EXAMPLE = REPO / "examples" / "indexed-job.yaml"
JOB_ENV = {"JOB_COMPLETION_INDEX": "1", "TFMW_NAMESPACE": "ml", "TFMW_SERVICE": "trainer", "TFMW_REPLICAS": "3"}


@pytest.mark.parametrize(
    "env,kind",
    [
        ({}, STATEFULSET),
        ({"TFMW_POD_NAME": "train-0"}, STATEFULSET),
        ({"TF_CONFIG": " "}, STATEFULSET),  # blank: not preset
        ({"TF_CONFIG": "{}"}, PRESET_TF_CONFIG),  # TFJob, Volcano, Run:ai
        ({"JOB_COMPLETION_INDEX": "0"}, INDEXED_JOB),  # an Indexed Job, a JobSet
        ({"JOB_COMPLETION_INDEX": "0", "TF_CONFIG": "{}"}, PRESET_TF_CONFIG),  # the platform's TF_CONFIG wins
    ],
)
def test_who_owns_the_lifecycle(env, kind):
    assert pod_kind(env) == kind
    assert platform_owns_lifecycle(kind) is (kind != STATEFULSET)


@pytest.mark.parametrize(
    "hostname,index,prefix",
    [
        ("tfmw-indexed-1", "1", "tfmw-indexed"),  # Indexed Job: <job>-<index>
        ("tfmw-indexed-1.tfmw-indexed.ml.svc.cluster.local", "1", "tfmw-indexed"),  # an FQDN works too
        ("train-workers-0-2", "2", "train-workers-0"),  # JobSet: <jobset>-<rjob>-<jobidx>-<index>
        ("j-10", "10", "j"),
    ],
)
def test_indexed_hostname_gives_the_peers_prefix(hostname, index, prefix):
    identity = parse_indexed_hostname(hostname, index, replicas=11)
    assert (identity.host_prefix, identity.ordinal) == (prefix, int(index))


@pytest.mark.parametrize(
    "hostname,index,replicas,needle",
    [
        ("mypod", "0", 2, "hostname 'mypod' does not end in '-0'"),
        ("job-1", "0", 2, "does not end in '-0'"),
        ("job-2", "2", 2, "JOB_COMPLETION_INDEX=2 is not below TFMW_REPLICAS=2"),
        ("job-x", "x", 2, "JOB_COMPLETION_INDEX='x' must be a whole number"),
        ("job-01", "01", 2, "JOB_COMPLETION_INDEX='01' must be a whole number"),
    ],
)
def test_indexed_identity_refusals_name_the_problem(hostname, index, replicas, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_indexed_hostname(hostname, index, replicas)


def test_indexed_job_tf_config_lists_every_index_under_the_subdomain():
    tf_config, settings, kind = resolve_tf_config(JOB_ENV, hostname="trainer-job-1")
    assert kind == INDEXED_JOB and settings.pod_name is None
    assert tf_config == {
        "cluster": {"worker": [f"trainer-job-{j}.trainer.ml.svc.cluster.local:2222" for j in range(3)]},
        "task": {"type": "worker", "index": 1},
    }


def test_indexed_job_hostname_comes_from_the_runtimes_hostname_variable():
    tf_config, _, _ = resolve_tf_config(dict(JOB_ENV, HOSTNAME="other-1"))
    assert tf_config["cluster"]["worker"][0] == "other-0.trainer.ml.svc.cluster.local:2222"


@pytest.mark.parametrize("missing", ["TFMW_SERVICE", "TFMW_REPLICAS", "TFMW_NAMESPACE"])
def test_indexed_job_needs_the_manifests_variables(missing):
    env = {k: v for k, v in JOB_ENV.items() if k != missing}
    with pytest.raises(ConfigError, match=f"{missing} not set"):
        resolve_tf_config(env, hostname="trainer-job-1")


def test_indexed_job_refusal_through_the_cli_is_one_line_and_exit_2():
    proc = subprocess.run(
        [sys.executable, "-m", "entrypoint", "run", "--", "true"],
        cwd=REPO,
        env=dict(JOB_ENV, HOSTNAME="no-index-here"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2  # the Job's podFailurePolicy fails the Job on it
    assert proc.stderr.count("\n") == 1 and "does not end in '-1'" in proc.stderr


# -- examples/indexed-job.yaml --------------------------------------------------------------------
def example() -> dict:
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    return {d["kind"]: d for d in docs}


def container_env(job: dict, namespace: str) -> dict:
    env = {}
    for entry in job["spec"]["template"]["spec"]["containers"][0]["env"]:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        elif entry["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace":
            env[entry["name"]] = namespace
    return env


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_example_is_valid_kubernetes(version):
    result = validate_objects(list(example().values()), version)
    assert result.problems == [] and result.custom == []


def test_example_wires_job_service_and_launcher_together():
    objs = example()
    job, service = objs["Job"], objs["Service"]
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    env = container_env(job, "ml")
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == int(env["TFMW_REPLICAS"]) == 2
    assert pod["subdomain"] == service["metadata"]["name"] == env["TFMW_SERVICE"]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"job-name": job["metadata"]["name"]}
    assert pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    assert container["command"] == ["python", "-m", "entrypoint", "run", "--", "python", "-m", "entrypoint.training"]
    assert {p["containerPort"] for p in container["ports"]} == {int(env["TFMW_PORT"])}
    assert objs["ConfigMap"]["metadata"]["name"] == next(
        v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v
    )
    assert "TF_CONFIG" not in env and "JOB_COMPLETION_INDEX" not in env  # the Job controller's to set


def test_example_fails_the_job_on_exactly_the_launchers_permanent_exit_codes():
    rules = example()["Job"]["spec"]["podFailurePolicy"]["rules"]
    fail = [r for r in rules if r["action"] == "FailJob"]
    assert len(fail) == 1 and fail[0]["onExitCodes"]["operator"] == "In"
    assert fail[0]["onExitCodes"]["containerName"] == "worker"
    values = fail[0]["onExitCodes"]["values"]  # one code may serve several reasons (4)
    assert sorted(values) == sorted({c for c in EXIT_CODE.values() if c != 0})


def test_example_pods_meet_the_restricted_pod_security_standard():
    spec = importlib.util.spec_from_file_location("pss", REPO / "scripts" / "tfmw" / "chart" / "pss.py")
    pss = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pss)
    pod = example()["Job"]["spec"]["template"]["spec"]
    assert pss.restricted_violations(pod) == []
    assert pod["automountServiceAccountToken"] is False


@pytest.mark.parametrize("index", [0, 1])
def test_example_pod_gets_the_tf_config_its_peers_answer_to(index):
    # What a pod of the example sees: the manifest's env plus what the Job controller and the
    # container runtime add (JOB_COMPLETION_INDEX, HOSTNAME=<job>-<index>).
    job = example()["Job"]
    env = dict(container_env(job, "ml"), JOB_COMPLETION_INDEX=str(index), HOSTNAME=f"{job['metadata']['name']}-{index}")
    proc = subprocess.run(
        [sys.executable, "-m", "entrypoint", "tf-config"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "cluster": {"worker": [f"tfmw-indexed-{j}.tfmw-indexed.ml.svc.cluster.local:2222" for j in range(2)]},
        "task": {"type": "worker", "index": index},
    }
