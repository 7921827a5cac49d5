"""Worker-pod side of `tfmw deploy/status/logs`: what the pods are doing, read with kubectl.

Pure functions turn `kubectl get pods -o json` items and log text into the lines operators read
(deploy progress, status table, completion); the `kubectl_*` helpers run kubectl.
Log line formats are the contract in docs/contracts.md ("Log lines").
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass

from scripts.render import REPO, ToolError, find_tool

PINNED_KUBECTL = REPO / ".tools" / "bin" / "kubectl"
PROGRESS = re.compile(r"\btfmw progress (?P<fields>.*)$")
COMPLETED = re.compile(r"\btfmw completed\b(?P<fields>.*)$")
DONE = re.compile(r"\btfmw done\b(?P<fields>.*)$")


def find_kubectl(kubectl: str | None = None) -> str:
    """kubectl to use: argument, else $KUBECTL, else the pinned one, else PATH."""
    return find_tool("kubectl", kubectl, PINNED_KUBECTL)


# ---------------------------------------------------------------- workload identity

@dataclass(frozen=True)
class Workers:
    """The worker StatefulSet of a release, as rendered or as recorded by helm."""
    name: str
    namespace: str
    replicas: int
    selector: str   # label selector, "k=v,k2=v2"
    chart: str = "?"  # helm.sh/chart label, e.g. tf-multiworker-0.1.0


def workers_of(objects: list[dict], namespace: str) -> Workers:
    """Find the worker StatefulSet among rendered/recorded objects."""
    sets = [o for o in objects if o.get("kind") == "StatefulSet"]
    if not sets:
        raise ToolError("the release has no StatefulSet of workers (is this a tf-multiworker release?)",
                        exit_code=3)
    # The worker StatefulSet carries component=worker; fall back to the only one.
    workers = [o for o in sets if ((o.get("metadata") or {}).get("labels") or {})
               .get("app.kubernetes.io/component") == "worker"]
    sts = (workers or sets)[0]
    labels = ((sts.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return Workers(name=sts["metadata"]["name"],
                   namespace=(sts.get("metadata") or {}).get("namespace") or namespace,
                   replicas=int((sts.get("spec") or {}).get("replicas", 1)),
                   selector=selector,
                   chart=((sts.get("metadata") or {}).get("labels") or {}).get("helm.sh/chart", "?"))


# ---------------------------------------------------------------- pods

@dataclass(frozen=True)
class PodState:
    name: str
    phase: str
    scheduled: bool
    running: bool
    ready: bool
    restarts: int
    reason: str     # waiting/terminated reason of a container, e.g. CrashLoopBackOff, or ""


def _condition(pod: dict, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def pod_state(pod: dict) -> PodState:
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    reason = ""
    for c in containers:
        state = c.get("state") or {}
        for key in ("waiting", "terminated"):
            if state.get(key, {}).get("reason"):
                reason = state[key]["reason"]
    phase = status.get("phase", "Unknown")
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        phase = "Terminating"
    return PodState(
        name=(pod.get("metadata") or {}).get("name", "?"),
        phase=phase,
        scheduled=_condition(pod, "PodScheduled"),
        running=phase == "Running",
        ready=_condition(pod, "Ready"),
        restarts=sum(int(c.get("restartCount", 0)) for c in containers),
        reason=reason,
    )


def progress_line(pods: list[PodState], replicas: int) -> str:
    """One deploy-progress line: how many of N workers are scheduled / running / ready."""
    scheduled = sum(p.scheduled for p in pods)
    running = sum(p.running for p in pods)
    ready = sum(p.ready for p in pods)
    problems = sorted({f"{p.name}: {p.reason}" for p in pods if p.reason and not p.ready})
    line = (f"workers: {scheduled}/{replicas} scheduled, {running}/{replicas} running, "
            f"{ready}/{replicas} ready")
    return line + (f" ({'; '.join(problems)})" if problems else "")


# ---------------------------------------------------------------- training progress in logs

def last_progress(log_text: str) -> str | None:
    """The fields of the last `tfmw progress ...` line, e.g. 'step=40/100 epoch=1 loss=0.52 ...'."""
    found = None
    for line in log_text.splitlines():
        match = PROGRESS.search(line)
        if match:
            found = match.group("fields").strip()
    return found


def completion(log_text: str) -> str | None:
    """'completed run=...' / 'done steps=...' when this worker's log says training finished."""
    found = None
    for line in log_text.splitlines():
        for word, pattern in (("completed", COMPLETED), ("done", DONE)):
            match = pattern.search(line)
            if match:
                found = f"{word} {match.group('fields').strip()}".strip()
    return found


@dataclass(frozen=True)
class WorkerReport:
    pod: PodState
    progress: str | None
    finished: str | None


def status_lines(release: str, namespace: str, revision: int, state: str, chart: str,
                 replicas: int, reports: list[WorkerReport]) -> list[str]:
    """The `make status` text: release line, one line per worker, and the job verdict."""
    lines = [f"release {release} (namespace {namespace}): revision {revision}, {state}, chart {chart}"]
    width = max([len(r.pod.name) for r in reports] + [6])
    lines.append(f"{'worker':<{width}}  {'phase':<11} {'ready':<5} {'restarts':>8}  last progress")
    for r in reports:
        phase = r.pod.phase + (f" ({r.pod.reason})" if r.pod.reason and not r.pod.ready else "")
        progress = r.finished or r.progress or "-"
        lines.append(f"{r.pod.name:<{width}}  {phase:<11} {'yes' if r.pod.ready else 'no':<5} "
                     f"{r.pod.restarts:>8}  {progress}")
    missing = replicas - len(reports)
    if missing > 0:
        lines.append(f"({missing} of {replicas} worker pods do not exist yet)")
    finished = [r for r in reports if r.finished]
    if finished:
        lines.append(f"training: completed ({finished[0].pod.name}: {finished[0].finished})")
    elif any(r.progress for r in reports):
        lines.append(f"training: running ({sum(bool(r.progress) for r in reports)}/{replicas} "
                     "workers reported progress)")
    else:
        lines.append("training: not started yet (no progress lines in the worker logs)")
    return lines


# ---------------------------------------------------------------- kubectl

def kubectl_base(kubectl: str, context: str | None) -> list[str]:
    return [kubectl] + (["--context", context] if context else [])


def list_pods(kubectl: str, context: str | None, workers: Workers) -> list[dict]:
    """Worker pods (raw JSON items), sorted by ordinal; raises the kubectl error as one line."""
    cmd = kubectl_base(kubectl, context) + ["get", "pods", "--namespace", workers.namespace,
                                            "--selector", workers.selector, "--output", "json",
                                            "--request-timeout=20s"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd, proc.stdout, proc.stderr)
    items = json.loads(proc.stdout).get("items", [])

    def ordinal(pod: dict) -> int:
        tail = pod["metadata"]["name"].rsplit("-", 1)[-1]
        return int(tail) if tail.isdigit() else 1 << 30
    return sorted(items, key=ordinal)


def pod_log(kubectl: str, context: str | None, namespace: str, pod: str, tail: int = 2000) -> str:
    """The current container's last `tail` log lines ("" if there is no log yet)."""
    cmd = kubectl_base(kubectl, context) + ["logs", pod, "--namespace", namespace, f"--tail={tail}",
                                            "--request-timeout=20s"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return proc.stdout if proc.returncode == 0 else ""


def logs_args(workers: Workers, *, follow: bool = True, tail: int = -1) -> list[str]:
    """`kubectl logs` of every worker, each line prefixed with [pod/<name>/<container>]."""
    args = ["logs", "--namespace", workers.namespace, "--selector", workers.selector,
            "--prefix", f"--tail={tail}", f"--max-log-requests={max(workers.replicas, 5)}"]
    if follow:
        # Keep following the other workers when one pod's stream breaks (e.g. it restarts).
        args += ["--follow", "--ignore-errors"]
    return args
