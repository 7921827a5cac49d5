"""The ops path on a real API server: `python -m tfmw.cli deploy / status / logs / diff /
undeploy` (what `make deploy ENV=local` and friends run) and `helm test`, through pyhelm3 with
Helm 4 and with Helm 3, against the local control plane (scripts/tfmw/devcluster).

One test trains for real end to end; the others run the sleeper command (clusterkit.SLEEPER)
or a command that finishes at once, since they are about Helm, the scheduler and the API
server, not TensorFlow. The faults: a stopped API server, a missing kube context, a namespace
that does not exist, pods that cannot be scheduled, a value the API server refuses: each a
one-line error naming the object and field, with a non-zero exit, and what is left said.
"""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest
from clusterkit import GPU_MEMORY, REPO, SLEEPER, TOOLS, delete_namespace, wait_for

from tfmw.k8s.api import ns_path

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

HELMS = {"helm4": str(TOOLS / "helm"), "helm3": str(TOOLS / "helm3")}
_TERM = "workers.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
# passes every offline check, refused by the API server's validation
BOGUS_AFFINITY = [f"{_TERM}.matchExpressions[0].key=gpu", f"{_TERM}.matchExpressions[0].operator=Bogus"]
FINISH_AT_ONCE = "training.command={python,-c,pass}"  # the launcher's user command exits 0: Succeeded


def tfmw(cluster, *args: str, helm: str = "helm4", sets=(), timeout: float = 600, env=None):
    """`python -m tfmw.cli ARGS` with the test cluster's KUBECONFIG and the chosen helm."""
    argv = [sys.executable, "-m", "tfmw.cli", *args]
    for item in sets:
        argv += ["--set", shlex.quote(item)]  # tfmw splits --set shell-style (make SET="a=1 b=2")
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=cluster.env(HELM=HELMS[helm], **(env or {})),
    )


def one_line_error(proc, command: str, *fragments: str) -> str:
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"tfmw {command}: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]}"
    return lines[0]


def status_data(cluster, namespace: str, release: str) -> dict:
    cm = cluster.api.get_or_none(ns_path(namespace, "configmaps", f"{release}-tf-multiworker-status"))
    return (cm or {}).get("data") or {}


def replicas(cluster, namespace: str, release: str) -> int | None:
    sts = cluster.statefulset(namespace, f"{release}-tf-multiworker")
    return None if sts is None else sts["spec"]["replicas"]


def helm_release(cluster, namespace: str, release: str, helm: str = "helm") -> subprocess.CompletedProcess:
    return cluster.helm("status", release, "-n", namespace, "-o", "json", helm=helm, check=False)


def fresh_namespace_name(prefix: str) -> str:
    """A namespace name nobody made: `tfmw deploy` creates it (--create-namespace)."""
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


def delete_namespace_if_there(cluster, name: str) -> None:
    if cluster.api.get_or_none(f"/api/v1/namespaces/{name}"):
        delete_namespace(cluster, name)


# ---------------------------------------------------------------- the whole life, real training


class LogFollower:
    """`tfmw logs` (kubectl logs --follow) in the background, each line stamped when it arrives."""

    def __init__(self, cluster, namespace: str, release: str):
        argv = [sys.executable, "-m", "tfmw.cli", "logs", "--namespace", namespace, "--release", release]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=cluster.env()
        )
        self.lines: list[tuple[float, str]] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.thread.join(timeout=10)

    def first(self, text: str) -> float | None:
        return next((t for t, line in self.lines if text in line), None)

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)


# The deploy test's run: long enough that helm test and the /metrics scrape meet the workers
# training (values/local.yaml's 40 steps could end, and scale to 0, before the scrape).
DEPLOY_STEPS = 200


def test_deploy_local_trains_to_completion_then_status_logs_helm_test_and_undeploy(cluster, namespace):
    """`make deploy ENV=local` on the local cluster: helm install -> pods -> real training with
    `helm test` checking every worker's name and gRPC port while they train -> the run Succeeds
    and the workers scale their StatefulSet to 0 -> `make status` reads the outcome from the
    status ConfigMap -> `make logs` followed the whole run -> `make undeploy` leaves no pod."""
    release = "ops"
    started = time.monotonic()
    deploy = tfmw(
        cluster,
        "deploy",
        "--env",
        "local",
        "--namespace",
        namespace,
        "--release",
        release,
        "--timeout",
        "3m",
        "--poll-seconds",
        "1",
        sets=(f"training.config.steps={DEPLOY_STEPS}",),
    )
    deployed = time.monotonic()
    assert deploy.returncode == 0, deploy.stdout + deploy.stderr
    assert "helm 4: installing ops" in deploy.stdout
    assert f"deployed: release {release} revision 1, deployed" in deploy.stdout
    follower = LogFollower(cluster, namespace, release)

    # helm test: the chart's test pod resolves every worker's name and connects to its gRPC port,
    # which is open while TensorFlow's server runs: now, not after the run has scaled to 0.
    test = cluster.helm("test", release, "-n", namespace, "--timeout", "3m", "--logs", check=False)
    assert test.returncode == 0, test.stdout + test.stderr
    assert "tfmw launcher peers: all 2 reachable after" in test.stdout

    # /metrics on a worker, while it trains: read in the pod (its port admits only what
    # networkPolicy.metricsFrom allows) and parsed with prometheus-client's own parser.
    scrape = cluster.kubectl(
        "exec",
        "-n",
        namespace,
        f"{release}-tf-multiworker-1",
        "--",
        "python",
        "-c",
        "import urllib.request; print(urllib.request.urlopen("
        "'http://127.0.0.1:9090/metrics', timeout=10).read().decode())",
        check=False,
    )
    assert scrape.returncode == 0, scrape.stdout + scrape.stderr
    from prometheus_client.parser import text_string_to_metric_families

    samples = {s.name: s for family in text_string_to_metric_families(scrape.stdout) for s in family.samples}
    assert samples["tfmw_run_info"].labels["worker"] == "1" and samples["tfmw_run_info"].labels["role"] == "worker"
    assert samples["tfmw_total_steps"].value == DEPLOY_STEPS

    # make logs: follows both workers until the StatefulSet controller deletes them at scale-to-0.
    assert follower.wait(timeout=400) == 0, follower.proc.stderr.read()
    logs = follower.text
    for worker in (0, 1):
        last = f"tfmw progress step={DEPLOY_STEPS}/{DEPLOY_STEPS}"
        assert f"[pod/{release}-tf-multiworker-{worker}/worker] {last}" in logs, logs[-3000:]
    assert f"tfmw completed run={release}" in logs

    # make status: phase, step, loss and reason come from the status ConfigMap, not the logs.
    wait_for(
        lambda: status_data(cluster, namespace, release).get("phase") == "Succeeded",
        120,
        "the run to be recorded Succeeded",
    )
    wait_for(lambda: not cluster.workers(namespace, release), 120, "the workers to be gone after scale-to-0")
    data = status_data(cluster, namespace, release)
    status = tfmw(cluster, "status", "--namespace", namespace, "--release", release)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.strip().splitlines()
    assert len(lines) == 1, status.stdout  # the release line; no worker pods are left
    assert lines[0].startswith(
        f"release {release} in namespace {namespace}: revision 1 deployed, chart tf-multiworker-"
    )
    assert f"run {release} Succeeded, step {DEPLOY_STEPS}/{DEPLOY_STEPS}, loss {data['loss']}" in lines[0]
    assert f"finished {data['finishedAt']}" in lines[0]
    assert lines[0].endswith(
        f"workers 0/2: StatefulSet {release}-tf-multiworker scaled to 0 after the run "
        "Succeeded (pods and GPUs released)"
    )
    assert "goodput " in lines[0] and "(badput: " in lines[0]  # the chief's time account
    # make logs after scale-to-0: the logs the workers kept on the shared claim, read by a
    # short-lived pod, each line prefixed with its worker; the reader pod is gone after.
    after = tfmw(cluster, "logs", "--namespace", namespace, "--release", release)
    assert after.returncode == 0, after.stdout + after.stderr
    head, *kept = after.stdout.splitlines()
    assert head.startswith("no worker pods to follow:") and head.endswith(
        f"their logs as the workers kept them (claim {release}-tf-multiworker-shared, /shared/{release}/logs, "
        "logs.keepMiB):"
    ), head
    for worker in (0, 1):
        assert any(
            line.startswith(f"[pod/{release}-tf-multiworker-{worker}] tfmw progress step={DEPLOY_STEPS}/")
            for line in kept
        ), kept[-20:]
    assert any(line.startswith(f"[pod/{release}-tf-multiworker-0] tfmw completed run={release}") for line in kept)
    wait_for(
        lambda: not [p for p in cluster.pods(namespace) if "-logs-" in p["metadata"]["name"]],
        60,
        "the log reader pod to be deleted",
    )

    undeploy = tfmw(cluster, "undeploy", "--namespace", namespace, "--release", release)
    assert undeploy.returncode == 0, undeploy.stderr
    assert f"uninstalled release {release} from namespace {namespace}" in undeploy.stdout
    assert f"kept: PersistentVolumeClaim {release}-tf-multiworker-shared" in undeploy.stdout
    assert not cluster.pods(namespace)
    assert helm_release(cluster, namespace, release).returncode != 0
    assert cluster.api.get_or_none(ns_path(namespace, "persistentvolumeclaims", f"{release}-tf-multiworker-shared"))

    # Measured, not asserted (docs/operations.md quotes a run): helm returning, first training step.
    first_step = follower.first("tfmw progress step=")
    print(
        f"\nmeasured: tfmw deploy (helm install + wait for 2 ready workers) {deployed - started:.1f}s; "
        f"install start -> first training step logged {first_step - started:.1f}s"
        if first_step
        else ""
    )


# ---------------------------------------------------------------- Helm 3, and runs that end during the wait


def test_helm3_deploy_status_diff_and_undeploy(cluster, namespace):
    """The same verbs through pyhelm3 over Helm 3: status while the run is under way, a diff of a
    new run id against the recorded manifest, an upgrade, and undeploy."""
    release = "h3"
    deploy = tfmw(
        cluster,
        "deploy",
        "--env",
        "local",
        "--namespace",
        namespace,
        "--release",
        release,
        "--timeout",
        "2m",
        helm="helm3",
        sets=SLEEPER,
    )
    assert deploy.returncode == 0, deploy.stdout + deploy.stderr
    assert "helm 3: installing h3" in deploy.stdout
    wait_for(
        lambda: status_data(cluster, namespace, release).get("phase") == "Running",
        60,
        "the chief to record the run Running",
    )
    status = tfmw(cluster, "status", "--namespace", namespace, "--release", release, helm="helm3")
    assert status.returncode == 0, status.stderr
    lines = status.stdout.strip().splitlines()
    # the release, one line per worker, and the image digest the group runs (deploy recorded it)
    assert len(lines) == 4, status.stdout
    assert f"run {release} Running" in lines[0] and lines[0].endswith("workers 2/2 ready")
    nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in cluster.workers(namespace, release)}
    assert (
        lines[1] == f"worker {release}-tf-multiworker-0: Running, ready, 0 restarts, "
        f"node {nodes[f'{release}-tf-multiworker-0']}"
    )
    assert (
        lines[2] == f"worker {release}-tf-multiworker-1: Running, ready, 0 restarts, "
        f"node {nodes[f'{release}-tf-multiworker-1']}"
    )
    assert lines[3].startswith("image sha256:") and lines[3].endswith(" on 2/2 workers"), status.stdout

    diff = tfmw(
        cluster,
        "diff",
        "--env",
        "local",
        "--namespace",
        namespace,
        "--release",
        release,
        helm="helm3",
        sets=[*SLEEPER, "training.runId=second"],
    )
    assert diff.returncode == 0, diff.stderr
    assert f"deployed: StatefulSet {namespace}/{release}-tf-multiworker" in diff.stdout
    assert "+          value: second" in diff.stdout or "+        value: second" in diff.stdout, diff.stdout
    same = tfmw(
        cluster, "diff", "--env", "local", "--namespace", namespace, "--release", release, helm="helm3", sets=SLEEPER
    )
    # diff renders offline, so the API server's addresses the install found by lookup (the workers'
    # egress rule) are the one difference it shows for the same values (docs/operations.md)
    changed = [line for line in same.stdout.splitlines() if line.startswith("--- deployed: ")]
    assert changed == [f"--- deployed: NetworkPolicy {namespace}/{release}-tf-multiworker-workers"], same.stdout
    assert "-        cidr: " in same.stdout and "+        cidr: " not in same.stdout, same.stdout

    upgrade = tfmw(
        cluster,
        "deploy",
        "--env",
        "local",
        "--namespace",
        namespace,
        "--release",
        release,
        "--timeout",
        "2m",
        helm="helm3",
        sets=[*SLEEPER, "training.runId=second"],
    )
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
    assert f"upgrading {release} from revision 1" in upgrade.stdout and "revision 2, deployed" in upgrade.stdout

    undeploy = tfmw(cluster, "undeploy", "--namespace", namespace, "--release", release, helm="helm3")
    assert undeploy.returncode == 0, undeploy.stderr
    wait_for(lambda: not cluster.pods(namespace), 60, "no pods after undeploy")
    again = tfmw(cluster, "undeploy", "--namespace", namespace, "--release", release, helm="helm3")
    assert again.returncode == 0 and "nothing to do" in again.stdout


@pytest.mark.parametrize("helm", ["helm4", "helm3"])
def test_a_run_that_ends_during_the_wait_is_deployed_not_rolled_back(cluster, namespace, helm):
    """A run that Succeeds at once scales its StatefulSet to 0 while helm waits for the workers,
    and a redeploy of the finished run asks for no workers at all (the chart reads the recorded
    Succeeded): neither is a failed deploy, nothing is rolled back, and `make status` still says
    why there are no workers."""
    release = f"end-{helm}"
    for revision in (1, 2):
        deploy = tfmw(
            cluster,
            "deploy",
            "--env",
            "local",
            "--namespace",
            namespace,
            "--release",
            release,
            "--timeout",
            "90s",
            "--poll-seconds",
            "0.5",
            helm=helm,
            sets=[FINISH_AT_ONCE],
        )
        assert deploy.returncode == 0, deploy.stdout + deploy.stderr
        assert f"revision {revision}, deployed" in deploy.stdout
        wait_for(
            lambda: status_data(cluster, namespace, release).get("phase") == "Succeeded",
            60,
            "the run to be recorded Succeeded",
        )
        wait_for(lambda: replicas(cluster, namespace, release) == 0, 60, "the workers to scale to 0")
    history = cluster.helm("history", release, "-n", namespace, helm="helm" if helm == "helm4" else "helm3")
    assert "rolled back" not in history.stdout.lower() and "failed" not in history.stdout.lower(), history.stdout
    status = tfmw(cluster, "status", "--namespace", namespace, "--release", release, helm=helm)
    assert f"run {release} Succeeded" in status.stdout and "scaled to 0 after the run Succeeded" in status.stdout


def test_deploying_a_run_that_failed_under_the_same_template_reports_it_and_exits_3(cluster, namespace):
    """The training command refuses its configuration (exit 2: BadConfig): the run is Failed and
    scaled to 0. Deploying the same values again changes no pod template, so the run stays
    Failed: deploy says so, with the reason, and exits 3 (the release itself is deployed)."""
    release = "bad-run"
    refuse = "training.command={python,-c,import sys; sys.exit(2)}"
    first = tfmw(
        cluster,
        "deploy",
        "--env",
        "local",
        "--namespace",
        namespace,
        "--release",
        release,
        "--timeout",
        "90s",
        sets=[refuse],
    )
    assert first.returncode in (0, 3), first.stdout + first.stderr  # whether helm or the chief was first
    wait_for(
        lambda: status_data(cluster, namespace, release).get("phase") == "Failed", 60, "the run to be recorded Failed"
    )
    wait_for(lambda: replicas(cluster, namespace, release) == 0, 60, "the workers to scale to 0")
    again = tfmw(
        cluster,
        "deploy",
        "--env",
        "local",
        "--namespace",
        namespace,
        "--release",
        release,
        "--timeout",
        "90s",
        sets=[refuse],
    )
    one_line_error(
        again,
        "deploy",
        f"release {release} revision 2 is deployed, but run {release} Failed (BadConfig",
        "It does not train again with this pod template: fix the cause and `make retry`",
    )
    assert again.returncode == 3
    assert "revision 2, deployed" in again.stdout


# ---------------------------------------------------------------- faults, each one line


def closed_port(address: str) -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


def test_deploy_with_the_api_server_down_fails_before_touching_anything(cluster, tmp_path):
    """What `make deploy` meets after `make cluster-down` or with the API server stopped: the
    cluster's own kubeconfig, nothing listening at its address (a closed port on the bridge)."""
    port = closed_port(cluster.state.address)
    server = f"https://{cluster.state.address}:{port}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(cluster.kubeconfig.read_text().replace(cluster.state.server, server))
    name = fresh_namespace_name("down")
    proc = tfmw(cluster, "deploy", "--env", "local", "--namespace", name, env={"KUBECONFIG": str(kubeconfig)})
    one_line_error(
        proc,
        "deploy",
        f"cluster unreachable (kube context 'tfmw-local', server {server})",
        "onnection refused",  # helm says "connection refused", the API client "Connection refused"
        "is the local cluster running? `make cluster` starts it",
    )
    assert proc.returncode == 3
    assert "validated against" in proc.stdout  # the values were checked first
    assert cluster.api.get_or_none(f"/api/v1/namespaces/{name}") is None


def test_a_missing_kube_context_is_named(cluster):
    proc = tfmw(cluster, "deploy", "--env", "local", "--kube-context", "nope")
    one_line_error(proc, "deploy", "kube context 'nope' does not exist in KUBECONFIG=", "(its contexts are tfmw-local)")
    assert proc.returncode == 3


def test_a_namespace_that_does_not_exist(cluster):
    """status / logs / undeploy say the namespace does not exist (exit 3); diff says deploy would
    create it (deploy does, with --create-namespace)."""
    name = fresh_namespace_name("nowhere")
    for command in (["status"], ["logs", "--no-follow"], ["undeploy"]):
        proc = tfmw(cluster, *command, "--namespace", name)
        one_line_error(proc, command[0], f"namespace {name} does not exist on kube context 'tfmw-local'")
        assert proc.returncode == 3
    diff = tfmw(cluster, "diff", "--env", "local", "--namespace", name)
    assert diff.returncode == 0, diff.stderr
    assert f"namespace {name} does not exist on kube context 'tfmw-local'" in diff.stdout
    assert "; deploy would create it and:\n" in diff.stdout
    assert f"\n  + StatefulSet {name}/tf-multiworker\n" in diff.stdout
    assert cluster.api.get_or_none(f"/api/v1/namespaces/{name}") is None


@pytest.mark.parametrize(
    "helm,sets,why",
    [
        ("helm4", ["workers.gpus=8", *GPU_MEMORY], "Insufficient nvidia.com/gpu"),
        ("helm3", ["workers.resources.requests.cpu=64", "workers.resources.limits.cpu=64"], "Insufficient cpu"),
    ],
)
def test_an_install_whose_pods_cannot_schedule_says_why_and_is_rolled_back(cluster, helm, sets, why):
    """A worker the scheduler refuses for UNSCHEDULABLE_GRACE (10 s here; no autoscaler adds a
    node) stops the deploy long before its --timeout of 10 minutes: the error quotes the
    scheduler, and says the install was uninstalled, that the shared claim is kept by policy and
    that the namespace it made is left."""
    name = fresh_namespace_name("unsched")
    try:
        started = time.monotonic()
        proc = tfmw(
            cluster,
            "deploy",
            "--env",
            "local",
            "--namespace",
            name,
            "--release",
            "big",
            "--timeout",
            "10m",
            "--unschedulable-grace",
            "10",
            helm=helm,
            sets=[*SLEEPER, *sets],
        )
        took = time.monotonic() - started
        line = one_line_error(
            proc,
            "deploy",
            "deploy stopped: worker pod big-tf-multiworker-0 could not be scheduled for ",
            f"0/2 nodes are available: 2 {why}",
            "no cluster autoscaler is adding a node for it",
            "the failed install was rolled back: release big was uninstalled",
            "kept by helm.sh/resource-policy: PersistentVolumeClaim big-tf-multiworker-shared",
            f"namespace {name}, created by this deploy, is left",
        )
        assert proc.returncode == 4, line
        assert took < 120, took  # seconds, not the 10 minutes of --timeout
        assert "(created now)" in proc.stdout
        # ... and that is what is there: no release, no pod, the claim and the namespace.
        assert helm_release(cluster, name, "big").returncode != 0
        wait_for(lambda: not cluster.pods(name), 60, "the rolled-back workers to go")
        claim = cluster.api.get_or_none(ns_path(name, "persistentvolumeclaims", "big-tf-multiworker-shared"))
        assert claim
        # "a later deploy reuses it": Helm adopts the kept claim (its ownership annotations match).
        again = tfmw(
            cluster,
            "deploy",
            "--env",
            "local",
            "--namespace",
            name,
            "--release",
            "big",
            "--timeout",
            "90s",
            helm=helm,
            sets=SLEEPER,
        )
        assert again.returncode == 0, again.stdout + again.stderr
        reused = cluster.api.get_or_none(ns_path(name, "persistentvolumeclaims", "big-tf-multiworker-shared"))
        assert reused["metadata"]["uid"] == claim["metadata"]["uid"]
    finally:
        delete_namespace_if_there(cluster, name)


# dev and staging as they are, but for what two 2-CPU nodes without GPUs can hold, and the image
# as the nodes hold it (imported: no registry to pull their tag Always from)
FITS_HERE = [
    *SLEEPER,
    "image.pullPolicy=IfNotPresent",
    "workers.gpus=0",
    "workers.nodeSelector=null",
    "workers.resources.requests.cpu=100m",
    "workers.resources.requests.memory=256Mi",
    "workers.resources.limits.cpu=1",
    "workers.resources.limits.memory=1Gi",
    "workers.shm.sizeLimit=64Mi",
    "storage.createClaim.size=1Gi",
    # The local cluster's CoreDNS runs on the host, not as the kube-dns pods the overlays' egress
    # allows: its range, as values/local.yaml (docs/security.md, "The API server's addresses")
    "networkPolicy.egress.dnsTo[0].ipBlock.cidr=198.19.0.0/16",
]


def test_dev_then_staging_are_two_releases_in_two_namespaces_neither_touching_the_other(cluster):
    """`make deploy ENV=dev`, then `ENV=staging`: each overlay's target names its own release and
    namespace (and so its own run id and claim); the second deploy leaves the first alone."""
    try:
        dev = tfmw(cluster, "deploy", "--env", "dev", "--timeout", "3m", sets=FITS_HERE)
        assert dev.returncode == 0, dev.stdout + dev.stderr
        assert "release tf-multiworker-dev in namespace tfmw-dev (from values/dev.yaml target)" in dev.stdout
        before = json.loads(helm_release(cluster, "tfmw-dev", "tf-multiworker-dev").stdout)
        # values/staging.yaml names its own kube context: here it goes to the local one on purpose
        staging = tfmw(cluster, "deploy", "--env", "staging", "--any-context", "--timeout", "3m", sets=FITS_HERE)
        assert staging.returncode == 0, staging.stdout + staging.stderr
        assert "installing tf-multiworker-staging in namespace tfmw-staging" in staging.stdout
        after = json.loads(helm_release(cluster, "tfmw-dev", "tf-multiworker-dev").stdout)
        assert after["version"] == before["version"] == 1 and after["info"]["status"] == "deployed"
        for ns, release in (("tfmw-dev", "tf-multiworker-dev"), ("tfmw-staging", "tf-multiworker-staging")):
            (sts,) = cluster.api.items(ns_path(ns, "statefulsets", group="apps/v1"))
            env = {e["name"]: e.get("value") for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
            assert sts["metadata"]["name"] == release and env["TFMW_RUN_ID"] == release
            claims = [c["metadata"]["name"] for c in cluster.api.items(ns_path(ns, "persistentvolumeclaims"))]
            assert claims == [f"{release}-shared"]
        status = tfmw(cluster, "status", "--env", "staging")
        assert status.returncode == 0 and "release tf-multiworker-staging in namespace tfmw-staging" in status.stdout
        refused = tfmw(cluster, "undeploy", "--env", "staging")
        assert refused.returncode == 2 and "meant for kube context 'staging'" in refused.stderr, refused.stderr
        for env, guard in (("dev", ()), ("staging", ("--any-context",))):
            gone = tfmw(cluster, "undeploy", "--env", env, *guard)
            assert gone.returncode == 0 and f"uninstalled release tf-multiworker-{env}" in gone.stdout, gone.stderr
    finally:
        for ns in ("tfmw-dev", "tfmw-staging"):
            delete_namespace_if_there(cluster, ns)


@pytest.mark.parametrize("helm", ["helm4", "helm3"])
def test_a_deploy_whose_image_the_nodes_cannot_get_stops_in_seconds_naming_it(cluster, namespace, helm):
    """An image that is on no node and may not be pulled (imagePullPolicy Never; no registry here):
    the first ErrImageNeverPull stops the deploy, helm cancels and rolls the install back, and the
    line names the image and the `make image` command that builds exactly that reference."""
    started = time.monotonic()
    proc = tfmw(
        cluster,
        "deploy",
        "--env",
        "local",
        "--namespace",
        namespace,
        "--release",
        "noimg",
        "--timeout",
        "10m",
        helm=helm,
        sets=[*SLEEPER, "image.tag=0.0.0-missing", "image.pullPolicy=Never"],
    )
    took = time.monotonic() - started
    line = one_line_error(
        proc,
        "deploy",
        "deploy stopped: worker pod noimg-tf-multiworker-",
        "cannot start: ErrImageNeverPull",
        "make image IMAGE=ghcr.io/tf-multiworker/tf-multiworker:0.0.0-missing VARIANT=cpu PUSH=1",
        "the failed install was rolled back: release noimg was uninstalled",
    )
    assert proc.returncode == 4 and took < 90, (took, line)
    assert helm_release(cluster, namespace, "noimg").returncode != 0


def test_an_upgrade_whose_pods_cannot_schedule_is_rolled_back_to_the_running_revision(cluster, namespace):
    release = "grow"
    first = tfmw(
        cluster,
        "deploy",
        "--env",
        "local",
        "--namespace",
        namespace,
        "--release",
        release,
        "--timeout",
        "90s",
        sets=SLEEPER,
    )
    assert first.returncode == 0, first.stdout + first.stderr
    proc = tfmw(
        cluster,
        "deploy",
        "--env",
        "local",
        "--namespace",
        namespace,
        "--release",
        release,
        # helm's rollback waits as long: for the workers to be Ready again, which means their
        # group runs again (the readinessProbe), some seconds after the pods are back
        "--timeout",
        "45s",
        sets=[*SLEEPER, "workers.gpus=8", *GPU_MEMORY],
    )
    one_line_error(
        proc,
        "deploy",
        "did not finish within --timeout 45s",
        "Pending: Unschedulable: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu",
        f"rolled back: release {release} is deployed again as revision 3, the configuration "
        "of revision 1 that ran before this deploy",
    )
    # The workers of revision 1 run again (the StatefulSet controller rolls the template back).
    wait_for(
        lambda: (
            len(
                [
                    p
                    for p in cluster.workers(namespace, release)
                    if p["status"].get("phase") == "Running"
                    and not p["metadata"].get("deletionTimestamp")
                    and "nvidia.com/gpu" not in str(p["spec"]["containers"][0].get("resources"))
                ]
            )
            == 2
        ),
        120,
        "both workers of the previous revision running again",
    )


@pytest.mark.parametrize("helm", ["helm4", "helm3"])
def test_a_value_the_schema_accepts_but_the_api_server_refuses(cluster, namespace, helm):
    """A node-affinity operator that is no operator (workers.affinity is Kubernetes' own type, and
    its schema has the operator as a plain string: values.schema.json and the Kubernetes schema
    pass), refused by the API server's validation. The line names the object, the field and the
    value to change."""
    sets = BOGUS_AFFINITY
    offline = tfmw(cluster, "template", "--env", "local", "--output", "/dev/null", sets=sets)
    assert offline.returncode == 0, offline.stderr  # it really does pass every offline check
    proc = tfmw(
        cluster,
        "deploy",
        "--env",
        "local",
        "--namespace",
        namespace,
        "--release",
        "bad",
        "--timeout",
        "60s",
        helm=helm,
        sets=sets,
    )
    one_line_error(
        proc,
        "deploy",
        "the API server refused StatefulSet bad-tf-multiworker: field spec.template.spec.affinity.nodeAffinity."
        "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator "
        '(values: workers.affinity): Invalid value: "Bogus": not a valid selector operator',
        "the failed install was rolled back: release bad was uninstalled",
    )
    assert proc.returncode == 2
    assert helm_release(cluster, namespace, "bad").returncode != 0


def test_a_refused_value_with_no_rollback_keeps_the_failed_release_and_says_so(cluster, namespace):
    proc = tfmw(
        cluster,
        "deploy",
        "--env",
        "local",
        "--namespace",
        namespace,
        "--release",
        "keep",
        "--timeout",
        "60s",
        "--no-rollback",
        sets=BOGUS_AFFINITY,
    )
    one_line_error(
        proc,
        "deploy",
        "the API server refused StatefulSet keep-tf-multiworker: field spec.template.spec.affinity.",
        '(values: workers.affinity): Invalid value: "Bogus": not a valid selector operator',
        "kept for debugging (--no-rollback): release keep revision 1 is failed",
    )
    status = helm_release(cluster, namespace, "keep")
    assert status.returncode == 0 and '"status":"failed"' in status.stdout.replace(" ", "")
    undeploy = tfmw(cluster, "undeploy", "--namespace", namespace, "--release", "keep")
    assert undeploy.returncode == 0, undeploy.stderr


def _claim(cluster, namespace: str, name: str, modes: list[str]) -> None:
    """A PersistentVolumeClaim left unbound (no class): what the chart looks up is the object."""
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": modes, "storageClassName": "", "resources": {"requests": {"storage": "1Gi"}}},
    }
    cluster.api.create(ns_path(namespace, "persistentvolumeclaims"), claim)


def _server_render(cluster, namespace: str, *sets: str) -> subprocess.CompletedProcess:
    """helm's render with its lookups answered by the API server, nothing applied."""
    argv = [HELMS["helm4"], "install", "claim", str(REPO / "charts" / "tf-multiworker"), "-n", namespace]
    argv += ["--dry-run=server", "--set", "storage.type=existingClaim", *[a for s in sets for a in ("--set", s)]]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=cluster.env())


def test_an_existing_claim_the_workers_cannot_share_is_refused_at_install(cluster, namespace):
    """The chart looks the claim up at install: a ReadWriteOnce claim with workers free to land
    on several nodes (they would stay in ContainerCreating, Multi-Attach, while the group waits
    out peers.timeoutSeconds), a ReadWriteOncePod one, and one that does not exist are refused
    before anything is applied; a ReadWriteMany claim, and a ReadWriteOnce one whose workers are
    pinned to one node, pass."""
    for name, modes in (("rwo", ["ReadWriteOnce"]), ("rwop", ["ReadWriteOncePod"]), ("rwx", ["ReadWriteMany"])):
        _claim(cluster, namespace, name, modes)
    proc = tfmw(
        cluster,
        "deploy",
        "--env",
        "local",
        "--namespace",
        namespace,
        "--release",
        "rwo",
        "--timeout",
        "60s",
        sets=["storage.type=existingClaim", "storage.existingClaim.claimName=rwo"],
    )
    one_line_error(
        proc,
        "deploy",
        "storage.existingClaim.claimName=rwo: the claim is ReadWriteOnce (accessModes [ReadWriteOnce]): its "
        "volume attaches to one node, and 2 pods (workers) on other nodes would stay in ContainerCreating "
        "(Multi-Attach)",
        "use a ReadWriteMany claim, or pin every worker to one node",
    )
    assert helm_release(cluster, namespace, "rwo").returncode != 0
    assert not cluster.api.items(ns_path(namespace, "statefulsets", group="apps/v1"))
    refusals = {
        "rwop": "storage.existingClaim.claimName=rwop: the claim is ReadWriteOncePod (accessModes "
        "[ReadWriteOncePod]): one pod may mount it, and 2 pods (workers) do",
        "absent": f"storage.existingClaim.claimName=absent: there is no PersistentVolumeClaim absent in namespace "
        f"{namespace}",
    }
    for name, says in refusals.items():
        render = _server_render(cluster, namespace, f"storage.existingClaim.claimName={name}")
        assert render.returncode != 0 and says in render.stderr, render.stderr
    for sets in (
        ["storage.existingClaim.claimName=rwx"],
        ["storage.existingClaim.claimName=rwo", "workers.nodeSelector.kubernetes\\.io/hostname=node-1"],
        ["storage.existingClaim.claimName=rwo", "workers.replicas=1"],
        ["storage.existingClaim.claimName=rwop", "workers.replicas=1"],
    ):
        render = _server_render(cluster, namespace, *sets)
        assert render.returncode == 0, (sets, render.stderr)
