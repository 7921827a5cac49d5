"""Identity, settings, cluster spec and TF_CONFIG: pure functions, no TensorFlow."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from entrypoint.cli import resolve_tf_config
from entrypoint.cluster import build_tf_config, cluster_hosts, is_chief, parse_tf_config, worker_group
from entrypoint.errors import ConfigError
from entrypoint.identity import parse_pod_name
from entrypoint.settings import load_settings

BASE_ENV = {
    "TFMW_POD_NAME": "train-tf-multiworker-1",
    "TFMW_NAMESPACE": "ml",
    "TFMW_STATEFULSET": "train-tf-multiworker",
    "TFMW_SERVICE": "train-tf-multiworker-headless",
    "TFMW_REPLICAS": "3",
    "TFMW_PORT": "2222",
}


def test_ordinal_from_pod_name():
    ident = parse_pod_name("web-12", replicas=13)
    assert (ident.host_prefix, ident.ordinal) == ("web", 12)
    assert parse_pod_name("a-b-c-0", replicas=1).host_prefix == "a-b-c"


@pytest.mark.parametrize(
    "name,replicas,needle",
    [
        ("web", 2, "no StatefulSet ordinal"),
        ("web-", 2, "no StatefulSet ordinal"),
        ("web-01", 2, "no StatefulSet ordinal"),  # kubelet never pads ordinals
        ("web-x", 2, "no StatefulSet ordinal"),
        ("web-2", 2, "ordinal 2 is not below TFMW_REPLICAS=2"),
    ],
)
def test_bad_pod_names_refused(name, replicas, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_pod_name(name, replicas)


def test_pod_name_must_match_statefulset():
    with pytest.raises(ConfigError, match="does not belong to TFMW_STATEFULSET='other'"):
        parse_pod_name("web-0", 2, statefulset="other")


def test_tf_config_lists_every_worker_fqdn_in_ordinal_order():
    tf_config, settings, kind = resolve_tf_config(BASE_ENV)
    assert kind == "statefulset"
    assert tf_config == {
        "cluster": {
            "worker": [
                f"train-tf-multiworker-{j}.train-tf-multiworker-headless.ml.svc.cluster.local:2222" for j in range(3)
            ]
        },
        "task": {"type": "worker", "index": 1},
    }
    assert isinstance(tf_config["task"]["index"], int)


def test_cluster_domain_and_port_are_configurable():
    env = dict(BASE_ENV, TFMW_CLUSTER_DOMAIN="corp.example", TFMW_PORT="40000", TFMW_REPLICAS="2")
    tf_config, _, _ = resolve_tf_config(env)
    assert (
        tf_config["cluster"]["worker"][0]
        == "train-tf-multiworker-0.train-tf-multiworker-headless.ml.svc.corp.example:40000"
    )


def test_statefulset_name_derived_from_pod_name_when_not_given():
    env = {k: v for k, v in BASE_ENV.items() if k != "TFMW_STATEFULSET"}
    tf_config, _, _ = resolve_tf_config(env)
    assert tf_config["cluster"]["worker"][2].startswith("train-tf-multiworker-2.")


def test_loopback_mapping_gives_each_worker_its_own_port():
    settings = load_settings(dict(BASE_ENV, TFMW_LOOPBACK_PORTS="1"))
    ident = parse_pod_name(BASE_ENV["TFMW_POD_NAME"], 3)
    assert build_tf_config(settings, ident)["cluster"]["worker"] == [
        "127.0.0.1:2222",
        "127.0.0.1:2223",
        "127.0.0.1:2224",
    ]


def test_worker_zero_is_chief_unless_platform_names_a_chief():
    assert is_chief({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}})
    assert not is_chief({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}})
    assert not is_chief({"cluster": {"chief": ["c:1"], "worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})
    assert is_chief({"cluster": {"chief": ["c:1"], "worker": ["a:1"]}, "task": {"type": "chief", "index": 0}})
    assert not is_chief(
        {"cluster": {"worker": ["a:1"], "evaluator": ["e:1"]}, "task": {"type": "evaluator", "index": 0}}
    )


def test_the_trainers_view_ranks_the_chief_first():
    assert worker_group(None) == worker_group("") and worker_group(None).num_workers == 1
    two = worker_group(json.dumps({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}))
    assert (two.num_workers, two.worker_index, two.is_chief) == (2, 1, False)
    spec = {"cluster": {"chief": ["c:1"], "worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}
    with_chief = worker_group(json.dumps(spec))
    assert (with_chief.num_workers, with_chief.worker_index, with_chief.is_chief) == (2, 1, False)
    chief = worker_group(json.dumps(dict(spec, task={"type": "chief", "index": 0})))
    assert (chief.worker_index, chief.is_chief) == (0, True)


def test_the_trainers_view_puts_an_evaluator_outside_the_group():
    spec = {
        "cluster": {"chief": ["c:1"], "worker": ["a:1", "b:1"], "evaluator": ["e:1"]},
        "task": {"type": "evaluator", "index": 0},
    }
    evaluator = worker_group(json.dumps(spec))
    assert (evaluator.evaluator, evaluator.is_chief, evaluator.num_workers) == (True, False, 3)
    worker = worker_group(json.dumps(dict(spec, task={"type": "worker", "index": 1})))
    assert (worker.evaluator, worker.worker_index, worker.num_workers) == (False, 2, 3)


@pytest.mark.parametrize(
    "spec,needle",
    [
        ({"cluster": {"evaluator": ["e:1"]}, "task": {"type": "evaluator", "index": 0}}, "no 'chief' or 'worker' task"),
        ({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}}, "out of range"),
    ],
)
def test_the_trainers_view_refuses_what_mwms_cannot_train(spec, needle):
    with pytest.raises(ConfigError, match=needle):
        worker_group(json.dumps(spec))


def test_preset_tf_config_is_validated_and_kept():
    preset = {
        "cluster": {"chief": ["job-chief-0.job:2222"], "worker": ["job-worker-0.job:2222"]},
        "task": {"type": "worker", "index": 0},
    }
    tf_config, _, kind = resolve_tf_config({"TF_CONFIG": json.dumps(preset)})
    assert kind == "preset-tf-config" and tf_config == preset
    assert cluster_hosts(tf_config) == ["job-chief-0.job", "job-worker-0.job"]


# Eight-plus bad environments, each refused with a message naming the key.
BAD_ENVS = [
    ({"TFMW_REPLICAS": "0"}, "TFMW_REPLICAS='0' must be a whole number >= 1"),
    ({"TFMW_REPLICAS": "two"}, "TFMW_REPLICAS='two'"),
    ({"TFMW_REPLICAS": "-1"}, "TFMW_REPLICAS='-1'"),
    ({"TFMW_PORT": "70000"}, "TFMW_PORT='70000' must be a TCP port"),
    ({"TFMW_PORT": "0"}, "TFMW_PORT='0' must be a TCP port"),
    ({"TFMW_NAMESPACE": "ML_Team"}, "TFMW_NAMESPACE='ML_Team' must be a DNS-1123 label"),
    ({"TFMW_SERVICE": "svc.with.dots"}, "TFMW_SERVICE='svc.with.dots'"),
    ({"TFMW_CLUSTER_DOMAIN": "-bad-"}, "TFMW_CLUSTER_DOMAIN='-bad-'"),
    ({"TFMW_PEER_TIMEOUT_SECONDS": "soon"}, "TFMW_PEER_TIMEOUT_SECONDS='soon'"),
    ({"TFMW_POD_NAME": "train-tf-multiworker"}, "has no StatefulSet ordinal"),
    ({"TFMW_POD_NAME": "train-tf-multiworker-5"}, "ordinal 5 is not below TFMW_REPLICAS=3"),
    ({"TFMW_SERVICE": ""}, "TFMW_SERVICE not set"),
    ({"TFMW_RUN_ID": "Run 1"}, "TFMW_RUN_ID='Run 1' must be a DNS-1123 label"),
    ({"TF_CONFIG": "{not json"}, "TF_CONFIG is not valid JSON"),
    (
        {"TF_CONFIG": '{"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":"0"}}'},
        "TF_CONFIG['task']['index']: '0' is not of type 'integer'",
    ),
    (
        {"TF_CONFIG": '{"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":1}}'},
        "TF_CONFIG['task']['index']=1 is out of range",
    ),
    ({"TF_CONFIG": '{"cluster":{"ps":["a:1"]},"task":{"type":"ps","index":0}}'}, "TF_CONFIG"),
    (
        {"TF_CONFIG": '{"cluster":{"worker":["no-port"]},"task":{"type":"worker","index":0}}'},
        "TF_CONFIG['cluster']['worker'][0]",
    ),
]


@pytest.mark.parametrize("override,needle", BAD_ENVS, ids=[n for _, n in BAD_ENVS])
def test_bad_environment_refused_by_cli_with_one_line(override, needle):
    env = dict(BASE_ENV, **override)
    env = {k: v for k, v in env.items() if not (k == "TFMW_SERVICE" and v == "")}
    proc = subprocess.run(
        [sys.executable, "-m", "entrypoint", "tf-config"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert needle in lines[0]


def test_launcher_never_imports_tensorflow():
    code = (
        "import sys, entrypoint.cli, entrypoint.supervisor, entrypoint.peers;"
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_bad_environment_in_the_statefulset_fails_the_run_and_idles(tmp_path):
    # `run` in the chart's StatefulSet: one line naming the variable, the run Failed (BadConfig),
    # then idle (an exit would only crash-loop on the same values); SIGTERM ends it with 0.
    env = dict(
        BASE_ENV,
        TFMW_REPLICAS="1024",
        TFMW_POD_NAME="r" * 40 + "-0",
        TFMW_RUN_ID="r1",
        TFMW_STATEFULSET="r" * 40,
        TFMW_SERVICE="s" * 50,
        TFMW_NAMESPACE="n" * 60,
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "entrypoint", "run", "--", "true"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("tfmw launcher idle:"):
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert [line for line in lines if line.startswith("tfmw failed ")] == [
        next(line for line in lines if line.startswith("tfmw failed run=r1 reason=BadConfig exit_code=2 message="))
    ]
    assert "the run failed (BadConfig); not retrying" in lines[-1]
    assert len(err.strip().splitlines()) == 1 and "over Linux's" in err and "Traceback" not in err


def test_tf_config_cli_prints_json(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "entrypoint", "tf-config"], env=BASE_ENV, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["task"] == {"type": "worker", "index": 1}


def test_parse_tf_config_accepts_rpc_layer():
    raw = '{"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":0},"rpc_layer":"grpc"}'
    assert parse_tf_config(raw)["rpc_layer"] == "grpc"


def test_tf_config_over_the_linux_env_limit_is_refused_up_front():
    # 1,024 workers with long (but valid) names: over 128 KiB, which exec() would refuse.
    env = dict(
        BASE_ENV,
        TFMW_REPLICAS="1024",
        TFMW_POD_NAME="r" * 40 + "-0",
        TFMW_STATEFULSET="r" * 40,
        TFMW_SERVICE="s" * 50,
        TFMW_NAMESPACE="n" * 60,
    )
    proc = subprocess.run(
        [sys.executable, "-m", "entrypoint", "tf-config"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "over Linux's" in proc.stderr and "workers.replicas" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_tf_config_of_a_large_default_named_cluster_fits():
    from entrypoint.cluster import check_tf_config_size

    env = dict(BASE_ENV, TFMW_REPLICAS="1024")
    tf_config, _, _ = resolve_tf_config(env)
    check_tf_config_size(json.dumps(tf_config, separators=(",", ":")))
