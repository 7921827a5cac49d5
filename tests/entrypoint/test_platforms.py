"""Every platform the README names, with the TF_CONFIG (or pod identity) its own code writes
(tests/support/platforms.py cites the source): the launcher trains each role or refuses it in
one line, as docs/scheduling.md ("Platforms") says."""

from __future__ import annotations

import json

import pytest
from platforms import jobset_pod, tfjob_services, tfjob_tf_config, volcano_tf_config

from entrypoint.cli import main
from entrypoint.cluster import cluster_hosts, is_chief, worker_group
from entrypoint.launcher import resolve_tf_config

NS = "ml"


def tf_config_of(capsys, raw: str) -> dict:
    """What `tf-config` (the launcher's resolution) prints for a preset TF_CONFIG."""
    assert main(["tf-config"], {"TF_CONFIG": raw}) == 0
    return json.loads(capsys.readouterr().out)


def refusal(capsys, raw: str) -> str:
    code = main(["tf-config"], {"TF_CONFIG": raw})
    out, err = capsys.readouterr()
    assert code == 2 and out == "", (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    return lines[0]


# -- TFJob -------------------------------------------------------------------------------------
def test_tfjob_chief_and_workers_train_with_the_chief_first(capsys):
    replicas = {"Chief": 1, "Worker": 2}
    chief = tfjob_tf_config("mnist", NS, replicas, "Chief", 0)
    assert chief == (
        '{"cluster":{"chief":["mnist-chief-0.ml.svc:2222"],"worker":["mnist-worker-0.ml.svc:2222",'
        '"mnist-worker-1.ml.svc:2222"]},"task":{"type":"chief","index":0},"environment":"cloud"}'
    )
    kept = tf_config_of(capsys, chief)
    assert kept == json.loads(chief)  # validated and kept, "environment" included
    assert is_chief(kept) and worker_group(chief).worker_index == 0
    ranks = [worker_group(tfjob_tf_config("mnist", NS, replicas, "Worker", i)) for i in range(2)]
    assert [(g.worker_index, g.num_workers, g.is_chief) for g in ranks] == [(1, 3, False), (2, 3, False)]
    # every peer a worker waits for is a pod with its own Service (common/service.go)
    hosts = cluster_hosts(kept)
    assert [h.split(".")[0] for h in hosts] == tfjob_services("mnist", replicas)


def test_tfjob_master_trains_as_the_chief(capsys):
    replicas = {"Master": 1, "Worker": 1}
    master = tfjob_tf_config("job", NS, replicas, "Master", 0)
    assert '"master":["job-master-0.ml.svc:2222"]' in master and '"type":"master"' in master
    kept = tf_config_of(capsys, master)
    # TensorFlow's MWMS knows no "master": the training command sees the same task as "chief"
    assert kept["cluster"] == {"chief": ["job-master-0.ml.svc:2222"], "worker": ["job-worker-0.ml.svc:2222"]}
    assert kept["task"] == {"type": "chief", "index": 0} and kept["environment"] == "cloud"
    assert worker_group(master).is_chief
    worker = worker_group(tfjob_tf_config("job", NS, replicas, "Worker", 0))
    assert (worker.worker_index, worker.num_workers) == (1, 2)


def test_tfjob_evaluator_is_outside_the_group(capsys):
    replicas = {"Chief": 1, "Worker": 1, "Evaluator": 1}
    worker_raw = tfjob_tf_config("job", NS, replicas, "Worker", 0)
    assert '"evaluator":["job-evaluator-0.ml.svc:2222"]' in worker_raw  # every pod sees it (genClusterSpec)
    worker = worker_group(worker_raw)
    assert (worker.evaluator, worker.num_workers, worker.worker_index) == (False, 2, 1)
    assert "job-evaluator-0.ml.svc" not in cluster_hosts(tf_config_of(capsys, worker_raw))  # not a peer
    evaluator = worker_group(tfjob_tf_config("job", NS, replicas, "Evaluator", 0))
    assert evaluator.evaluator and not evaluator.is_chief


def test_tfjob_custom_cluster_domain_is_kept(capsys):
    raw = tfjob_tf_config("job", NS, {"Worker": 2}, "Worker", 1, cluster_domain="cluster.local", port=3333)
    assert tf_config_of(capsys, raw)["cluster"]["worker"][1] == "job-worker-1.ml.svc.cluster.local:3333"


@pytest.mark.parametrize(
    "replicas,rtype,needle",
    [
        (
            {"PS": 1, "Worker": 2},
            "Worker",
            "TF_CONFIG has 'ps' tasks: parameter-server training is not "
            "MultiWorkerMirroredStrategy; drop the PS replicas (TFJob tfReplicaSpecs.PS",
        ),
        ({"PS": 1, "Worker": 2}, "PS", "TF_CONFIG has 'ps' tasks"),
        (
            {"Chief": 2, "Worker": 1},
            "Worker",
            "TF_CONFIG['cluster']['chief'] has 2 tasks; TensorFlow allows one chief: "
            "set replicas: 1 (TFJob tfReplicaSpecs.Chief/Master",
        ),
        ({"Chief": 1, "Master": 1, "Worker": 1}, "Worker", "both 'master' and 'chief'"),
        ({"Worker": 1, "Evaluator": 2}, "Evaluator", "TensorFlow allows one evaluator"),
    ],
)
def test_tfjob_shapes_mwms_cannot_run_are_refused_in_one_line(capsys, replicas, rtype, needle):
    assert needle in refusal(capsys, tfjob_tf_config("job", NS, replicas, rtype, 0))


def test_tfjob_dynamic_workers_are_refused_in_one_line(capsys):
    raw = tfjob_tf_config("job", NS, {"Worker": 2}, "Worker", 1, dynamic_worker=True)
    assert raw == '{"cluster":{"worker":{"1":"job-worker-1.ml.svc:2222"},"ps":[]},"task":{"type":"worker","index":1}}'
    assert "enableDynamicWorker: false" in refusal(capsys, raw)


def test_tfjob_evaluator_index_out_of_range_is_refused(capsys):
    raw = tfjob_tf_config("job", NS, {"Worker": 1, "Evaluator": 1}, "Evaluator", 1)
    assert "TF_CONFIG['task']['index']=1 is out of range: cluster has 1 'evaluator' task(s)" in refusal(capsys, raw)


# -- Volcano -----------------------------------------------------------------------------------
def test_volcano_chief_workers_and_evaluator(capsys):
    tasks = [("chief", 1), ("worker", 2), ("evaluator", 1)]
    chief = volcano_tf_config("train", tasks, "chief", 0)
    assert chief == (
        '{"cluster":{"worker":["train-worker-0.train:2222","train-worker-1.train:2222"],'
        '"chief":["train-chief-0.train:2222"],"evaluator":["train-evaluator-0.train:2222"]},'
        '"task":{"type":"chief","index":0}}'
    )
    assert tf_config_of(capsys, chief) == json.loads(chief)
    assert worker_group(chief).is_chief
    assert worker_group(volcano_tf_config("train", tasks, "worker", 1)).worker_index == 2
    assert worker_group(volcano_tf_config("train", tasks, "evaluator", 0)).evaluator


def test_volcano_tasks_named_by_the_plugins_flags(capsys):
    # tensorflow: ["--worker=trainer", "--port=5000"]: the task "trainer" is the worker role
    raw = volcano_tf_config("j", [("trainer", 2)], "trainer", 1, port=5000, names={"worker": "trainer"})
    assert tf_config_of(capsys, raw)["cluster"] == {"worker": ["j-trainer-0.j:5000", "j-trainer-1.j:5000"]}


def test_volcano_ps_and_an_unnamed_task_are_refused(capsys):
    assert "TF_CONFIG has 'ps' tasks" in refusal(
        capsys, volcano_tf_config("j", [("ps", 1), ("worker", 2)], "worker", 0)
    )
    # a task no flag names: left out of the cluster, its pod's task type is the raw name
    line = refusal(capsys, volcano_tf_config("j", [("worker", 2), ("logger", 1)], "logger", 0))
    assert line.startswith("tfmw: TF_CONFIG['task']['type']") or "TF_CONFIG['task']['type']" in line


# -- JobSet ------------------------------------------------------------------------------------
def test_jobset_pods_derive_their_peers_from_hostname_and_completion_index():
    # examples/jobset.yaml: one replicatedJob "workers" with parallelism = completions = 3;
    # the launcher's variables come from the example's own env (JobSet sets none).
    hosts = []
    for index in range(3):
        pod = jobset_pod("tfmw", "workers", 0, index)
        env = {
            "JOB_COMPLETION_INDEX": pod["JOB_COMPLETION_INDEX"],
            "TFMW_NAMESPACE": NS,
            "TFMW_SERVICE": pod["subdomain"],
            "TFMW_REPLICAS": "3",
        }
        tf_config, _, kind = resolve_tf_config(env, hostname=pod["hostname"])
        assert kind == "indexed-job" and tf_config["task"] == {"type": "worker", "index": index}
        hosts.append(f"{pod['hostname']}.{pod['subdomain']}.{NS}.svc.cluster.local:2222")
    assert tf_config["cluster"]["worker"] == hosts  # each peer's name is that pod's own DNS name


def test_an_evaluator_task_whose_command_cannot_start_is_one_line_exit_2(capsys, tmp_path):
    raw = tfjob_tf_config("job", NS, {"Worker": 1, "Evaluator": 1}, "Evaluator", 0)
    code = main(["run", "--", str(tmp_path / "no-such-program")], {"TF_CONFIG": raw, "PATH": "/usr/bin:/bin"})
    out, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no-such-program" in err
    assert "Traceback" not in out + err
