"""The peers of figure 10 (tfmw.peers): their workloads and install objects (pure, fast), the
trainer's process found from the host, and (slow, no cluster) that the pinned modules download
and their own manifests render with the image built here."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tfmw.devcluster.build import module_download
from tfmw.faults.inject import inject, trainer_pids
from tfmw.faults.kube import FaultError
from tfmw.peers import builds, install, run, workloads

RESOURCES = {"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}}


def test_the_run_is_values_local_model_with_the_harness_steps():
    values = {"training": {"config": {"model": {"name": "cnn"}, "steps": 40, "checkpoint": {"everySteps": 20}}}}
    config = workloads.training_config(values, 120, 30)
    assert config == {"model": {"name": "cnn"}, "steps": 120, "checkpoint": {"everySteps": 30}, "logEverySteps": 1}
    assert values["training"]["config"]["steps"] == 40  # the values are not changed


@pytest.mark.parametrize(
    "system, policy, pod_policy",
    [("tfjob-onfailure", "OnFailure", "OnFailure"), ("tfjob-exitcode", "ExitCode", "Never")],
)
def test_a_tfjob_runs_the_trainer_itself_in_the_container_the_operator_configures(system, policy, pod_policy):
    kind, job = run.workload(system, "img:1", "cm", "pvc", RESOURCES)
    assert kind == "tfjob" and job["metadata"]["name"] == f"peer-{system}"
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    container = worker["template"]["spec"]["containers"][0]
    assert worker["replicas"] == 2 and worker["restartPolicy"] == policy
    assert worker["template"]["spec"]["restartPolicy"] == pod_policy
    assert container["name"] == "tensorflow" and container["ports"][0]["name"] == "tfjob-port"
    assert container["command"] == ["python", "-m", "entrypoint.training"]
    assert not any(e["name"] == "TF_CONFIG" for e in container["env"])  # the operator's


def test_a_tfjob_restart_policy_the_operator_does_not_know_is_refused():
    with pytest.raises(ValueError, match="'Always'"):
        workloads.tfjob("peer", "img:1", "cm", "pvc", RESOURCES, policy="Always")


def test_a_jobset_sets_what_its_webhook_would_default_and_derives_tf_config_from_the_index():
    kind, obj = run.workload("jobset", "img:1", "cm", "pvc", RESOURCES)
    spec = obj["spec"]
    assert kind == "jobset"
    job = spec["replicatedJobs"][0]["template"]["spec"]
    assert spec["successPolicy"]["operator"] == "All" and spec["network"]["publishNotReadyAddresses"]
    assert job["completionMode"] == "Indexed" and job["completions"] == job["parallelism"] == 2
    container = job["template"]["spec"]["containers"][0]
    assert "python -m entrypoint tf-config" in container["command"][-1]
    assert {e["name"]: e.get("value") for e in container["env"]}["TFMW_SERVICE"] == "peer-jobset"


@pytest.mark.parametrize(
    "kind, labels, ordinal",
    [
        ("tfjob-exitcode", {"training.kubeflow.org/replica-index": "1"}, 1),
        ("jobset", {"batch.kubernetes.io/job-completion-index": "0"}, 0),
        ("jobset", {"training.kubeflow.org/replica-index": "1"}, None),
        ("tfjob", {}, None),
    ],
)
def test_a_peers_pod_is_a_worker_by_its_controllers_label(kind, labels, ordinal):
    assert workloads.ordinal_of(kind)({"metadata": {"labels": labels}}) == ordinal


@pytest.mark.parametrize(
    "kind, conditions, phase",
    [
        ("tfjob", [("Running", "True")], ""),
        ("tfjob", [("Running", "False"), ("Succeeded", "True")], "Succeeded"),
        ("tfjob", [("Failed", "True")], "Failed"),
        ("jobset", [("Completed", "True")], "Succeeded"),
        ("jobset", [("Failed", "True")], "Failed"),
        ("jobset", [("Completed", "False")], ""),
    ],
)
def test_the_runs_end_is_read_from_the_controllers_conditions(kind, conditions, phase):
    obj = {"status": {"conditions": [{"type": t, "status": s} for t, s in conditions]}}
    assert workloads.phase(kind, obj) == phase
    assert workloads.phase(kind, None) == ""


def test_the_controllers_own_words_on_the_runs_end():
    conditions = [
        {"type": "Running", "status": "False", "lastTransitionTime": "2026-01-01T00:00:01Z"},
        {"type": "Created", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "C"},
        {
            "type": "Failed",
            "status": "True",
            "lastTransitionTime": "2026-01-01T00:00:09Z",
            "reason": "TFJobFailed",
            "message": "TFJob ns/j has failed because 1 Worker replica(s) failed.",
        },
    ]
    said = workloads.phase_message({"status": {"conditions": conditions}})
    assert said == "Failed: TFJobFailed: TFJob ns/j has failed because 1 Worker replica(s) failed."
    assert workloads.phase_message({}) == ""


def test_the_wrapper_changes_only_the_image_and_jobsets_cpu_request():
    tfjob = install.kustomization(install.TFJOB, "tfmw.local/training-operator:v1.9.0")
    assert tfjob["resources"] == ["../manifests/overlays/standalone"]
    assert tfjob["images"] == [
        {"name": "kubeflow/training-operator", "newName": "tfmw.local/training-operator", "newTag": "v1.9.0"}
    ]
    assert "patches" not in tfjob
    jobset = install.kustomization(install.JOBSET, "tfmw.local/jobset:v0.12.0")
    (patch,) = yaml.safe_load(jobset["patches"][0]["patch"])
    assert patch["value"] == install.JOBSET_CPU_REQUEST and patch["path"].endswith("/requests/cpu")


@pytest.mark.parametrize("system", run.SYSTEMS[1:])
def test_under_a_node_loss_the_workers_spread_one_per_node_and_off_the_controllers(system):
    extra = workloads.placement(f"peer-{system}", ("node-1",))
    kind, obj = run.workload(system, "img:1", "cm", "pvc", RESOURCES, extra)
    if kind == "tfjob":
        pod = obj["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    else:
        pod = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["whenUnsatisfiable"] == "DoNotSchedule"
    assert spread["nodeTaintsPolicy"] == "Honor"  # a lost (tainted) node does not count
    assert spread["labelSelector"] == {"matchLabels": {"app.kubernetes.io/name": f"peer-{system}"}}
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["node-1"]}]
    assert pod["containers"][0]["command"]  # the rest of the pod is the same
    plain = yaml.safe_dump(run.workload(system, "img:1", "cm", "pvc", RESOURCES)[1])
    assert "affinity" not in plain and "topologySpreadConstraints" not in plain  # other faults: as before


def test_without_nodes_to_avoid_the_workers_are_only_spread():
    assert set(workloads.placement("peer-jobset")) == {"topologySpreadConstraints"}


def test_where_the_runs_pods_were_left_is_one_line():
    pods = [
        {
            "metadata": {"name": "w-1", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": "node-2"},
            "status": {"phase": "Running", "containerStatuses": [{"restartCount": 0, "state": {"running": {}}}]},
        },
        {
            "metadata": {"name": "w-0"},
            "spec": {"nodeName": "node-3"},
            "status": {
                "phase": "Running",
                "containerStatuses": [{"restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}],
            },
        },
        {"metadata": {"name": "w-2"}, "spec": {}, "status": {"phase": "Pending"}},
    ]
    assert workloads.pods_line(pods) == (
        "w-0 on node-3: Running, 4 restarts, CrashLoopBackOff; w-1 on node-2: Terminating; w-2 on no node: Pending"
    )
    assert workloads.pods_line([]) == "no pods"


def test_a_jobsets_jobs_are_one_line_with_the_pods_they_still_wait_for():
    jobs = [
        {
            "metadata": {"name": "peer-jobset-workers-0"},
            "status": {
                "terminating": 1,
                "conditions": [
                    {"type": "SuccessCriteriaMet", "status": "True"},
                    {"type": "Complete", "status": "False"},
                ],
            },
        },
        {"metadata": {"name": "peer-jobset-workers-1"}, "status": {}},
    ]
    assert workloads.jobs_line(jobs) == (
        "peer-jobset-workers-0: SuccessCriteriaMet, 1 terminating; peer-jobset-workers-1: no condition"
    )
    assert workloads.jobs_line([]) == "no Jobs"


def test_a_node_loss_needs_the_local_clusters_state_folder(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}")
    not_ours = SimpleNamespace(kubeconfig=kubeconfig)
    with pytest.raises(FaultError, match="node-loss and node-partition act on the nodes of `make cluster`") as err:
        inject(not_ours, run.NODE_LOSS, "ns", "peer-jobset-workers-0-1", [])
    assert err.value.exit_code == 2


def _fake_proc(root: Path, pid: int, argv: list[str], cgroup: str, comm: str = "python") -> None:
    entry = root / str(pid)
    entry.mkdir()
    (entry / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (entry / "cgroup").write_text(cgroup)
    (entry / "comm").write_text(comm + "\n")


def test_the_trainer_of_one_pod_is_found_from_the_host(tmp_path):
    uid = "1234-ab"
    trainer = ["python", "-m", "entrypoint.training"]
    _fake_proc(tmp_path, 10, trainer, f"0::/kubepods/burstable/pod{uid}/c1\n")
    _fake_proc(tmp_path, 11, trainer, "0::/kubepods/burstable/podffff-00/c2\n")  # another pod's
    _fake_proc(tmp_path, 12, ["python", "-m", "entrypoint", "run", "--", *trainer], f"0::/x/pod{uid}/c1\n")
    _fake_proc(tmp_path, 13, trainer, "0::/kubepods.slice/kubepods-pod1234_ab.slice/c\n")
    # warm standbys: one told to run the trainer (its name back), one still waiting
    standby = ["python", "-m", "entrypoint.standby", "--fd", "5", "--preload", "entrypoint.training.trainer", "--"]
    _fake_proc(tmp_path, 14, [*standby, *trainer], f"0::/x/pod{uid}/c1\n")
    _fake_proc(tmp_path, 15, [*standby, *trainer], f"0::/x/pod{uid}/c1\n", comm="tfmw-standby")
    _fake_proc(tmp_path, 16, [*standby, "python", "train.py"], f"0::/x/pod{uid}/c1\n")  # a user's
    (tmp_path / "self").mkdir()
    assert sorted(trainer_pids(uid, tmp_path)) == [10, 13, 14]


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(install.PEERS))
def test_the_pinned_peer_downloads_and_its_own_manifests_render_with_the_image_built_here(tmp_path, key):
    """No build and no cluster: the wrapper module's pin resolves at the proxy, and upstream's
    kustomization of that version renders with only the image changed."""
    peer = install.PEERS[key]
    go = shutil.which("go")
    assert go, "Go is needed to build the peers (make bench PEERS=1)"
    info = module_download(go, peer.build.gomod, [peer.build.module], tmp_path / "go.log")[peer.build.module]
    assert info["Version"] == builds.version(peer.build)
    install_dir = tmp_path / "install"
    for source, dest in peer.build.copies:
        shutil.copytree(Path(info["Dir"]) / source, install_dir / dest)
    for path in [install_dir, *install_dir.rglob("*")]:  # the module cache is read-only
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    no_cluster = SimpleNamespace(kubeconfig=tmp_path / "none")  # kubectl kustomize reads no cluster
    rendered = list(yaml.safe_load_all(install.render(no_cluster, peer, install_dir)))
    deployments = [o for o in rendered if o and o["kind"] == "Deployment"]
    assert [d["metadata"]["name"] for d in deployments] == [peer.deployment]
    assert {d["metadata"]["namespace"] for d in deployments} == {peer.namespace}
    (container,) = deployments[0]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == install.image_ref(peer) and container["command"] == ["/manager"]
    crds = {o["metadata"]["name"] for o in rendered if o and o["kind"] == "CustomResourceDefinition"}
    assert {"tfjob": "tfjobs.kubeflow.org", "jobset": "jobsets.jobset.x-k8s.io"}[key] in crds
    webhooks = [o for o in rendered if o and o["kind"].endswith("WebhookConfiguration")]
    assert webhooks, "its own webhooks, with its own certificates"


@pytest.mark.parametrize("key", sorted(install.PEERS))
def test_a_peers_webhook_is_probed_with_an_object_of_the_kind_its_runs_create(key):
    peer = install.PEERS[key]
    assert peer.probe_path == workloads.collection(key, "default")
    _, created = run.workload({"tfjob": "tfjob-onfailure", "jobset": "jobset"}[key], "img:1", "cm", "pvc", RESOURCES)
    assert (peer.probe["apiVersion"], peer.probe["kind"]) == (created["apiVersion"], created["kind"])
    assert peer.probe["metadata"] == {"name": "tfmw-probe", "namespace": "default"}


def test_the_peer_installer_refuses_without_a_running_cluster_in_one_line(tmp_path, capsys, monkeypatch):
    assert install.main(["install", "jobset", "--state", str(tmp_path / "none")]) == 1
    assert capsys.readouterr().err == (
        f"peers: error: no running cluster at {tmp_path / 'none'} (start one with make cluster)\n"
    )
    monkeypatch.setattr(install.controlplane, "running_cluster", lambda directory: SimpleNamespace(dir=directory))

    def refused(state, peer, **kwargs):
        raise install.PeerError(f"{peer.key} refused on {state.dir.name}")

    monkeypatch.setattr(install, "uninstall", refused)
    assert install.main(["uninstall", "tfjob", "--state", str(tmp_path / "s")]) == 1
    assert capsys.readouterr().err == "peers: error: tfjob refused on s\n"
