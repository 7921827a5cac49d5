"""What a kubelet reports for a pod, from what the node agent knows about its containers.

Pure: no processes, no API calls. The phase follows Kubernetes' rules
(https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/): Pending until every
container has started once; with restartPolicy Always a pod whose container exited stays
Running while it is restarted (with back-off: CrashLoopBackOff); with Never / OnFailure a pod
ends Succeeded when every container exited 0, Failed when one exited non-zero and will not
be restarted.
"""
from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass, field


def now_rfc3339() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ContainerRecord:
    """One container's life on this node."""
    name: str
    image: str
    restart_count: int = 0
    running_since: str | None = None          # RFC 3339 while running
    terminated: dict | None = None            # current state when exited: exitCode, reason, ...
    last_terminated: dict | None = None       # lastState.terminated
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    pid: int | None = None
    done: bool = False                        # exited and will not be restarted


def terminated_state(exit_code: int, started: str | None, finished: str) -> dict:
    state = {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
             "finishedAt": finished}
    if started:
        state["startedAt"] = started
    if exit_code < 0:  # killed by a signal: report 128+n as a container runtime does
        state["exitCode"] = 128 - exit_code
        state["signal"] = -exit_code
        state["reason"] = "Error"
    return state


def restart_wanted(policy: str, exit_code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def container_status(rec: ContainerRecord) -> dict:
    if rec.running_since:
        state = {"running": {"startedAt": rec.running_since}}
    elif rec.terminated and rec.done:
        state = {"terminated": rec.terminated}
    else:
        waiting = {"reason": rec.waiting_reason}
        if rec.waiting_message:
            waiting["message"] = rec.waiting_message
        state = {"waiting": waiting}
    status = {"name": rec.name, "image": rec.image, "imageID": "", "ready": bool(rec.running_since),
              "started": bool(rec.running_since), "restartCount": rec.restart_count, "state": state,
              "lastState": {"terminated": rec.last_terminated} if rec.last_terminated else {}}
    if rec.pid:
        status["containerID"] = f"tfmw://{rec.pid}"
    return status


def phase(policy: str, records: list[ContainerRecord], ever_started: bool) -> str:
    if not ever_started:
        return "Pending"
    if all(r.done for r in records):
        codes = [(r.terminated or {}).get("exitCode", 1) for r in records]
        return "Succeeded" if all(c == 0 for c in codes) else "Failed"
    return "Running"


def pod_status(*, policy: str, records: list[ContainerRecord], init_records: list[ContainerRecord],
               ever_started: bool, initialized: bool, network_ready: bool, pod_ip: str | None,
               host_ip: str, start_time: str, transitions: dict, message: str = "") -> dict:
    """The full `status` of a pod. `transitions` keeps each condition's lastTransitionTime
    (condition type -> (status, time)) across calls; it is updated here."""
    the_phase = phase(policy, records, ever_started)
    ready = the_phase == "Running" and all(r.running_since for r in records)
    if the_phase == "Succeeded":
        ready = False
    wanted = {
        "PodReadyToStartContainers": network_ready,
        "Initialized": initialized,
        "ContainersReady": ready,
        "Ready": ready,
        "PodScheduled": True,
    }
    conditions = []
    for ctype, ok in wanted.items():
        value = "True" if ok else "False"
        previous = transitions.get(ctype)
        if not previous or previous[0] != value:
            transitions[ctype] = (value, now_rfc3339())
        cond = {"type": ctype, "status": value, "lastProbeTime": None,
                "lastTransitionTime": transitions[ctype][1]}
        if ctype in ("ContainersReady", "Ready") and not ok:
            cond["reason"] = "PodCompleted" if the_phase in ("Succeeded", "Failed") else "ContainersNotReady"
        conditions.append(cond)
    status = {
        "phase": the_phase,
        "conditions": conditions,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": start_time,
        "containerStatuses": [container_status(r) for r in records],
    }
    if init_records:
        status["initContainerStatuses"] = [container_status(r) for r in init_records]
    if pod_ip:
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
    if message:
        status["message"] = message
    return status  # no qosClass: the API server sets it at creation


# ---------------------------------------------------------------- quantities (resourceFieldRef)

_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "m": 0.001}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")


def parse_quantity(text: str | int | float) -> float:
    """A Kubernetes quantity ("500m", "2Gi", "1.5", "1e3") as a number."""
    match = _QUANTITY.match(str(text).strip())
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return float(match.group(1)) * _SUFFIX[match.group(2) or ""]


def resource_field_value(resource: str, divisor: str | None, container: dict,
                         allocatable: dict) -> str:
    """resourceFieldRef as the kubelet computes it: the container's limit or request,
    an unset limit being the node's allocatable; divided by `divisor`, rounded up."""
    kind, _, name = resource.partition(".")
    if kind not in ("limits", "requests") or not name:
        raise ValueError(f"resourceFieldRef {resource!r} is not limits.<name> or requests.<name>")
    values = (container.get("resources") or {}).get(kind) or {}
    if name in values:
        amount = parse_quantity(values[name])
    elif kind == "limits":
        amount = parse_quantity(allocatable.get(name, 0))
    else:
        amount = 0.0
    div = parse_quantity(divisor or "1") or 1.0   # the API server defaults an unset divisor to "0"
    return str(int(math.ceil(amount / div - 1e-9)))
