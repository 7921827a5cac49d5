"""Worker-pod side of `tfmw deploy/status/logs`: what the run and its pods are doing, read
through the host's Kubernetes client (tfmw.k8s.Api).

Pure functions turn API objects (pods, Events, the worker StatefulSet, the run's status
ConfigMap, as the API serves them) and log text into the lines operators read: deploy
progress, why workers are not ready, the status lines, the run's outcome. The helpers that
read the cluster are near the end. The status ConfigMap's keys are the launcher's (entrypoint/lifecycle.py STATUS_KEYS);
log line formats are the contract in docs/contracts.md ("Log lines"), read only when a release
has no status object (API access off: completion.* = idle or rbac.create=false).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

from entrypoint import lifecycle, loglines
from entrypoint.goodput import Accounting
from entrypoint.lifecycle import Phase, Reason
from tfmw.chart.helmkit import ToolError
from tfmw.k8s.api import Api, ApiError, ns_path

# ---------------------------------------------------------------- workload identity


@dataclass(frozen=True)
class Workers:
    """The worker StatefulSet of a release, as rendered or as recorded by helm."""

    name: str
    namespace: str
    replicas: int
    selector: str  # label selector, "k=v,k2=v2"
    chart: str = "?"  # helm.sh/chart label, e.g. tf-multiworker-0.1.0
    run_id: str = ""  # TFMW_RUN_ID of the worker container: the run this revision trains
    status_configmap: str = ""  # TFMW_STATUS_CONFIGMAP: "" when the release records no status


def _worker_env(sts: dict) -> dict[str, str]:
    pod = ((sts.get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in pod.get("containers") or []:
        env = {e.get("name"): e.get("value") for e in container.get("env") or [] if "value" in e}
        if "TFMW_RUN_ID" in env or "TFMW_STATUS_CONFIGMAP" in env:
            return {k: str(v) for k, v in env.items() if v is not None}
    return {}


def worker_statefulset(objects: list[dict]) -> dict:
    """The worker StatefulSet among rendered/recorded objects."""
    sets = [o for o in objects if o.get("kind") == "StatefulSet"]
    if not sets:
        raise ToolError("the release has no StatefulSet of workers (is this a tf-multiworker release?)", exit_code=3)
    # The worker StatefulSet carries component=worker; fall back to the only one.
    workers = [
        o
        for o in sets
        if ((o.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component") == "worker"
    ]
    return (workers or sets)[0]


def workers_of(objects: list[dict], namespace: str) -> Workers:
    """Find the worker StatefulSet among rendered/recorded objects."""
    sts = worker_statefulset(objects)
    labels = ((sts.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    env = _worker_env(sts)
    return Workers(
        name=sts["metadata"]["name"],
        namespace=(sts.get("metadata") or {}).get("namespace") or namespace,
        replicas=int((sts.get("spec") or {}).get("replicas", 1)),
        selector=selector,
        chart=((sts.get("metadata") or {}).get("labels") or {}).get("helm.sh/chart", "?"),
        run_id=env.get("TFMW_RUN_ID", ""),
        status_configmap=env.get("TFMW_STATUS_CONFIGMAP", ""),
    )


# ---------------------------------------------------------------- pods


@dataclass(frozen=True)
class PodState:
    name: str
    phase: str
    scheduled: bool
    running: bool
    ready: bool
    restarts: int
    reason: str  # why it is not running/ready: a container's waiting/terminated reason
    #                   (CrashLoopBackOff, CreateContainerConfigError) or the scheduler's (Unschedulable)
    node: str = ""  # spec.nodeName ("" until scheduled)
    message: str = ""  # the message that goes with reason, e.g. "0/1 nodes are available: ..."
    hint: str = ""  # what to do about reason, when we know (a missing image)
    image_id: str = ""  # the worker container's image digest as the kubelet ran it ("" until started)


# The kubelet's reasons for an image it could not get onto the node.
IMAGE_REASONS = ("ErrImageNeverPull", "ImagePullBackOff", "ErrImagePull", "InvalidImageName")
# Reasons a worker pod cannot start that waiting does not cure: a deploy stops at the first.
START_FAILURES = (*IMAGE_REASONS, "CreateContainerConfigError")
# A pod's Events that say capacity is being added for it: cluster-autoscaler's and Karpenter's.
CAPACITY_COMING = ("TriggeredScaleUp", "Nominated")


def image_hint(reason: str, image: str, gpus: bool = True, message: str = "", pull_secrets: tuple = ()) -> str:
    """The fix for a worker image the nodes cannot get: the registry's refusal named (no or wrong
    credentials, a certificate the nodes do not trust), else the `make image` command that builds
    and pushes exactly that reference (the CPU variant for a pod without GPUs or a `-cpu` tag);
    on `make cluster` the image is imported instead (pure)."""
    if reason not in IMAGE_REASONS:
        return ""
    image = image or "?"
    registry = image.split("/", 1)[0] if "/" in image else "docker.io"
    if reason == "InvalidImageName":
        return f"{image} is not a valid image reference: fix image.repository / image.tag / image.digest"
    if re.search(r"\b401\b|unauthorized|authorization failed|authentication required", message, re.IGNORECASE):
        held = f"the pods' imagePullSecrets ({', '.join(pull_secrets)}) hold" if pull_secrets else "the pods have"
        return (
            f"the registry {registry} refused the pull (401 Unauthorized): {held} no credentials it accepts; "
            f"create one (`kubectl create secret docker-registry regcred --docker-server={registry} ...`) and set "
            "imagePullSecrets: [{name: regcred}]"
        )
    if re.search(r"x509|certificate signed by unknown authority|tls:", message):
        return (
            f"the nodes do not trust {registry}'s TLS certificate: add its CA to the nodes' container runtime "
            "(containerd: /etc/containerd/certs.d/<registry>/hosts.toml), or use a registry with a public one"
        )
    if "@" in image:
        build = f"push the image whose digest is {image.split('@', 1)[1]}, or fix image.digest"
    else:
        variant = " VARIANT=cpu" if not gpus or image.rpartition(":")[2].endswith("-cpu") else ""
        build = f"build and push it with `make image IMAGE={image}{variant} PUSH=1`"
    return (
        f"the nodes cannot get the image {image}: {build}, or set image.repository / image.tag to one they "
        "can pull (a private registry needs imagePullSecrets); on the local cluster: `make image` and "
        "`make cluster-load` (docs/image.md)"
    )


# The StatefulSet annotation `make deploy` records the workers' image digest in (image_line).
IMAGE_ANNOTATION = "tf-multiworker.io/image-id"


def worker_image_id(pod: dict) -> str:
    """The digest the kubelet started the pod's worker container (its first) from: the
    `sha256:...` of status.containerStatuses[].imageID, whose prefix varies by runtime
    (`docker-pullable://repo@sha256:...`, `repo@sha256:...`, or a bare image id); "" until it
    started (pure)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    name = containers[0].get("name") if containers else None
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        if c.get("name") == name:
            image_id = c.get("imageID") or ""
            return image_id.rpartition("@")[2] if "@" in image_id else image_id.rpartition("//")[2]
    return ""


def image_digests(pods: list[PodState]) -> dict[str, list[str]]:
    """digest -> the pods that run it, pods not started yet left out (pure)."""
    found: dict[str, list[str]] = {}
    for p in pods:
        if p.image_id:
            found.setdefault(p.image_id, []).append(p.name)
    return found


def image_record(pods: list[PodState]) -> str:
    """What the StatefulSet's IMAGE_ANNOTATION holds: the one digest, or for a split group
    `<digest>=<pod>,<pod> <digest>=<pod>` ("" when no worker started; pure)."""
    found = image_digests(pods)
    if len(found) <= 1:
        return next(iter(found), "")
    return " ".join(f"{d}={','.join(names)}" for d, names in sorted(found.items()))


def image_line(pods: list[PodState], replicas: int, recorded: str = "") -> str:
    """'image sha256:... on 2/2 workers', or which workers run which build when they differ
    (a tag that moved between two nodes' pulls: one group training two images); `recorded`,
    the StatefulSet's IMAGE_ANNOTATION, is named when the workers no longer match it (pure)."""
    found = image_digests(pods)
    if not found:
        line = "image: no worker started yet"
    elif len(found) == 1:
        digest, names = next(iter(found.items()))
        line = f"image {digest} on {len(names)}/{replicas} workers"
    else:
        parts = "; ".join(f"{', '.join(names)} run {d}" for d, names in sorted(found.items()))
        line = (
            f"image SPLIT: the workers run {len(found)} different images ({parts}): one group training different "
            "builds of a tag that moved; pin image.digest and redeploy"
        )
    if recorded and found and recorded != image_record(pods):
        line += f" (make deploy recorded {recorded})"
    return line


def _condition(pod: dict, kind: str) -> dict | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def _true(pod: dict, kind: str) -> bool:
    return (_condition(pod, kind) or {}).get("status") == "True"


def pod_state(pod: dict) -> PodState:
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    reason = message = image = ""
    for c in containers:
        state = c.get("state") or {}
        for key in ("waiting", "terminated"):
            if (state.get(key) or {}).get("reason"):
                reason, message = state[key]["reason"], state[key].get("message") or ""
                image = c.get("image") or ""
    scheduled = _condition(pod, "PodScheduled") or {}
    if not reason and scheduled.get("status") == "False" and scheduled.get("reason"):
        # The scheduler's verdict, e.g. Unschedulable: "0/1 nodes are available: 1 Insufficient ..."
        reason, message = scheduled["reason"], scheduled.get("message") or ""
    gates = [g.get("name", "") for g in (pod.get("spec") or {}).get("schedulingGates") or []]
    if reason == "SchedulingGated" and gates:
        # Kueue's admission gate: every worker waits until the whole group is admitted
        message = f"held by the scheduling gate{'s' if len(gates) > 1 else ''} {', '.join(gates)}" + (
            " until Kueue admits the whole group" if "kueue.x-k8s.io/admission" in gates else ""
        )
    gpus = any(
        "nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {})
        for c in (pod.get("spec") or {}).get("containers") or []
    )
    phase = status.get("phase", "Unknown")
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        phase = "Terminating"
    return PodState(
        name=(pod.get("metadata") or {}).get("name", "?"),
        phase=phase,
        scheduled=scheduled.get("status") == "True",
        running=phase == "Running",
        ready=_true(pod, "Ready"),
        restarts=sum(int(c.get("restartCount", 0)) for c in containers),
        reason=reason,
        node=(pod.get("spec") or {}).get("nodeName") or "",
        message=" ".join(message.split()),
        image_id=worker_image_id(pod),
        hint=image_hint(
            reason,
            image,
            gpus,
            message,
            tuple(s.get("name", "") for s in (pod.get("spec") or {}).get("imagePullSecrets") or []),
        ),
    )


def start_failure(
    pods: list[PodState], unschedulable_since: dict[str, float], now: float, grace: float, capacity_coming: set[str]
) -> str | None:
    """Why a deploy should stop waiting now (pure), or None: the first worker pod that cannot
    start (an image the nodes cannot get, a missing Secret or ConfigMap), or one the scheduler
    has refused for `grace` seconds (`unschedulable_since`: pod -> when first seen so) with no
    cluster autoscaler adding a node for it (`capacity_coming`: pods with such an Event). A pod
    gated by a queue (Kueue's SchedulingGated) waits its turn and is never a failure."""
    for p in pods:
        if p.phase == "Terminating":
            continue
        if p.reason in START_FAILURES:
            fix = p.hint or (
                "create the Secret or ConfigMap it names, or fix the value that names it (imagePullSecrets, "
                "storage.objectStore.existingSecret, workers.extraEnv valueFrom)"
            )
            return f"worker pod {p.name} cannot start: {p.reason}: {shorten(p.message, 300)}; {fix}"
    for p in pods:
        since = unschedulable_since.get(p.name)
        if p.reason == "Unschedulable" and since is not None and now - since >= grace and p.name not in capacity_coming:
            return (
                f"worker pod {p.name} could not be scheduled for {int(now - since)}s: {shorten(p.message, 300)}; "
                "no cluster autoscaler is adding a node for it: lower workers.resources / workers.gpus, fix "
                "workers.nodeSelector / workers.tolerations, or free capacity (UNSCHEDULABLE_GRACE=<seconds> "
                "waits longer)"
            )
    return None


def capacity_coming_for(events: list[dict], workers: Workers) -> set[str]:
    """The worker pods an autoscaler is adding capacity for, by their Events (pure)."""
    pods = set()
    for event in events:
        involved = event.get("involvedObject") or event.get("regarding") or {}
        if event.get("reason") in CAPACITY_COMING and _is_worker_object(involved, workers):
            pods.add(involved.get("name"))
    return pods


def shorten(text: str, limit: int = 240) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def pod_problems(pods: list[PodState]) -> list[str]:
    """Why pods are not ready, pods with the same reason and message grouped:
    ["w-0, w-1 Pending: Unschedulable: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu. ..."]."""
    groups: dict[tuple[str, str], list[str]] = {}
    for p in pods:
        if p.reason and not p.ready:
            text = p.reason + (f": {shorten(p.message)}" if p.message else "") + (f"; {p.hint}" if p.hint else "")
            groups.setdefault((p.phase, text), []).append(p.name)
    return [f"{', '.join(names)} {phase}: {text}" for (phase, text), names in groups.items()]


def progress_line(pods: list[PodState], replicas: int) -> str:
    """One deploy-progress line: how many of N workers are scheduled / running / ready."""
    live = [p for p in pods if p.phase != "Terminating"]
    scheduled = sum(p.scheduled for p in live)
    running = sum(p.running for p in live)
    ready = sum(p.ready for p in live)
    line = f"workers: {scheduled}/{replicas} scheduled, {running}/{replicas} running, {ready}/{replicas} ready"
    terminating = len(pods) - len(live)
    if terminating:
        line += f", {terminating} terminating"
    problems = pod_problems(live)
    return line + (f" ({'; '.join(problems)})" if problems else "")


# ---------------------------------------------------------------- Events: why workers are not there


def event_epoch(event: dict) -> float:
    """When an Event last happened (core/v1 lastTimestamp, else eventTime, else creation), as epoch seconds."""
    import calendar
    import time as _time

    stamp = (
        event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )
    try:
        return float(calendar.timegm(_time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return 0.0


def _is_worker_object(obj: dict, workers: Workers) -> bool:
    name = obj.get("name") or ""
    if obj.get("kind") == "StatefulSet":
        return name == workers.name
    tail = name[len(workers.name) + 1 :] if name.startswith(workers.name + "-") else ""
    return obj.get("kind") == "Pod" and tail.isdigit()


def worker_warnings(events: list[dict], workers: Workers, since: float = 0.0) -> list[str]:
    """The Warning Events about the worker StatefulSet and its pods since `since` (epoch seconds),
    the latest message of each (reason, message) with the objects it concerns:
    ["StatefulSet w cannot create pods: FailedCreate: ... violates PodSecurity ...",
     "w-0, w-1: FailedScheduling: 0/1 nodes are available: 1 Insufficient cpu. ..."]."""
    latest: dict[tuple[str, str], list[str]] = {}
    for event in sorted(events, key=event_epoch):
        involved = event.get("involvedObject") or event.get("regarding") or {}
        if event.get("type") != "Warning" or event_epoch(event) < since or not _is_worker_object(involved, workers):
            continue
        key = (event.get("reason") or "?", shorten(event.get("message") or event.get("note") or ""))
        names = latest.setdefault(key, [])
        if involved.get("name") not in names:
            names.append(involved["name"])
    lines = []
    for (reason, message), names in latest.items():
        who = f"StatefulSet {workers.name} cannot create pods" if names == [workers.name] else ", ".join(names)
        lines.append(f"{who}: {reason}: {message}")
    return lines


def not_ready_reasons(pods: list[PodState], events: list[dict], workers: Workers, since: float) -> list[str]:
    """Why the workers are not (all) ready, from the pods themselves and, for what the pods do
    not say (pods never created, or already deleted by a rollback), the Warning Events."""
    reasons = pod_problems([p for p in pods if p.phase != "Terminating"])
    explained = {p.name for p in pods if p.reason}
    for line in worker_warnings(events, workers, since):
        names = line.split(":", 1)[0].split(", ")
        if not set(names) <= explained:
            reasons.append(line)
    if not reasons:
        waiting = [p.name for p in pods if not p.ready and p.phase != "Terminating"]
        if waiting:
            reasons.append(f"{', '.join(waiting)} not ready yet (no reason reported)")
        else:
            missing = workers.replicas - len([p for p in pods if p.phase != "Terminating"])
            if missing > 0:
                reasons.append(f"{missing} of {workers.replicas} worker pods do not exist (no Warning Event says why)")
    return reasons


# ---------------------------------------------------------------- the run, from its status ConfigMap


@dataclass(frozen=True)
class RunRecord:
    """The run a status ConfigMap records, as `make status` shows it: entrypoint.lifecycle's
    RunState (the one reader of STATUS_KEYS, its phase a lifecycle.Phase), plus the evaluator's
    own keys."""

    state: lifecycle.RunState
    restarts_recorded: bool = False  # the record has a `restarts` value: shown, also when 0
    eval_step: str = ""  # the evaluator's latest result (evaluator.enabled; its own keys)
    eval_loss: str = ""
    eval_accuracy: str = ""

    @property
    def run_id(self) -> str:
        return self.state.run_id

    @property
    def phase(self) -> lifecycle.Phase:
        return self.state.phase

    @property
    def terminal(self) -> bool:
        return self.state.terminal


def run_record(configmap: dict | None) -> RunRecord | None:
    """The run recorded in a status ConfigMap, or None (no ConfigMap, or nothing readable recorded yet)."""
    data = (configmap or {}).get("data") or {}
    state = lifecycle.from_data(data)
    if state is None:
        return None
    return RunRecord(
        state,
        restarts_recorded=bool(data.get("restarts")),
        eval_step=str(data.get("evalStep") or ""),
        eval_loss=str(data.get("evalLoss") or ""),
        eval_accuracy=str(data.get("evalAccuracy") or ""),
    )


def current_record(record: RunRecord | None, workers: Workers) -> RunRecord | None:
    """The record if it is about the run this release trains (same run id), else None."""
    if record is None or (workers.run_id and record.run_id != workers.run_id):
        return None
    return record


def run_summary(record: RunRecord | None, workers: Workers) -> str:
    """'run r1 Running, step 20/40, loss 2.15, 0 restarts, checkpoint at step 20, started ...'."""
    run_id = workers.run_id or (record.run_id if record else "?")
    mine = current_record(record, workers)
    if mine is None:
        older = f" (the status still holds run {record.run_id}: {record.phase})" if record else ""
        return f"run {run_id} not recorded yet: worker 0 records it when it starts{older}"
    state = mine.state
    parts = [f"run {run_id} {mine.phase}"]
    if mine.phase is Phase.FAILED or (state.reason and state.reason != Reason.COMPLETED):
        parts[0] += f" ({state.reason or '?'}{': ' + shorten(state.message, 200) if state.message else ''})"
    elif state.message and (mine.phase in (Phase.RESTARTING, Phase.RESIZING) or "waiting for" in state.message):
        parts[0] += f" ({shorten(state.message, 200)})"
    if state.step is not None:
        parts.append(f"step {state.step}/{'?' if state.total_steps is None else state.total_steps}")
    if state.loss:
        parts.append(f"loss {state.loss}")
    if mine.restarts_recorded:
        parts.append(f"{state.restarts} restart{'' if state.restarts == 1 else 's'}")
    if state.last_checkpoint_step is not None:
        parts.append(f"checkpoint at step {state.last_checkpoint_step}")
    if mine.eval_step:
        parts.append(
            f"eval at step {mine.eval_step}: accuracy {mine.eval_accuracy or '?'}, loss {mine.eval_loss or '?'}"
        )
    account = Accounting.from_fields(state.productive_seconds, state.badput_seconds)
    if account is not None and account.goodput is not None:
        parts.append(account.summary())  # 'goodput 87.3% of 120.4s (badput: restart 9.8s, ...)'
    if state.started_at:
        parts.append(f"started {state.started_at}")
    if state.finished_at:
        parts.append(f"finished {state.finished_at}")
    return ", ".join(parts)


def workers_summary(workers: Workers, statefulset: dict | None, record: RunRecord | None) -> str:
    """'workers 2/2 ready', or why there are none: the StatefulSet scaled to 0 after the run ended."""
    if statefulset is None:
        return f"StatefulSet {workers.name} does not exist"
    spec = int((statefulset.get("spec") or {}).get("replicas", 1))
    ready = int((statefulset.get("status") or {}).get("readyReplicas") or 0)
    mine = current_record(record, workers) if spec == 0 else None
    ended = mine is not None and mine.terminal
    # The release asks for workers and has none, or (a revision rendered after the run Succeeded,
    # templates/_replicas.tpl) asks for none because the run has ended.
    if spec == 0 and (workers.replicas > 0 or ended):
        why = (
            f" after the run {mine.phase} (pods and GPUs released)"
            if ended
            else " (not by this run's workers: check `kubectl get events`)"
        )
        asked = f"{ready}/{workers.replicas}" if workers.replicas else f"{ready}"
        return f"workers {asked}: StatefulSet {workers.name} scaled to 0{why}"
    return f"workers {ready}/{spec} ready"


def run_failed_here(record: RunRecord | None, workers: Workers, statefulset: dict | None) -> bool:
    """True when the run this release trains is recorded Failed under the StatefulSet's current pod
    template (not a previous attempt a changed template is retrying)."""
    mine = current_record(record, workers)
    if mine is None or mine.phase is not Phase.FAILED:
        return False
    update = ((statefulset or {}).get("status") or {}).get("updateRevision") or ""
    return not mine.state.revision or not update or mine.state.revision == update


# ---------------------------------------------------------------- training progress in logs


def last_progress(log_text: str) -> str | None:
    """The fields of the last `tfmw progress ...` line, e.g. 'step=40/100 epoch=1 loss=0.52 ...'."""
    found = loglines.find(log_text.splitlines(), loglines.PROGRESS, prefixed=True)
    return found[-1].text.strip() if found else None


def completion(log_text: str) -> str | None:
    """'completed run=...' / 'done steps=...' when this worker's log says training finished
    (the launcher's `tfmw completed` or the built-in trainer's `tfmw done`, whichever is last)."""
    ended = [
        p
        for p in (loglines.parse(line, prefixed=True) for line in log_text.splitlines())
        if p is not None and p.kind in (loglines.COMPLETED, loglines.DONE)
    ]
    return f"{ended[-1].kind} {ended[-1].text.strip()}".strip() if ended else None


@dataclass(frozen=True)
class WorkerReport:
    pod: PodState
    progress: str | None = None  # from its log: only when the release records no status
    finished: str | None = None


def logs_summary(reports: list[WorkerReport], replicas: int) -> str:
    """The run's state read from worker logs (releases without a status object)."""
    where = "run (from the worker logs: this release records no status)"
    finished = [r for r in reports if r.finished]
    if finished:
        return f"{where}: completed ({finished[0].pod.name}: {shorten(finished[0].finished, 200)})"
    progressing = [r for r in reports if r.progress]
    if progressing:
        return (
            f"{where}: running, {len(progressing)}/{replicas} workers reported progress, "
            f"{progressing[0].pod.name}: {progressing[0].progress}"
        )
    return f"{where}: not started yet (no progress lines in the worker logs)"


def worker_line(report: WorkerReport) -> str:
    """'worker w-0: Running, ready, 0 restarts, node node-1' (+ why not, + last log progress)."""
    p = report.pod
    why = (
        (f" ({p.reason}{': ' + shorten(p.message, 200) if p.message else ''}{'; ' + p.hint if p.hint else ''})")
        if p.reason and not p.ready
        else ""
    )
    line = (
        f"worker {p.name}: {p.phase}{why}, {'ready' if p.ready else 'not ready'}, "
        f"{p.restarts} restart{'' if p.restarts == 1 else 's'}, node {p.node or '-'}"
    )
    shown = report.finished or report.progress
    return line + (f", last log: {shorten(shown, 200)}" if shown else "")


@dataclass(frozen=True)
class ReleaseInfo:
    name: str
    namespace: str
    revision: int
    state: str  # helm's: deployed, failed, pending-upgrade, ...


def status_lines(
    release: ReleaseInfo,
    workers: Workers,
    statefulset: dict | None,
    status_object: dict | None,
    reports: list[WorkerReport],
) -> list[str]:
    """The `make status` text: one line for the release (helm revision, the run's phase / step /
    loss / reason, the workers), one per worker pod (phase, ready, restarts, node).

    status_object: the release's status ConfigMap, or None when the release records no status
    (then the run's state comes from the reports' log progress)."""
    if status_object is not None:
        record = run_record(status_object)
        run = run_summary(record, workers)
    else:
        record = None
        run = logs_summary(reports, workers.replicas)
    head = (
        f"release {release.name} in namespace {release.namespace}: revision {release.revision} "
        f"{release.state}, chart {workers.chart}; {run}; {workers_summary(workers, statefulset, record)}"
    )
    pods = [r.pod for r in reports]
    # Last, once a worker started: which build the group runs (or that it runs several).
    recorded = (((statefulset or {}).get("metadata") or {}).get("annotations") or {}).get(IMAGE_ANNOTATION, "")
    image = [image_line(pods, workers.replicas, recorded)] if image_digests(pods) else []
    return [head] + worker_lines(reports, workers) + image


# Up to this many workers, a line each; a bigger group is summed up in one line, then the chief
# and the workers that are not running and ready or have restarted, at most this many of them.
WORKER_LINES_AT_MOST = 16


def worker_lines(reports: list[WorkerReport], workers: Workers) -> list[str]:
    """`make status`'s lines for the workers (pure): one each for a small group; for a big one a
    line that counts them by state and node, then only the lines worth reading (the chief, and
    the workers that are not running and ready or have restarted), so 1,024 workers are a
    screen, not 1,024 lines."""
    if len(reports) <= WORKER_LINES_AT_MOST:
        return [worker_line(r) for r in reports]
    fine = {id(r) for r in reports if r.pod.running and r.pod.ready and not r.pod.restarts}
    nodes = len({r.pod.node for r in reports if r.pod.node})
    restarted = sum(1 for r in reports if r.pod.restarts)
    not_ready = sum(1 for r in reports if not (r.pod.running and r.pod.ready))
    summary = (
        f"workers: {len(reports):,} pods on {nodes:,} node{'' if nodes == 1 else 's'}: {len(fine):,} running and "
        f"ready with no restart, {not_ready:,} not running or not ready, {restarted:,} restarted"
    )
    chief, rest = reports[0], [r for r in reports[1:] if id(r) not in fine]
    shown = rest[:WORKER_LINES_AT_MOST]
    lines = [summary, worker_line(chief)] + [worker_line(r) for r in shown]
    if len(rest) > len(shown):
        lines.append(
            f"... and {len(rest) - len(shown):,} more not running, not ready or restarted: "
            f"kubectl get pods -n {workers.namespace} -l {workers.selector}"
        )
    return lines


# ---------------------------------------------------------------- reading the cluster (tfmw.k8s.Api)

# kind (as in a "kind/name" ref) -> (API group/version, resource)
_RESOURCES = {
    "pod": ("", "pods"),
    "configmap": ("", "configmaps"),
    "persistentvolumeclaim": ("", "persistentvolumeclaims"),
    "statefulset": ("apps/v1", "statefulsets"),
}


def pod_ordinal(pod: dict) -> int:
    """A StatefulSet pod's ordinal from its name; other pods sort last (pure)."""
    tail = pod["metadata"]["name"].rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 1 << 30


def list_pods(api: Api, workers: Workers) -> list[dict]:
    """Worker pods (raw JSON items), sorted by ordinal; ApiError when they cannot be listed."""
    items = api.items(ns_path(workers.namespace, "pods"), labelSelector=workers.selector)
    return sorted(items, key=pod_ordinal)


def pod_log(api: Api, namespace: str, pod: str, tail: int = 2000) -> str:
    """The current container's last `tail` log lines ("" if there is no log yet)."""
    try:
        return api.log(namespace, pod, tail=tail)
    except ApiError:
        return ""


def get_objects(api: Api, namespace: str, refs: list[str]) -> dict[str, dict]:
    """The named objects ("statefulset/x", "configmap/y") that exist, keyed by their ref."""
    found = {}
    for ref in refs:
        kind, _, name = (ref or "").partition("/")
        if not name:
            continue
        group, resource = _RESOURCES[kind]
        obj = api.get_or_none(ns_path(namespace, resource, name, group=group))
        if obj is not None:
            found[ref] = obj
    return found


def list_events(api: Api, namespace: str) -> list[dict]:
    """The namespace's core/v1 Events (raw items)."""
    return api.items(ns_path(namespace, "events"))


def namespace_exists(api: Api, namespace: str) -> bool | None:
    """Whether the namespace exists; None when that cannot be told (no permission to read
    namespaces, or the API did not answer): callers then carry on as if it did."""
    try:
        api.get(f"/api/v1/namespaces/{namespace}")
    except ApiError as err:
        return False if err.status == 404 else None
    return True


def follow_logs(api: Api, pods: list[dict], *, follow: bool, tail: int, out) -> int:
    """Every pod's log (each container), each line prefixed with [pod/<name>/<container>], as
    `kubectl logs --prefix` does; followed until every container stops (a broken stream ends
    that pod's follow only). Lines go to `out` whole, one at a time. 0, or 1 when a pod's log
    could not be read at all."""
    lock, failed = threading.Lock(), []

    def emit(line: str) -> None:
        with lock:
            out(line)

    def one(namespace: str, name: str, container: str) -> None:
        prefix = f"[pod/{name}/{container}] "
        try:
            if follow:
                for line in api.follow_log(namespace, name, container=container, tail=tail):
                    emit(prefix + line)
            else:
                for line in api.log(namespace, name, container=container, tail=tail).splitlines():
                    emit(prefix + line)
        except ApiError as err:
            failed.append(f"{name}/{container}: {err}")

    threads = [
        threading.Thread(target=one, args=(p["metadata"]["namespace"], p["metadata"]["name"], c["name"]), daemon=True)
        for p in pods
        for c in (p.get("spec") or {}).get("containers") or []
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.5)  # short joins: Ctrl-C reaches the main thread
    for why in failed:
        emit(f"error: cannot read the log of {why}")
    return 1 if failed else 0


# ---------------------------------------------------------------- a finished run's kept logs

LOG_READER_COMPONENT = "logs-reader"


def log_reader_pod(sts: dict, name: str) -> tuple[dict | None, str]:
    """(a Pod that prints the logs the workers kept on shared storage, where they are) from the
    worker StatefulSet's own pod template: its image, security contexts, node selection and
    shared claim (mounted read-only), running `python -m entrypoint logs <shared>/<runId>`.
    (None, why) when the run keeps no logs there (pure)."""
    template = (sts.get("spec") or {}).get("template") or {}
    spec = template.get("spec") or {}
    containers = spec.get("containers") or []
    if not containers:
        return None, "the StatefulSet has no container"
    container = containers[0]
    env = {e.get("name"): e.get("value") for e in container.get("env") or [] if "value" in e}
    shared, run_id = env.get("TFMW_SHARED_DIR") or "", env.get("TFMW_RUN_ID") or "default"
    if not env.get("TFMW_KEEP_LOG_MIB") or env.get("TFMW_KEEP_LOG_MIB") == "0":
        return None, "the release keeps no logs on shared storage (logs.keepMiB is 0, or storage.type is not a claim)"
    mount = next((m for m in container.get("volumeMounts") or [] if m.get("mountPath") == shared), None)
    volume = next((v for v in spec.get("volumes") or [] if mount and v.get("name") == mount.get("name")), None)
    if volume is None or "persistentVolumeClaim" not in volume:
        return None, f"the shared storage at {shared or '?'} is not a PersistentVolumeClaim"
    claim = volume["persistentVolumeClaim"]["claimName"]
    labels = {
        k: v
        for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()
        if k in ("app.kubernetes.io/name", "app.kubernetes.io/instance")
    }
    pod_spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [
            {
                "name": "logs",
                "image": container.get("image"),
                "imagePullPolicy": container.get("imagePullPolicy", "IfNotPresent"),
                "command": ["python", "-m", "entrypoint", "logs", f"{shared.rstrip('/')}/{run_id}"],
                "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}},
                "volumeMounts": [
                    {**{k: v for k, v in mount.items() if k in ("name", "mountPath", "subPath")}, "readOnly": True}
                ],
            }
        ],
        "volumes": [{"name": volume["name"], "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}],
    }
    if container.get("securityContext"):
        pod_spec["containers"][0]["securityContext"] = container["securityContext"]
    for key in ("securityContext", "nodeSelector", "tolerations", "imagePullSecrets"):
        if spec.get(key):
            pod_spec[key] = spec[key]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {**labels, "app.kubernetes.io/component": LOG_READER_COMPONENT}},
        "spec": pod_spec,
    }
    return pod, f"claim {claim}, {shared.rstrip('/')}/{run_id}/logs"
