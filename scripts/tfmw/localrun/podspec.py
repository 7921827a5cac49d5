"""Turn the rendered StatefulSet (and the evaluator Job, when enabled) into local "pods":
argv, environment and directories.

Pure (no processes, no I/O beyond the caller's paths): the local runner and its tests
share it. What a kubelet would do and what we do instead:
- downward API fields (metadata.name / metadata.namespace / metadata.uid / status.podIP ...) -> filled in;
- configMap volumes -> the rendered ConfigMap's files in a local folder;
- the shared-storage volume (the one mounted at TFMW_SHARED_DIR) and PVCs -> one folder
  shared by every local pod; other emptyDirs -> a folder per pod;
- an env value under a volume's mountPath -> the same path under that volume's local folder;
  a command argument too, under a configMap volume's (training.files:
  `python /opt/tf-multiworker/files/main.py`);
- a leading `python` in the command -> this venv's interpreter;
- the worker's API access (projected service-account token, TFMW_API_DIR,
  TFMW_STATUS_CONFIGMAP, TFMW_RBAC_OFF) -> left out: no API server here (see API_ONLY_ENV), and
  TFMW_NO_API_SERVER=1 tells the launcher that this is by design.
- envFrom -> a ConfigMap the release renders, read; an optional one that is not there, skipped;
Anything we cannot honour locally (Secrets, other envFrom sources, unknown fieldRefs) is refused
with one line.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from entrypoint.errors import EXIT_BAD_CONFIG
from tfmw.image.dockerfile import parse_dockerfile


class LocalRunError(Exception):
    """One-line reason a rendered pod cannot run locally; `make local` exits with exit_code."""

    exit_code = EXIT_BAD_CONFIG  # change the values (or --network): running it again cannot help


@dataclass(frozen=True)
class Workload:
    """The parts of the rendered chart the local runner needs."""

    statefulset: dict
    service: dict
    configmaps: dict[str, dict]
    namespace: str
    evaluator: dict | None = None  # the evaluator Job (evaluator.enabled)

    @property
    def name(self) -> str:
        return self.statefulset["metadata"]["name"]

    @property
    def replicas(self) -> int:
        return int(self.statefulset["spec"].get("replicas", 1))

    @property
    def pod_spec(self) -> dict:
        return self.statefulset["spec"]["template"]["spec"]

    @property
    def container(self) -> dict:
        return self.pod_spec["containers"][0]

    @property
    def grace_seconds(self) -> int:
        return int(self.pod_spec.get("terminationGracePeriodSeconds", 30))

    def env_value(self, name: str) -> str | None:
        for item in self.container.get("env", []):
            if item.get("name") == name and "value" in item:
                return str(item["value"])
        return None


def find_workload(objects: Sequence[dict], namespace: str) -> Workload:
    """The worker StatefulSet, the Service it names, and the ConfigMaps, from rendered objects."""
    stss = [o for o in objects if o.get("kind") == "StatefulSet"]
    if len(stss) != 1:
        raise LocalRunError(f"expected one StatefulSet in the rendered chart, found {len(stss)}")
    sts = stss[0]
    service_name = sts["spec"].get("serviceName")
    services = [o for o in objects if o.get("kind") == "Service" and o["metadata"]["name"] == service_name]
    if not services:
        raise LocalRunError(f"StatefulSet serviceName {service_name!r} names no rendered Service")
    configmaps = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "ConfigMap"}
    jobs = [
        o
        for o in objects
        if o.get("kind") == "Job"
        and (o["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "evaluator"
    ]
    return Workload(sts, services[0], configmaps, namespace, jobs[0] if jobs else None)


@dataclass
class LocalPod:
    name: str
    ordinal: int
    argv: list[str]
    env: dict[str, str]
    pod_dir: Path
    hostname: str
    fqdn: str
    ip: str | None = None  # set by the network layer in netns mode
    netns: str | None = None
    files: dict[Path, str] = field(default_factory=dict)  # files to write before start
    # "Always" (a StatefulSet pod) or "Never" (the evaluator Job's pod: exit 0 is its end)
    restart_policy: str = "Always"


def _volume_dirs(workload: Workload, pod_spec: dict, pod_dir: Path, shared_dir: Path) -> dict[str, Path]:
    """volume name -> local folder, per the rules in the module docstring."""
    shared_path = workload.env_value("TFMW_SHARED_DIR")
    mount_of = {m["name"]: m["mountPath"] for m in pod_spec["containers"][0].get("volumeMounts", [])}
    dirs: dict[str, Path] = {}
    for volume in pod_spec.get("volumes", []):
        name = volume["name"]
        if "configMap" in volume:
            dirs[name] = shared_dir.parent / "configmaps" / volume["configMap"]["name"]
        elif "persistentVolumeClaim" in volume or mount_of.get(name) == shared_path:
            dirs[name] = shared_dir
        elif "emptyDir" in volume:
            if volume["emptyDir"] and volume["emptyDir"].get("medium") == "Memory":
                continue  # /dev/shm and friends: the host's own are fine
            dirs[name] = pod_dir / "volumes" / name
        elif "projected" in volume and _is_api_access(volume):
            continue  # no API server here: see API_ONLY_ENV
        elif "secret" in volume or "projected" in volume:
            raise LocalRunError(
                f"volume {name!r} needs a Kubernetes Secret; the local run cannot "
                "provide one (use values/local.yaml storage without credentials)"
            )
    return dirs


# The worker's API access (docs/contracts.md): a projected service-account token and the
# variables naming it. `make local` has no API server, so the workers run without API access:
# no status object, no Events, no scale-to-zero (the launcher's API-off path), as on a
# cluster with completion.onSuccess/onFailure=idle. NO_API_SERVER tells the launcher so: it
# then says nothing of a scale to 0 it cannot make (the run ends as it would, locally).
API_ONLY_ENV = ("TFMW_API_DIR", "TFMW_STATUS_CONFIGMAP", "TFMW_RBAC_OFF")
NO_API_SERVER = {"TFMW_NO_API_SERVER": "1"}


def _is_api_access(volume: dict) -> bool:
    return any("serviceAccountToken" in source for source in volume["projected"].get("sources") or [])


def configmap_files(workload: Workload, shared_dir: Path, pod_spec: dict | None = None) -> dict[Path, str]:
    files = {}
    for volume in (pod_spec or workload.pod_spec).get("volumes", []):
        if "configMap" in volume:
            cm_name = volume["configMap"]["name"]
            cm = workload.configmaps.get(cm_name)
            if cm is None:
                raise LocalRunError(
                    f"volume {volume['name']!r} names ConfigMap {cm_name!r}, which the chart did not render"
                )
            for key, text in (cm.get("data") or {}).items():
                files[shared_dir.parent / "configmaps" / cm_name / key] = text
    return files


def _rewrite_path(value: str, mounts: list[tuple[str, Path]]) -> str:
    """An env value that points into a mounted volume points into its local folder."""
    for mount_path, local in mounts:
        mount = PurePosixPath(mount_path)
        candidate = PurePosixPath(value)
        if candidate == mount or mount in candidate.parents:
            return str(local / candidate.relative_to(mount))
    return value


def _field_ref(path: str, pod: str, namespace: str, ip: str | None, workload: Workload) -> str:
    values = {
        "metadata.name": pod,
        "metadata.namespace": namespace,
        "metadata.uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"tfmw-local/{namespace}/{pod}")),  # stable per pod
        "status.podIP": ip or "127.0.0.1",
        "spec.nodeName": "localhost",
        "spec.serviceAccountName": workload.pod_spec.get("serviceAccountName", "default"),
        # the StatefulSet controller's label; one revision for a local run
        "metadata.labels['controller-revision-hash']": f"{workload.name}-local",
    }
    if path not in values:
        raise LocalRunError(f"env fieldRef {path!r} is not supported by the local run")
    return values[path]


def _env_from(sources: Sequence[Mapping], workload: Workload) -> dict[str, str]:
    """A container's envFrom: a ConfigMap the release renders is read; an optional source that is
    not there is skipped, as the kubelet skips it; any other (a Secret, a ConfigMap of the
    cluster's) is refused: a local run has no cluster to read it from."""
    env: dict[str, str] = {}
    for source in sources:
        kind = "Secret" if "secretRef" in source else "ConfigMap"
        ref = source.get("secretRef") or source.get("configMapRef") or {}
        data = workload.configmaps.get(ref.get("name"), {}).get("data") if kind == "ConfigMap" else None
        if data is None:
            if ref.get("optional"):
                continue
            raise LocalRunError(
                f"envFrom reads the Kubernetes {kind} {ref.get('name')!r}, which a local run cannot provide "
                "(workers.extraEnvFrom, storage.objectStore.existingSecret): leave it out of the values for "
                "`make local`, or mark a workers.extraEnvFrom entry optional: true"
            )
        env.update({f"{source.get('prefix', '')}{key}": str(value) for key, value in data.items()})
    return env


def _local_pod(
    workload: Workload,
    pod_spec: dict,
    name: str,
    ordinal: int,
    run_dir: Path,
    python: str,
    ip: str | None,
    fqdn: str,
    restart_policy: str,
) -> LocalPod:
    """One local pod of `pod_spec` (its first container), per the rules in the module docstring."""
    shared_dir = run_dir / "shared"
    container = pod_spec["containers"][0]
    argv = [str(a) for a in list(container.get("command", [])) + list(container.get("args", []))]
    if not argv:
        raise LocalRunError(f"the {container.get('name', 'first')} container has no command: the chart must render one")
    pod_dir = run_dir / "pods" / name
    vol_dirs = _volume_dirs(workload, pod_spec, pod_dir, shared_dir)
    mounts = sorted(
        ((m["mountPath"], vol_dirs[m["name"]]) for m in container.get("volumeMounts", []) if m["name"] in vol_dirs),
        key=lambda item: -len(item[0]),
    )  # deepest mount wins
    env: dict[str, str] = _env_from(container.get("envFrom", []), workload)  # env wins, as in Kubernetes
    for item in container.get("env", []):
        if item.get("name") in API_ONLY_ENV:
            continue
        if "value" in item:
            env[item["name"]] = _rewrite_path(str(item["value"]), mounts)
        elif "fieldRef" in item.get("valueFrom", {}):
            env[item["name"]] = _field_ref(
                item["valueFrom"]["fieldRef"]["fieldPath"], name, workload.namespace, ip, workload
            )
        elif "configMapKeyRef" in item.get("valueFrom", {}):
            ref = item["valueFrom"]["configMapKeyRef"]
            env[item["name"]] = str(workload.configmaps.get(ref["name"], {}).get("data", {}).get(ref["key"], ""))
        elif "secretKeyRef" in item.get("valueFrom", {}):
            raise LocalRunError(f"env {item['name']} reads a Kubernetes Secret; the local run cannot provide one")
        else:
            env[item["name"]] = ""
    env.update(NO_API_SERVER)
    if pod_spec is workload.pod_spec and not env.get("TFMW_REPLICAS"):
        # The chart leaves TFMW_REPLICAS out when the workers read their group's size from the
        # StatefulSet through the API; here there is no API server: the rendered size it is.
        env["TFMW_REPLICAS"] = str(workload.replicas)
    for mount_path, local in mounts:
        if mount_path == "/tmp":
            env["TMPDIR"] = str(local)
        elif mount_path.startswith("/home/"):
            env["HOME"] = str(local)
    # Command arguments are rewritten only into the files the release ships (configMap volumes:
    # training.files, the training config): a host path a local user passes (a script under
    # /tmp, say) is not the container's /tmp emptyDir.
    configmap_volumes = {v["name"] for v in pod_spec.get("volumes", []) if "configMap" in v}
    shipped = [
        (path, local)
        for path, local in mounts
        if any(m["mountPath"] == path and m["name"] in configmap_volumes for m in container.get("volumeMounts", []))
    ]
    pod_argv = [
        python if (i == 0 or argv[i - 1] == "--") and a in ("python", "python3") else _rewrite_path(a, shipped)
        for i, a in enumerate(argv)
    ]
    return LocalPod(
        name=name,
        ordinal=ordinal,
        argv=pod_argv,
        env=env,
        pod_dir=pod_dir,
        hostname=name,
        fqdn=fqdn,
        ip=ip,
        files=configmap_files(workload, shared_dir, pod_spec),
        restart_policy=restart_policy,
    )


def build_pods(
    workload: Workload, run_dir: Path, python: str = sys.executable, ips: Mapping[int, str] | None = None
) -> list[LocalPod]:
    """The StatefulSet's pods (ordinals 0..replicas-1), then the evaluator's, if rendered
    (ordinal `replicas`: it is no member of the group, and its pod name is the Job's)."""
    service = workload.service["metadata"]["name"]
    domain = workload.env_value("TFMW_CLUSTER_DOMAIN") or "cluster.local"
    pods = []
    for ordinal in range(workload.replicas):
        name = f"{workload.name}-{ordinal}"
        pods.append(
            _local_pod(
                workload,
                workload.pod_spec,
                name,
                ordinal,
                run_dir,
                python,
                (ips or {}).get(ordinal),
                f"{name}.{service}.{workload.namespace}.svc.{domain}",
                "Always",
            )
        )
    if workload.evaluator is not None:
        spec = workload.evaluator["spec"]["template"]["spec"]
        name, ordinal = workload.evaluator["metadata"]["name"], workload.replicas
        pods.append(
            _local_pod(
                workload,
                spec,
                name,
                ordinal,
                run_dir,
                python,
                (ips or {}).get(ordinal),
                f"{name}.{workload.namespace}.pod.{domain}",
                spec.get("restartPolicy", "Never"),
            )
        )
    return pods


def image_env(dockerfile_text: str) -> dict[str, str]:
    """The `ENV` settings of the Dockerfile, so local pods see what the image sets
    (TF_USE_LEGACY_KERAS=1 above all); parsed by the image tooling's own Dockerfile reader."""
    return parse_dockerfile(dockerfile_text).env
