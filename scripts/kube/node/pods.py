"""One pod on the local node: its volumes, environment, network and container processes.

What a kubelet does, and what this node agent does instead (no container engine here):
- image: not pulled; every container runs its `command` + `args` as a host process with the
  project's own interpreter (a leading `python`/`python3`) and the project image's `ENV`
  (Dockerfile), so the chart's own image is what is emulated. A container without
  `command` cannot run here and says so.
- network: its own network namespace on the cluster bridge, one IP, a hosts file kept
  from the EndpointSlices (agent.py) and a resolv.conf with the cluster search path.
- volumes: configMap, secret, downwardAPI, projected (serviceAccountToken from the real
  TokenRequest API, refreshed at 80% of its life; configMap; secret; downwardAPI),
  emptyDir (a fresh folder per pod), persistentVolumeClaim (the bound PV's hostPath/local
  path). Files are real; the container sees them at their local paths: environment values,
  args and workingDir under a volume's mountPath are rewritten to the volume's folder (no
  mount namespace: the host's root file system stays as it is; readOnlyRootFilesystem is
  not enforced).
- env: value, fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef, envFrom, $(VAR)
  expansion, KUBERNETES_SERVICE_HOST/PORT pointing at the real API server address.
- restartPolicy Always/OnFailure/Never with the kubelet's back-off (10 s doubling to 5 min;
  shorter here, see BACKOFF_*), init containers in order, and termination on delete:
  SIGTERM to the container's whole process tree, SIGKILL after the grace period.
- runAsUser/runAsGroup: applied with setpriv when the interpreter is reachable by that
  user, else the container runs as the agent's user (the agent logs which).
"""
from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from scripts.kube.api import Api, ApiError, ns_path
from scripts.kube.node import podnet
from scripts.kube.node.podstatus import (ContainerRecord, now_rfc3339, pod_status, resource_field_value,
                                         restart_wanted, terminated_state)
from scripts.localrun.proctree import signal_tree

BACKOFF_FIRST = 2.0
BACKOFF_CAP = 40.0
BACKOFF_RESET_AFTER = 120.0  # a container that ran this long restarts without back-off


class PodSetupError(Exception):
    """Why a pod cannot start yet (reason, message), e.g. a ConfigMap that does not exist."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass
class NodeContext:
    """What every pod of one node shares."""
    name: str
    slot: int
    bridge: str
    host_ip: str
    api_host: str
    api_port: int
    prefix: str            # the node's /24 prefix, e.g. 198.19.0.1 -> "198.19.1"
    netmask: str           # prefix length of the bridge network
    directory: Path        # <state>/nodes/<name>
    volumes_root: Path     # <state>/volumes (provisioned PVs)
    allocatable: dict
    base_env: dict
    python: str
    cluster_domain: str = "cluster.local"
    run_as_ok: bool = False
    log: callable = print


def _expand(text: str, env: dict) -> str:
    """$(VAR) expansion as Kubernetes does it; $$(VAR) is an escaped literal."""
    def repl(match):
        if match.group(0).startswith("$$"):
            return match.group(0)[1:]
        name = match.group(1)
        return env.get(name, match.group(0))
    return re.sub(r"\$\$\([A-Za-z_][A-Za-z0-9_.-]*\)|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", repl, text)


def rewrite_path(value: str, mounts: list[tuple[str, Path]]) -> str:
    """A value naming a path under a volume's mountPath names the same path in its folder."""
    if not value.startswith("/"):
        return value
    candidate = PurePosixPath(value)
    for mount_path, local in mounts:
        mount = PurePosixPath(mount_path)
        if candidate == mount or mount in candidate.parents:
            return str(local / candidate.relative_to(mount))
    return value


@dataclass
class Container:
    spec: dict
    record: ContainerRecord
    proc: subprocess.Popen | None = None
    started_mono: float = 0.0
    backoff: float = 0.0
    next_start: float = 0.0
    pending_restart: bool = False   # exited, to be started again once next_start passes

    @property
    def name(self) -> str:
        return self.spec["name"]


class Pod:
    def __init__(self, obj: dict, ctx: NodeContext, api: Api, ip_index: int):
        self.obj = obj
        self.ctx = ctx
        self.api = api
        meta = obj["metadata"]
        self.uid = meta["uid"]
        self.name = meta["name"]
        self.namespace = meta["namespace"]
        self.spec = obj["spec"]
        self.policy = self.spec.get("restartPolicy", "Always")
        self.dir = ctx.directory / "pods" / f"{self.namespace}_{self.name}_{self.uid[:8]}"
        self.ip_index = ip_index
        self.ip = f"{ctx.prefix}.{ip_index}"
        self.net: podnet.PodNetwork | None = None
        self.volume_dirs: dict[str, Path] = {}
        self.tokens: list[tuple[Path, dict, float]] = []   # (file, request, refresh_at)
        self.inits = [Container(c, ContainerRecord(c["name"], c.get("image", "")))
                      for c in self.spec.get("initContainers") or []]
        self.containers = [Container(c, ContainerRecord(c["name"], c.get("image", "")))
                           for c in self.spec.get("containers") or []]
        self.start_time = now_rfc3339()
        self.transitions: dict = {}
        self.ready_for_containers = False
        self.setup_error: PodSetupError | None = None
        self.next_setup_try = 0.0
        self.ever_started = False
        self.terminating_since: float | None = None
        self.kill_at: float | None = None
        self.last_status: dict | None = None
        self.finished = False     # every process gone after deletion: final delete pending
        self.events: list[tuple[str, str, str]] = []   # (type, reason, message) to post
        self.network_released = False   # finished: its address is still reported, not held
        self.hosts_written = ""         # the hosts file as last written into its namespace

    # ---------------------------------------------------------------- setup
    def setup(self, hosts: str) -> None:
        """Network and volumes; raises PodSetupError to be retried later."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.net is None:
            try:
                self.net = podnet.create(self.ctx.slot, self.ctx.bridge, self.uid, self.ip_index, self.ip,
                                         self.ctx.netmask, hosts, self.resolv_conf())
            except podnet.NetError as exc:
                raise PodSetupError("FailedCreatePodSandBox", str(exc)) from None
        for volume in self.spec.get("volumes") or []:
            if volume["name"] not in self.volume_dirs:
                self.volume_dirs[volume["name"]] = self._volume(volume)
        self.ready_for_containers = True

    def resolv_conf(self) -> str:
        d = self.ctx.cluster_domain
        return (f"search {self.namespace}.svc.{d} svc.{d} {d}\n"
                # No DNS server: names outside the hosts file fail at once, no query leaves.
                "nameserver 127.0.0.1\noptions ndots:5 timeout:1 attempts:1\n")

    def hosts_text(self, cluster_lines: list[str]) -> str:
        hostname = self.spec.get("hostname") or self.name
        sub = self.spec.get("subdomain")
        names = [f"{hostname}.{sub}.{self.namespace}.svc.{self.ctx.cluster_domain}", hostname] if sub \
            else [hostname]
        lines = ["# Kubernetes-managed hosts file (tf-multiworker local node).",
                 "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
                 f"{self.ip}\t{' '.join(names)}"]
        lines += [l for l in cluster_lines if l.split("\t")[-1] != names[0]]
        return "\n".join(lines) + "\n"

    def _volume(self, volume: dict) -> Path:
        name = volume["name"]
        local = self.dir / "volumes" / name
        if "emptyDir" in volume:
            local.mkdir(parents=True, exist_ok=True)
            return local
        if "configMap" in volume:
            src = volume["configMap"]
            self._write_items(local, self._configmap(src["name"], src.get("optional")), src.get("items"),
                              src.get("defaultMode"))
            return local
        if "secret" in volume:
            src = volume["secret"]
            self._write_items(local, self._secret(src["secretName"], src.get("optional")), src.get("items"),
                              src.get("defaultMode"))
            return local
        if "downwardAPI" in volume:
            self._write_downward(local, volume["downwardAPI"].get("items") or [])
            return local
        if "projected" in volume:
            local.mkdir(parents=True, exist_ok=True)
            for source in volume["projected"].get("sources") or []:
                if "serviceAccountToken" in source:
                    self._token(local, source["serviceAccountToken"])
                elif "configMap" in source:
                    src = source["configMap"]
                    self._write_items(local, self._configmap(src["name"], src.get("optional")),
                                      src.get("items"), None)
                elif "secret" in source:
                    src = source["secret"]
                    self._write_items(local, self._secret(src["name"], src.get("optional")),
                                      src.get("items"), None)
                elif "downwardAPI" in source:
                    self._write_downward(local, source["downwardAPI"].get("items") or [])
                else:
                    raise PodSetupError("FailedMount", f"volume {name}: projected source "
                                        f"{sorted(source)} is not supported by the local node")
            return local
        if "persistentVolumeClaim" in volume:
            return self._claim(volume["persistentVolumeClaim"]["claimName"])
        kind = next((k for k in volume if k != "name"), "?")
        raise PodSetupError("FailedMount", f"volume {name}: {kind} volumes are not supported by the local node")

    def _configmap(self, name: str, optional: bool | None) -> dict:
        return self._read_data("configmaps", name, optional)

    def _secret(self, name: str, optional: bool | None) -> dict:
        return self._read_data("secrets", name, optional)

    def _read_data(self, resource: str, name: str, optional: bool | None) -> dict:
        """A ConfigMap's or Secret's keys (Secret values and binaryData decoded); an
        optional one that does not exist is empty."""
        try:
            obj = self.api.get(ns_path(self.namespace, resource, name))
        except ApiError as err:
            if err.status == 404 and optional:
                return {}
            raise PodSetupError("FailedMount", f"{resource[:-1]} {name!r}: {err}") from None
        if resource == "secrets":
            return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        data = dict(obj.get("data") or {})
        data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
        return data

    @staticmethod
    def _write_items(local: Path, data: dict, items: list | None, mode: int | None) -> None:
        local.mkdir(parents=True, exist_ok=True)
        chosen = [(i["key"], i["path"], i.get("mode")) for i in items] if items else \
            [(k, k, None) for k in data]
        for key, rel, item_mode in chosen:
            if key not in data:
                raise PodSetupError("FailedMount", f"key {key!r} not found")
            _write_file(local / rel, data[key], item_mode or mode or 0o644)

    def _write_downward(self, local: Path, items: list) -> None:
        local.mkdir(parents=True, exist_ok=True)
        for item in items:
            if "fieldRef" in item:
                value = self.field_ref(item["fieldRef"]["fieldPath"])
            else:
                ref = item["resourceFieldRef"]
                container = next((c for c in self.spec["containers"]
                                  if c["name"] == ref.get("containerName")), self.spec["containers"][0])
                value = resource_field_value(ref["resource"], ref.get("divisor"), container,
                                             self.ctx.allocatable)
            _write_file(local / item["path"], value, item.get("mode") or 0o644)

    def _token(self, local: Path, source: dict) -> None:
        expiration = int(source.get("expirationSeconds") or 3600)
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"expirationSeconds": expiration,
                            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": self.name,
                                               "uid": self.uid}}}
        if source.get("audience"):
            request["spec"]["audiences"] = [source["audience"]]
        path = local / source["path"]
        self._request_token(path, request)

    def _request_token(self, path: Path, request: dict) -> None:
        sa = self.spec.get("serviceAccountName") or "default"
        try:
            answer = self.api.create(ns_path(self.namespace, "serviceaccounts", sa) + "/token", request)
        except ApiError as err:
            raise PodSetupError("FailedMount", f"service account token for {sa!r}: {err}") from None
        _write_file(path, answer["status"]["token"], 0o644)
        lifetime = int(answer["spec"].get("expirationSeconds") or request["spec"]["expirationSeconds"])
        self.tokens = [t for t in self.tokens if t[0] != path]
        self.tokens.append((path, request, time.monotonic() + 0.8 * lifetime))

    def refresh_tokens(self) -> None:
        for path, request, refresh_at in list(self.tokens):
            if time.monotonic() >= refresh_at:
                try:
                    self._request_token(path, request)
                except PodSetupError as exc:
                    self.ctx.log(f"{self.namespace}/{self.name}: token refresh failed: {exc}")

    def _claim(self, claim: str) -> Path:
        try:
            pvc = self.api.get(ns_path(self.namespace, "persistentvolumeclaims", claim))
        except ApiError as err:
            raise PodSetupError("FailedMount", f"persistentvolumeclaim {claim!r}: {err}") from None
        pv_name = (pvc.get("spec") or {}).get("volumeName")
        if not pv_name or (pvc.get("status") or {}).get("phase") != "Bound":
            raise PodSetupError("FailedMount", f"persistentvolumeclaim {claim!r} is not bound yet")
        try:
            pv = self.api.get(f"/api/v1/persistentvolumes/{pv_name}")
        except ApiError as err:
            raise PodSetupError("FailedMount", f"persistentvolume {pv_name!r}: {err}") from None
        spec = pv.get("spec") or {}
        path = (spec.get("hostPath") or {}).get("path") or (spec.get("local") or {}).get("path")
        if not path:
            raise PodSetupError("FailedMount", f"persistentvolume {pv_name!r} is neither hostPath nor local")
        Path(path).mkdir(parents=True, exist_ok=True)
        return Path(path)

    # ---------------------------------------------------------------- environment
    def field_ref(self, path: str) -> str:
        meta = self.obj["metadata"]
        simple = {
            "metadata.name": self.name, "metadata.namespace": self.namespace, "metadata.uid": self.uid,
            "spec.nodeName": self.ctx.name, "spec.serviceAccountName": self.spec.get("serviceAccountName", "default"),
            "status.hostIP": self.ctx.host_ip, "status.hostIPs": self.ctx.host_ip,
            "status.podIP": self.ip, "status.podIPs": self.ip,
        }
        if path in simple:
            return simple[path]
        match = re.match(r"^metadata\.(labels|annotations)\['(.+)'\]$", path)
        if match:
            return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
        if path in ("metadata.labels", "metadata.annotations"):
            return "\n".join(f'{k}="{v}"' for k, v in sorted((meta.get(path.split(".")[1]) or {}).items()))
        raise PodSetupError("CreateContainerConfigError", f"fieldRef {path!r} is not supported")

    def mounts(self, container: dict) -> list[tuple[str, Path]]:
        out = []
        for mount in container.get("volumeMounts") or []:
            local = self.volume_dirs.get(mount["name"])
            if local is None:
                raise PodSetupError("CreateContainerConfigError",
                                    f"volumeMount {mount['name']!r} names no volume")
            if mount.get("subPath"):
                local = local / mount["subPath"]
                local.mkdir(parents=True, exist_ok=True)
            out.append((mount["mountPath"], local))
        return sorted(out, key=lambda item: -len(item[0]))  # deepest mount wins

    def environment(self, container: dict, mounts: list[tuple[str, Path]]) -> dict:
        env = dict(self.ctx.base_env)
        env.update({"KUBERNETES_SERVICE_HOST": self.ctx.api_host,
                    "KUBERNETES_SERVICE_PORT": str(self.ctx.api_port),
                    "KUBERNETES_SERVICE_PORT_HTTPS": str(self.ctx.api_port),
                    "HOSTNAME": self.spec.get("hostname") or self.name})
        for source in container.get("envFrom") or []:
            prefix = source.get("prefix", "")
            if "configMapRef" in source:
                data = self._configmap(source["configMapRef"]["name"], source["configMapRef"].get("optional"))
            else:
                data = self._secret(source["secretRef"]["name"], source["secretRef"].get("optional"))
            env.update({prefix + k: v.decode() if isinstance(v, bytes) else v for k, v in data.items()})
        for item in container.get("env") or []:
            name = item["name"]
            if "value" in item:
                env[name] = _expand(str(item["value"]), env)
                continue
            source = item.get("valueFrom") or {}
            if "fieldRef" in source:
                env[name] = self.field_ref(source["fieldRef"]["fieldPath"])
            elif "resourceFieldRef" in source:
                ref = source["resourceFieldRef"]
                target = next((c for c in self.spec["containers"] if c["name"] == ref.get("containerName")),
                              container)
                env[name] = resource_field_value(ref["resource"], ref.get("divisor"), target, self.ctx.allocatable)
            elif "configMapKeyRef" in source or "secretKeyRef" in source:
                resource = "configmaps" if "configMapKeyRef" in source else "secrets"
                ref = source.get("configMapKeyRef") or source["secretKeyRef"]
                data = self._read_data(resource, ref["name"], ref.get("optional"))
                if ref["key"] not in data and not ref.get("optional"):
                    raise PodSetupError("CreateContainerConfigError",
                                        f"{resource[:-1]} {ref['name']!r} has no key {ref['key']!r}")
                value = data.get(ref["key"], "")
                env[name] = value.decode() if isinstance(value, bytes) else value
            else:
                env[name] = ""
        # Only what the pod spec sets points into its volumes: the node's own values (PATH,
        # PYTHONPATH naming this checkout, which may itself live under /tmp) are left alone.
        own = dict(self.ctx.base_env)
        for key, value in list(env.items()):
            if key not in own or own[key] != value:
                env[key] = rewrite_path(value, mounts)
        for mount_path, local in mounts:
            if mount_path == "/tmp":
                env["TMPDIR"] = str(local)
            elif mount_path.startswith("/home/") and "HOME" not in {i["name"] for i in container.get("env") or []}:
                env["HOME"] = str(local)
        return env

    def argv(self, container: dict, env: dict, mounts: list[tuple[str, Path]]) -> list[str]:
        command = list(container.get("command") or [])
        if not command:
            raise PodSetupError("CreateContainerConfigError",
                                f"container {container['name']!r} has no command: the local node runs "
                                "commands as host processes and cannot read an image's ENTRYPOINT")
        argv = [rewrite_path(_expand(str(a), env), mounts) for a in command + list(container.get("args") or [])]
        if argv[0] in ("python", "python3"):
            argv[0] = self.ctx.python
        return argv

    def user_wrap(self, container: dict, argv: list[str]) -> list[str]:
        sc = dict(self.spec.get("securityContext") or {})
        sc.update(container.get("securityContext") or {})
        uid, gid = sc.get("runAsUser"), sc.get("runAsGroup")
        if uid is None or not self.ctx.run_as_ok:
            return argv
        groups = [str(g) for g in ([(self.spec.get("securityContext") or {}).get("fsGroup")] +
                                   list((self.spec.get("securityContext") or {}).get("supplementalGroups") or []))
                  if g is not None]
        wrap = ["setpriv", f"--reuid={uid}", f"--regid={gid if gid is not None else uid}"]
        wrap += [f"--groups={','.join(groups)}"] if groups else ["--clear-groups"]
        if sc.get("allowPrivilegeEscalation") is False:
            wrap.append("--no-new-privs")
        return wrap + ["--", *argv]

    # ---------------------------------------------------------------- processes
    def log_file(self, c: Container, restart: int | None = None) -> Path:
        n = c.record.restart_count if restart is None else restart
        return self.dir / "logs" / c.name / f"{n}.log"

    def _start(self, c: Container) -> None:
        try:
            mounts = self.mounts(c.spec)
            env = self.environment(c.spec, mounts)
            argv = self.argv(c.spec, env, mounts)
        except PodSetupError as exc:
            c.record.waiting_reason, c.record.waiting_message = exc.reason, str(exc)
            c.next_start = time.monotonic() + 5
            return
        except (ValueError, KeyError, TypeError) as exc:  # a spec this agent cannot honour
            c.record.waiting_reason = "CreateContainerConfigError"
            c.record.waiting_message = f"{type(exc).__name__}: {exc}"
            c.next_start = time.monotonic() + 5
            return
        workdir = rewrite_path(c.spec.get("workingDir") or "", mounts) or str(self.dir)
        Path(workdir).mkdir(parents=True, exist_ok=True)
        log = self.log_file(c)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            c.proc = subprocess.Popen(self.net.wrap(self.user_wrap(c.spec, argv)), env=env, cwd=workdir,
                                      stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True)
        c.started_mono = time.monotonic()
        c.record.running_since = now_rfc3339()
        c.record.pid = c.proc.pid
        c.record.terminated = None
        c.record.waiting_reason, c.record.waiting_message = "", ""
        self.ever_started = True
        self.events.append(("Normal", "Started", f"Started container {c.name}"))

    def _reap(self, c: Container) -> None:
        code = c.proc.poll()
        if code is None:
            return
        state = terminated_state(code, c.record.running_since, now_rfc3339())
        ran = time.monotonic() - c.started_mono
        c.proc = None
        c.record.running_since = None
        c.record.pid = None
        c.record.terminated = state
        if self.terminating_since is None and restart_wanted(self.policy, state["exitCode"]):
            c.backoff = BACKOFF_FIRST if (ran > BACKOFF_RESET_AFTER or not c.backoff) else min(c.backoff * 2, BACKOFF_CAP)
            c.next_start = time.monotonic() + c.backoff
            c.record.last_terminated = state
            c.record.waiting_reason = "CrashLoopBackOff" if state["exitCode"] != 0 else "Completed"
            c.record.waiting_message = (f"back-off {c.backoff:.0f}s restarting container {c.name} "
                                        f"(exit code {state['exitCode']})")
            self.events.append(("Warning" if state["exitCode"] else "Normal", "BackOff", c.record.waiting_message))
            c.pending_restart = True
        else:
            c.record.done = True

    def tick(self) -> None:
        """Advance the pod: reap exits, start or restart containers, finish termination."""
        now = time.monotonic()
        for c in self.inits + self.containers:
            if c.proc is not None:
                self._reap(c)
        if self.terminating_since is not None:
            alive = [c for c in self.inits + self.containers if c.proc is not None]
            if not alive:
                self.finished = True
            elif self.kill_at is not None and now >= self.kill_at:
                for c in alive:
                    signal_tree(c.proc.pid, signal.SIGKILL)
                self.kill_at = now + 3600  # once
            return
        if not self.ready_for_containers:
            return
        self.refresh_tokens()
        # Init containers, one at a time, each to success.
        for c in self.inits:
            if c.record.done:
                if (c.record.terminated or {}).get("exitCode", 1) != 0:
                    self._fail_all("Init container failed")
                    return
                continue
            if c.proc is None and now >= c.next_start:
                if c.pending_restart:
                    c.record.restart_count += 1
                    c.pending_restart = False
                self._start(c)
            return
        for c in self.containers:
            if c.proc is None and not c.record.done and now >= c.next_start:
                if c.pending_restart:
                    c.record.restart_count += 1
                    c.pending_restart = False
                self._start(c)

    def _fail_all(self, message: str) -> None:
        for c in self.containers:
            c.record.done = True
            c.record.terminated = c.record.terminated or {"exitCode": 1, "reason": "Error", "message": message,
                                                          "finishedAt": now_rfc3339()}
        self.ever_started = True

    def terminate(self, grace: float) -> None:
        """Begin stopping every container: SIGTERM now, SIGKILL after `grace` seconds."""
        if self.terminating_since is not None:
            return
        self.terminating_since = time.monotonic()
        self.kill_at = self.terminating_since + max(grace, 0)
        for c in self.inits + self.containers:
            if c.proc is not None and c.proc.poll() is None:
                signal_tree(c.proc.pid, signal.SIGCONT)
                try:
                    os.kill(c.proc.pid, signal.SIGTERM)  # the container's main process, as a runtime does
                except ProcessLookupError:
                    pass
        self.events.append(("Normal", "Killing", f"Stopping containers (grace period {grace:g}s)"))
        if not any(c.proc for c in self.inits + self.containers):
            self.finished = True

    def kill_now(self) -> None:
        for c in self.inits + self.containers:
            if c.proc is not None:
                signal_tree(c.proc.pid, signal.SIGKILL)
                try:
                    c.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
                c.proc = None

    def release_network(self) -> None:
        """A finished pod keeps its status and logs, not its namespace and veth."""
        if self.net is not None:
            podnet.delete(self.net)
            self.net = None
            self.network_released = True

    def teardown(self) -> None:
        self.kill_now()
        if self.net is not None:
            podnet.delete(self.net)
            self.net = None

    def status(self) -> dict:
        message = str(self.setup_error) if self.setup_error else ""
        if self.setup_error:
            for c in self.containers:
                if not c.record.running_since and not c.record.done and not c.record.terminated:
                    c.record.waiting_reason, c.record.waiting_message = self.setup_error.reason, message
        return pod_status(policy=self.policy, records=[c.record for c in self.containers],
                          init_records=[c.record for c in self.inits], ever_started=self.ever_started,
                          initialized=all(c.record.done for c in self.inits),
                          network_ready=self.net is not None,
                          pod_ip=self.ip if (self.net is not None or self.network_released) else None,
                          host_ip=self.ctx.host_ip,
                          start_time=self.start_time, transitions=self.transitions)


def _write_file(path: Path, value, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(value if isinstance(value, bytes) else str(value).encode())
    tmp.chmod(mode)
    tmp.replace(path)


def interpreter_reachable_by_others(python: str) -> bool:
    """Whether a non-root runAsUser could execute `python` (every folder on its real path
    searchable by others); a pyenv under a 0700 /root is not."""
    for candidate in (Path(python), Path(os.path.realpath(python))):
        for parent in candidate.parents:
            try:
                if not parent.stat().st_mode & 0o001:
                    return False
            except OSError:
                return False
    return True
