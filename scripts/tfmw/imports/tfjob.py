"""A Kubeflow TFJob (kubeflow.org/v1) as a values overlay of this chart (pure: no files, no helm).

    read_tfjob(text) -> (the TFJob dict, notes on the other documents)       or raises Refused
    convert(job, command=None) -> Conversion(overlay, unmapped, notes, refusal)
    convert_text(text, command=None) -> the same, from a file's text
    overlay_yaml(conversion, source) -> the overlay as YAML with a comment header

The chart runs one StatefulSet of N identical workers under MultiWorkerMirroredStrategy, its
ordinal 0 the chief: a TFJob's Chief (or Master) and Worker replicas become `workers.replicas`,
and one pod template (the Worker's) becomes the workers' values. What has no value in the chart is
listed in `unmapped` ("<TFJob path>: <why>"); a `refusal` is set only where the overlay could not
run at all: parameter servers, no command to run, not a TFJob.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from dataclasses import dataclass, field

import yaml

# What the chart's workers.extraVolumes take without security.allowUnsafe (Pod Security restricted).
from tfmw.chart.pss import RESTRICTED_VOLUME_TYPES
from tfmw.chart.training_schema import BUILTIN_TRAINER

API_VERSION = "kubeflow.org/v1"
REPLICA_TYPES = ("Chief", "Master", "Worker", "PS", "Evaluator")
# The operator's container name and port name for a TFJob (training-operator v1 tensorflow.go).
CONTAINER_NAME = "tensorflow"
PORT_NAME = "tfjob-port"
# schedulerName -> scheduling.gang: the scheduler whose PodGroup the chart renders itself.
GANG_OF_SCHEDULER = {"volcano": "volcano", "scheduler-plugins-scheduler": "coscheduling"}
NCCL_VALUES = {"NCCL_DEBUG": "debug", "NCCL_SOCKET_IFNAME": "socketIfname", "NCCL_IB_DISABLE": "ibDisable"}
GPU_VISIBILITY = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY = "kueue.x-k8s.io/priority-class"
# Pod spec keys that map one to one onto workers.<key>.
POD_KEYS = {
    "nodeSelector": "nodeSelector",
    "tolerations": "tolerations",
    "affinity": "affinity",
    "priorityClassName": "priorityClassName",
    "runtimeClassName": "runtimeClassName",
    "topologySpreadConstraints": "topologySpreadConstraints",
    "terminationGracePeriodSeconds": "terminationGracePeriodSeconds",
}
RELEASE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")
RESTART_NEVER = (
    "a TFJob's restartPolicy is about one pod, while the launcher restarts the whole group in place from the "
    "last checkpoint (training.maxRestarts, docs/failure-model.md); to restart nothing, as Never did, set "
    "training.maxRestarts: 0"
)
IMAGE_NOTE = (
    "the chart runs its launcher (`python -m entrypoint run`) in this image as user 1000 with a read-only "
    'root: build the image FROM the chart\'s (docs/image.md, "Your own training code"), or the workers do not start'
)


class Refused(Exception):
    """The TFJob cannot become an overlay that runs; str() is the one line saying why and what to change."""


@dataclass
class Conversion:
    overlay: dict = field(default_factory=dict)
    unmapped: list[str] = field(default_factory=list)  # "<TFJob path>: <why>", one a field
    notes: list[str] = field(default_factory=list)  # what a reader of the overlay must know (its header)
    refusal: str = ""  # set: no overlay, the run could not work


# ---------------------------------------------------------------- the file


def read_tfjob(text: str) -> tuple[dict, list[str]]:
    """The one TFJob of a (multi-document) YAML text and a note per other document, or Refused."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f" (line {where.line + 1})" if where else ""
        raise Refused(f"not YAML{line}: {getattr(err, 'problem', None) or err}; give a TFJob manifest") from None
    if not documents:
        raise Refused("no document in it: give a TFJob manifest (apiVersion kubeflow.org/v1, kind TFJob)")
    jobs = [(i, d) for i, d in enumerate(documents, 1) if isinstance(d, dict) and d.get("kind") == "TFJob"]
    if not jobs:
        kinds = ", ".join(_described(d) for d in documents)
        raise Refused(f"no TFJob in it (found {kinds}): only a TensorFlow job (kind TFJob) maps to this chart")
    if len(jobs) > 1:
        names = ", ".join(_described(d) for _, d in jobs)
        raise Refused(f"{len(jobs)} TFJobs in one file ({names}): give one TFJob per file, one overlay each")
    index, job = jobs[0]
    if job.get("apiVersion") != API_VERSION:
        raise Refused(
            f"apiVersion {job.get('apiVersion')!r} of TFJob {_name(job)}: only {API_VERSION} TFJobs are read "
            "(training-operator v1); convert the manifest to it first"
        )
    ignored = [
        f"document {i} ({_described(d)}) ignored: not a TFJob; apply it yourself if the job needs it"
        for i, d in enumerate(documents, 1)
        if i != index
    ]
    return job, ignored


def _described(document) -> str:
    if not isinstance(document, dict):
        return f"a {type(document).__name__}"
    return f"{document.get('kind') or 'no kind'} {_name(document)}".strip()


def _name(document: dict) -> str:
    meta = document.get("metadata") if isinstance(document.get("metadata"), dict) else {}
    return str(meta.get("name") or "")


def convert_text(text: str, command: list[str] | None = None) -> Conversion:
    try:
        job, ignored = read_tfjob(text)
    except Refused as refused:
        return Conversion(refusal=str(refused))
    conversion = convert(job, command)
    conversion.notes[:0] = ignored
    return conversion


# ---------------------------------------------------------------- the mapping


def convert(job: dict, command: list[str] | None = None) -> Conversion:
    """TFJob -> Conversion. `command` is what the image would run (its ENTRYPOINT + CMD) where the
    TFJob's container names none: `--command`."""
    conversion = Conversion()
    try:
        _Mapping(conversion, command).job(job)
    except Refused as refused:
        return Conversion(refusal=str(refused))
    except (AttributeError, TypeError, ValueError) as err:
        # a map where a list belongs (or the reverse): the API server would refuse this TFJob too
        return Conversion(
            refusal=f"not a valid TFJob: a field has the wrong type ({err}); "
            "check it with kubectl apply --dry-run=server"
        )
    return conversion


def _put(values: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        values = values.setdefault(key, {})
    values[last] = value


def _get(values: dict, dotted: str, default=None):
    for key in dotted.split("."):
        if not isinstance(values, dict) or key not in values:
            return default
        values = values[key]
    return values


def split_image(image: str) -> dict:
    """`[registry[:port]/]path[:tag][@sha256:...]` -> image.repository / tag / digest. Docker's
    implied `latest` is written out: the chart's empty tag means the chart's own image."""
    rest, _, digest = image.partition("@")
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    tag = ""
    if colon > slash:  # a ':' after the last '/' is a tag; before it, a registry port
        rest, tag = rest[:colon], rest[colon + 1 :]
    if digest and not DIGEST.match(digest):
        raise Refused(f"image {image}: digest {digest} is not sha256:<64 hex>, the only digest the chart takes")
    if tag and not TAG.match(tag):
        raise Refused(f"image {image}: {tag!r} is not a valid image tag")
    parts = {"repository": rest}
    if digest:
        parts["digest"] = digest
        if tag:
            parts["tag"] = tag
    else:
        parts["tag"] = tag or "latest"
    return parts


class _Mapping:
    def __init__(self, conversion: Conversion, command: list[str] | None):
        self.out = conversion
        self.values = conversion.overlay
        self.command = command
        self.total = 0

    def put(self, key: str, value) -> None:
        _put(self.values, key, value)

    def unmapped(self, path: str, why: str) -> None:
        self.out.unmapped.append(f"{path}: {why}")

    # ---- the whole job

    def job(self, job: dict) -> None:
        spec = job.get("spec") if isinstance(job.get("spec"), dict) else {}
        specs = self.replica_specs(spec.get("tfReplicaSpecs"))
        self.metadata(job.get("metadata") or {})
        chief_type = next((t for t in ("Chief", "Master") if t in specs), None)
        chief_count = self.count(specs, chief_type) if chief_type else 0
        worker_count = self.count(specs, "Worker") if "Worker" in specs else 0
        if chief_count > 1:
            raise Refused(
                f"spec.tfReplicaSpecs.{chief_type}.replicas is {chief_count}: TensorFlow has one chief; "
                f"set it to 1 (the chart's worker 0 is the chief)"
            )
        self.total = chief_count + worker_count
        if self.total == 0:
            raise Refused("spec.tfReplicaSpecs has no Chief, Master or Worker replica: nothing would train")
        self.put("workers.replicas", self.total)
        primary = "Worker" if worker_count else chief_type
        if chief_type and worker_count and chief_count:
            self.compare(specs[chief_type], specs["Worker"], chief_type)
        for key in spec:
            if key not in ("tfReplicaSpecs", "runPolicy"):
                self.spec_key(key, spec[key])
        prefix = f"spec.tfReplicaSpecs.{primary}"
        self.replica(specs[primary], prefix)
        if "Evaluator" in specs and self.count(specs, "Evaluator"):
            self.evaluator(specs["Evaluator"])
        self.run_policy(spec.get("runPolicy") or {}, specs[primary].get("restartPolicy"), prefix)

    def evaluator(self, replica: dict) -> None:
        """The chart's evaluator runs the built-in trainer's evaluation (a Job of one pod): the
        same thing when the job trains with the built-in trainer, else nothing of the job's own."""
        where = "spec.tfReplicaSpecs.Evaluator"
        if _get(self.values, "training.command") != BUILTIN_TRAINER:
            self.unmapped(
                where,
                "not run: the chart's evaluator (evaluator.enabled) evaluates the built-in trainer's checkpoints "
                "only; run your evaluator as a Job of its own that reads the checkpoints, or train with the "
                "built-in trainer (docs/training.md)",
            )
            return
        self.put("evaluator.enabled", True)
        pod = _get(replica, "template.spec", {}) or {}
        _, container = _main_container(pod)
        resources = (container or {}).get("resources") or {}
        if resources.get("requests") or resources.get("limits"):
            self.put("evaluator.resources", resources)
        for key in ("nodeSelector", "tolerations"):
            if pod.get(key):
                self.put(f"evaluator.{key}", pod[key])
        if self.count({"Evaluator": replica}, "Evaluator") > 1:
            self.unmapped(f"{where}.replicas", "the chart runs one evaluator")

    def replica_specs(self, given) -> dict:
        if not isinstance(given, dict) or not given:
            raise Refused("spec.tfReplicaSpecs is missing: a TFJob needs a Worker (or Chief) replica spec")
        canonical = {t.lower(): t for t in REPLICA_TYPES}
        specs: dict = {}
        for key, replica in given.items():
            kind = canonical.get(str(key).lower())
            if kind is None:
                raise Refused(f"spec.tfReplicaSpecs.{key}: not a TFJob replica type ({', '.join(REPLICA_TYPES)})")
            if kind in specs:
                raise Refused(f"spec.tfReplicaSpecs.{key}: {kind} is given twice; keep one")
            specs[kind] = replica if isinstance(replica, dict) else {}
        if "Chief" in specs and "Master" in specs:
            raise Refused("spec.tfReplicaSpecs has both Chief and Master: they are one role; keep one")
        if "PS" in specs and self.count(specs, "PS"):
            raise Refused(
                f"spec.tfReplicaSpecs.PS: {self.count(specs, 'PS')} parameter server(s): the chart runs "
                "MultiWorkerMirroredStrategy, which has no parameter servers (every worker holds the whole "
                "model); drop the PS replica spec and train with tf.distribute.MultiWorkerMirroredStrategy "
                "instead of ParameterServerStrategy, then import again"
            )
        return specs

    @staticmethod
    def count(specs: dict, kind: str) -> int:
        replicas = specs[kind].get("replicas", 1)  # the operator's default
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise Refused(f"spec.tfReplicaSpecs.{kind}.replicas: {replicas!r} is not a number of replicas")
        return replicas

    def compare(self, chief: dict, worker: dict, chief_type: str) -> None:
        """The chart has one pod template: name what the chief's would have had of its own."""
        for key in sorted(set(chief) | set(worker)):
            if key in ("replicas", "template"):
                continue
            if chief.get(key) != worker.get(key):
                self.unmapped(
                    f"spec.tfReplicaSpecs.{chief_type}.{key}", "differs from the Worker's: the Worker's is used"
                )
        chief_pod = _get(chief, "template.spec", {}) or {}
        worker_pod = _get(worker, "template.spec", {}) or {}
        chief_main, worker_main = _main_container(chief_pod), _main_container(worker_pod)
        for key in sorted(set(chief_pod) | set(worker_pod)):
            if key != "containers" and chief_pod.get(key) != worker_pod.get(key):
                self.unmapped(
                    f"spec.tfReplicaSpecs.{chief_type}.template.spec.{key}",
                    "differs from the Worker's: the chart gives every worker (the chief is worker 0) one pod "
                    "template, the Worker's",
                )
        for key in sorted(set(chief_main[1]) | set(worker_main[1])):
            if chief_main[1].get(key) != worker_main[1].get(key):
                self.unmapped(
                    f"spec.tfReplicaSpecs.{chief_type}.template.spec.containers[{chief_main[0]}].{key}",
                    "differs from the Worker's: the chart gives every worker (the chief is worker 0) one "
                    "container, the Worker's",
                )
        if _get(chief, "template.metadata") != _get(worker, "template.metadata"):
            self.unmapped(
                f"spec.tfReplicaSpecs.{chief_type}.template.metadata", "differs from the Worker's: the Worker's is used"
            )

    def spec_key(self, key: str, value) -> None:
        if key == "successPolicy" and value in ("", None, "Default"):
            return  # the chief's success is the job's: the chart's rule too
        reasons = {
            "successPolicy": "the chart's run succeeds when the chief finishes (the default policy); "
            "AllWorkers has no value here",
            "enableDynamicWorker": "the chart resizes by workers.replicas (the group re-forms at a checkpoint)",
        }
        self.unmapped(f"spec.{key}", reasons.get(key, "the chart has no value for it"))

    # ---- metadata

    def metadata(self, meta: dict) -> None:
        name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
        if name and len(name) <= 53 and RELEASE_NAME.match(name):
            self.put("target.release", name)
        elif name:
            self.unmapped("metadata.name", f"{name!r} is no Helm release name (a DNS-1123 label of at most 53)")
        if namespace:
            self.put("target.namespace", namespace)
        labels = dict(meta.get("labels") or {})
        queue = labels.pop(KUEUE_QUEUE, None)
        priority = labels.pop(KUEUE_PRIORITY, None)
        if queue:
            self.put("scheduling.gang", "kueue")
            self.put("scheduling.kueue.queueName", str(queue))
            if priority:
                self.put("scheduling.kueue.priorityClass", str(priority))
        elif priority:
            self.unmapped(f"metadata.labels.{KUEUE_PRIORITY}", "without a Kueue queue name the chart uses no Kueue")
        for key in sorted(labels):
            if key.startswith("kueue.x-k8s.io/"):
                self.unmapped(f"metadata.labels.{key}", "Kueue sets it itself on the chart's workers")
            else:
                self.values.setdefault("commonLabels", {})[key] = str(labels[key])  # a key may hold dots
        for key in sorted(meta.get("annotations") or {}):
            self.unmapped(
                f"metadata.annotations.{key}",
                "the TFJob's own annotations have no counterpart (the chart's commonAnnotations go on every "
                "object it creates: add there what still applies)",
            )

    # ---- the pod template

    def replica(self, replica: dict, prefix: str) -> None:
        template = replica.get("template") if isinstance(replica.get("template"), dict) else {}
        meta = template.get("metadata") or {}
        for key in ("labels", "annotations"):
            if meta.get(key):
                self.put("workers.podLabels" if key == "labels" else "workers.podAnnotations", dict(meta[key]))
        for key in sorted(meta):
            if key not in ("labels", "annotations"):
                self.unmapped(f"{prefix}.template.metadata.{key}", "the chart names its pods itself")
        pod = template.get("spec") if isinstance(template.get("spec"), dict) else {}
        index, main = _main_container(pod)
        if main is None:
            raise Refused(f"{prefix}.template.spec.containers is empty: the TFJob runs nothing")
        where = f"{prefix}.template.spec"
        self.container(main, f"{where}.containers[{index}]")
        self.volumes(pod, main, where, index)
        others = [c for i, c in enumerate(pod.get("containers") or []) if i != index]
        if others:
            self.put("workers.sidecars", others)
            self.out.notes.append(
                f"{len(others)} more container(s) of the pod became workers.sidecars: they get the chart's "
                "restricted securityContext where they set none"
            )
        if pod.get("initContainers"):
            self.put("workers.initContainers", pod["initContainers"])
        self.scheduler(pod.get("schedulerName"), where)
        for key in sorted(pod):
            self.pod_key(key, pod[key], where)

    def pod_key(self, key: str, value, where: str) -> None:
        if key in ("containers", "initContainers", "volumes", "schedulerName"):
            return
        if key in POD_KEYS:
            if value not in (None, "", [], {}):
                self.put(f"workers.{POD_KEYS[key]}", value)
        elif key == "imagePullSecrets":
            self.put("imagePullSecrets", value)
        elif key in ("serviceAccountName", "serviceAccount"):
            self.service_account(str(value or ""))
        elif key == "restartPolicy":
            self.unmapped(f"{where}.restartPolicy", "the operator sets its pods' restartPolicy from the replica spec's")
        elif key in ("securityContext", "hostNetwork", "hostPID", "hostIPC"):
            self.unmapped(
                f"{where}.{key}",
                "the chart's pods meet Pod Security restricted (podSecurityContext: user 1000, no host "
                "namespaces); weakening it is security.allowUnsafe with podSecurityContext (docs/security.md)",
            )
        else:
            self.unmapped(f"{where}.{key}", "the chart has no value for it")

    def service_account(self, name: str) -> None:
        if name in ("", "default"):
            return  # the chart's own account replaces the namespace's default
        self.put("serviceAccount.create", False)
        self.put("serviceAccount.name", name)
        self.out.notes.append(
            f"serviceAccount.name {name}: the chart binds its Role (status, scale to 0) to this account; "
            "it must be these workers' own"
        )

    def scheduler(self, name, where: str) -> None:
        if not name or name == "default-scheduler":
            return
        gang = GANG_OF_SCHEDULER.get(str(name))
        if gang and _get(self.values, "scheduling.gang") is None:
            self.put("scheduling.gang", gang)
        elif gang is None:
            self.put("scheduling.schedulerName", str(name))
        else:
            self.unmapped(f"{where}.schedulerName", f"{name} beside a Kueue queue: Kueue gates the pods, not {name}")

    # ---- the container

    def container(self, container: dict, where: str) -> None:
        self.image(container.get("image"), where)
        self.training_command(container, where)
        self.resources(container.get("resources") or {}, where)
        self.env(_items(container, "env", where), where)
        for key in sorted(container):
            self.container_key(key, container[key], where)

    def container_key(self, key: str, value, where: str) -> None:
        if key in ("name", "image", "command", "args", "resources", "env", "volumeMounts"):
            return
        if key == "imagePullPolicy":
            self.put("image.pullPolicy", value)
        elif key == "ports":
            self.ports(_items({"ports": value}, "ports", where), where)
        elif key == "envFrom":
            sources = _items({"envFrom": value}, "envFrom", where)
            if sources:
                self.put("workers.extraEnvFrom", sources)
        elif key == "workingDir":
            self.unmapped(
                f"{where}.workingDir",
                "the chart sets no working directory (the image's WORKDIR applies): give absolute paths in "
                "training.command",
            )
        elif key in ("livenessProbe", "readinessProbe", "startupProbe"):
            self.unmapped(f"{where}.{key}", "the launcher owns the probes (ready: the group trains; docs/contracts.md)")
        elif key == "securityContext":
            self.unmapped(
                f"{where}.securityContext",
                "the chart's containerSecurityContext applies (user 1000, read-only root, no capabilities); "
                "weakening it is security.allowUnsafe (docs/security.md)",
            )
        else:
            self.unmapped(f"{where}.{key}", "the chart has no value for it")

    def image(self, image, where: str) -> None:
        if not image:
            raise Refused(f"{where}.image is missing: the TFJob names no image to run")
        for key, value in split_image(str(image)).items():
            self.put(f"image.{key}", value)
        self.out.notes.append(f"{where}.image {image}: {IMAGE_NOTE}")

    def training_command(self, container: dict, where: str) -> None:
        command = [str(c) for c in _items(container, "command", where)]
        args = [str(a) for a in _items(container, "args", where)]
        if self.command:
            if command:
                self.out.notes.append(f"--command replaced {where}.command {shlex.join(command)}")
            command = list(self.command)
        if not command:
            raise Refused(
                f"{where} names no command{' (only args)' if args else ''}, and the image's own ENTRYPOINT/CMD "
                "cannot be read from the manifest (the chart's launcher replaces it): give what the image runs "
                "with --command (e.g. --command 'python /app/train.py'), or set training.command"
            )
        if any(not c for c in command):
            raise Refused(f"{where}.command has an empty item: every part of a command is a word")
        self.put("training.command", command)
        if args:
            self.put("training.args", args)

    def resources(self, resources: dict, where: str) -> None:
        limits = dict(resources.get("limits") or {})
        requests = dict(resources.get("requests") or {})
        gpus = limits.pop("nvidia.com/gpu", None)
        requested = requests.pop("nvidia.com/gpu", None)
        gpus = gpus if gpus is not None else requested
        if gpus is not None:
            try:
                count = int(str(gpus))
            except ValueError:
                raise Refused(f"{where}.resources nvidia.com/gpu: {gpus!r} is not a whole number of GPUs") from None
            self.put("workers.gpus", count)
        if not limits and not requests:
            self.out.notes.append(
                "workers.resources: the TFJob's container sets no CPU or memory, so the chart's defaults apply "
                "(requests cpu 1, memory 2Gi; limits cpu 2, memory 4Gi)"
            )
            return
        for name, value in limits.items():
            requests.setdefault(name, value)  # Kubernetes' own default: a request is its limit
        for name in requests:
            if name not in limits and name in ("cpu", "memory"):
                limits[name] = None  # null deletes the chart's default limit, as the TFJob set none
        self.put("workers.resources", {"requests": requests, "limits": limits})

    def env(self, env: list, where: str) -> None:
        extra = []
        for i, var in enumerate(env):
            name = str((var or {}).get("name") or "")
            path = f"{where}.env[{i}] {name}"
            if name.upper() == "TF_CONFIG" or name.upper().startswith("TFMW_"):
                self.unmapped(path, "the launcher sets it (TF_CONFIG from the pod's ordinal, docs/contracts.md)")
            elif name in GPU_VISIBILITY:
                self.unmapped(path, "the GPUs a worker sees are the ones workers.gpus allocates")
            elif name in NCCL_VALUES and set(var) <= {"name", "value"}:
                self.put(f"workers.nccl.{NCCL_VALUES[name]}", str(var.get("value", "")))
            else:
                extra.append(var)
        if extra:
            self.put("workers.extraEnv", extra)

    def ports(self, ports: list, where: str) -> None:
        for i, port in enumerate(ports):
            if port.get("name") == PORT_NAME or (len(ports) == 1 and not port.get("name")):
                self.put("workers.port", _count(port.get("containerPort", 2222), f"{where}.ports[{i}].containerPort"))
            else:
                self.unmapped(
                    f"{where}.ports[{i}] {port.get('name') or port.get('containerPort')}",
                    "the chart opens its own ports (grpc: workers.port; metrics: metrics.port)",
                )

    # ---- volumes

    def volumes(self, pod: dict, main: dict, where: str, index: int) -> None:
        volumes = {v.get("name"): v for v in _items(pod, "volumes", where)}
        mounts = _items(main, "volumeMounts", f"{where}.containers[{index}]")
        kept_mounts = []
        used_by_mounts: dict[str, int] = {}
        for mount in mounts:
            used_by_mounts[mount.get("name")] = used_by_mounts.get(mount.get("name"), 0) + 1
        storage = self.storage_claim(volumes, mounts, used_by_mounts)
        for i, mount in enumerate(mounts):
            volume = volumes.get(mount.get("name")) or {}
            if mount.get("mountPath") == "/dev/shm" and (volume.get("emptyDir") or {}).get("medium") == "Memory":
                limit = volume["emptyDir"].get("sizeLimit")
                if limit:
                    self.put("workers.shm.sizeLimit", str(limit))
                volumes.pop(mount.get("name"), None)
                continue
            if storage and mount is storage[1]:
                continue
            if _volume_type(volume) not in RESTRICTED_VOLUME_TYPES:
                self.unmapped(
                    f"{where}.containers[{index}].volumeMounts[{i}] {mount.get('mountPath')}",
                    f"its volume {mount.get('name')} is {_volume_type(volume) or 'not in spec.volumes'}",
                )
                continue
            kept_mounts.append(mount)
        kept_volumes = []
        for i, volume in enumerate(_items(pod, "volumes", where)):
            name = volume.get("name")
            if name not in volumes or (storage and name == storage[0]):
                continue
            kind = _volume_type(volume)
            if kind in RESTRICTED_VOLUME_TYPES:
                kept_volumes.append(volume)
            else:
                self.unmapped(
                    f"{where}.volumes[{i}] {name}",
                    f"{kind} is outside Pod Security restricted, which the chart's workers.extraVolumes keep to "
                    "(use a PersistentVolumeClaim, or security.allowUnsafe)",
                )
        if kept_volumes:
            self.put("workers.extraVolumes", kept_volumes)
        if kept_mounts:
            self.put("workers.extraVolumeMounts", kept_mounts)

    def storage_claim(self, volumes: dict, mounts: list, used: dict) -> tuple[str, dict] | None:
        """The one claim the job writes to (mounted once, read-write, whole) becomes the chart's
        shared storage: checkpoints, status and logs then outlive the pods, and the finished run
        frees its workers. Two or more such claims stay extra volumes: which one is shared is a choice."""
        writable = [
            m
            for m in mounts
            if "persistentVolumeClaim" in (volumes.get(m.get("name")) or {})
            and not m.get("readOnly")
            and not (volumes[m.get("name")]["persistentVolumeClaim"] or {}).get("readOnly")
            and not m.get("subPath")
            and not m.get("subPathExpr")
            and used.get(m.get("name")) == 1
        ]
        if len(writable) != 1:
            return None
        mount = writable[0]
        claim = volumes[mount["name"]]["persistentVolumeClaim"].get("claimName")
        self.put("storage.type", "existingClaim")
        self.put("storage.existingClaim.claimName", str(claim))
        self.put("storage.mountPath", str(mount.get("mountPath")))
        self.out.notes.append(
            f"storage: the claim {claim} at {mount.get('mountPath')} is the chart's shared storage: the run keeps "
            f"its checkpoints, status and logs in {mount.get('mountPath')}/<training.runId>; it must be "
            'ReadWriteMany (or every worker on one node; docs/chart.md, "Shared storage")'
        )
        return mount["name"], mount

    # ---- runPolicy and restartPolicy

    def run_policy(self, policy: dict, restart: str | None, prefix: str) -> None:
        backoff = policy.get("backoffLimit")
        if backoff is not None:
            self.put("training.maxRestarts", _count(backoff, "spec.runPolicy.backoffLimit"))
            self.out.notes.append(
                "training.maxRestarts from backoffLimit: the launcher counts restarts in place without progress "
                "between them (progress resets the count)"
            )
        if restart == "Never":
            # Never is about one pod, and the examples use it casually: copied as maxRestarts 0 it
            # would switch off the chart's main recovery for almost every migrated job.
            self.unmapped(f"{prefix}.restartPolicy Never", RESTART_NEVER)
            self.out.notes.append(f"restartPolicy Never is not copied: {RESTART_NEVER}")
        elif restart == "ExitCode":
            self.out.notes.append(
                "restartPolicy ExitCode: the launcher tells retryable from permanent failures itself "
                "(exit 2 permanent, 75 retryable; docs/contracts.md)"
            )
        elif restart not in (None, "Never", "OnFailure", "Always"):
            self.unmapped(f"{prefix}.restartPolicy", f"{restart!r} is not a TFJob restart policy")
        if policy.get("activeDeadlineSeconds") is not None:
            self.put(
                "training.activeDeadlineSeconds",
                _count(policy["activeDeadlineSeconds"], "spec.runPolicy.activeDeadlineSeconds"),
            )
        if policy.get("suspend") is True:
            self.put("suspend", True)
        if policy.get("cleanPodPolicy") == "None":
            self.unmapped(
                "spec.runPolicy.cleanPodPolicy None",
                "a finished run's workers scale to 0 (completion.onSuccess, onFailure) rather than stay as "
                "Completed pods; their logs stay readable with `make logs` from shared storage (logs.keepMiB)",
            )
        for key in sorted(policy):
            if key in ("backoffLimit", "activeDeadlineSeconds", "suspend", "cleanPodPolicy", "schedulingPolicy"):
                continue
            reasons = {
                "ttlSecondsAfterFinished": "the release stays until uninstalled (`make undeploy`); a finished run "
                "holds no pods",
                "managedBy": "the chart is managed by Helm (or a GitOps controller running it)",
            }
            self.unmapped(f"spec.runPolicy.{key}", reasons.get(key, "the chart has no value for it"))
        self.scheduling_policy(policy.get("schedulingPolicy") or {})

    def scheduling_policy(self, policy: dict) -> None:
        gang = _get(self.values, "scheduling.gang")
        where = "spec.runPolicy.schedulingPolicy"
        if policy and gang is None:
            self.unmapped(
                where,
                "the operator's gang scheduler is chosen by its own flag, not the TFJob: choose one with "
                "scheduling.gang (volcano, coscheduling, kueue; docs/scheduling.md)",
            )
            return
        for key in sorted(policy):
            value = policy[key]
            if key == "minAvailable":
                if value != self.total:
                    self.unmapped(
                        f"{where}.minAvailable {value}",
                        f"the chart's gang is every worker ({self.total}): MultiWorkerMirroredStrategy steps only "
                        "with all of them",
                    )
            elif key == "queue" and gang == "volcano":
                self.put("scheduling.volcano.queue", str(value))
            elif key == "scheduleTimeoutSeconds" and gang == "coscheduling":
                self.put("scheduling.coscheduling.scheduleTimeoutSeconds", _count(value, f"{where}.{key}"))
            elif key == "priorityClass" and not _get(self.values, "workers.priorityClassName"):
                self.put("workers.priorityClassName", str(value))
            elif key == "priorityClass" and _get(self.values, "workers.priorityClassName") == value:
                continue
            else:
                self.unmapped(f"{where}.{key}", f"no value of the chart's {gang} gang takes it")


def _items(owner: dict, key: str, where: str) -> list:
    """owner[key] as the list Kubernetes has there (missing: empty), or Refused naming the path."""
    value = owner.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise Refused(f"{where}.{key}: a {type(value).__name__} where Kubernetes takes a list")
    if key not in ("command", "args") and not all(isinstance(item, dict) for item in value):
        raise Refused(f"{where}.{key}: every item must be a map")
    return value


def _count(value, path: str) -> int:
    """A whole number the chart's schema takes (at least 0), or Refused naming the TFJob path."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Refused(f"{path}: {value!r} is not a whole number (at least 0)")
    return value


def _main_container(pod: dict) -> tuple[int, dict | None]:
    """The container the operator treats as TensorFlow's: the one named `tensorflow`, else the first."""
    containers = _items(pod, "containers", "the pod template")
    for i, c in enumerate(containers):
        if c.get("name") == CONTAINER_NAME:
            return i, c
    return (0, containers[0]) if containers else (0, None)


def _volume_type(volume: dict) -> str:
    return next((k for k in volume if k != "name"), "")


# ---------------------------------------------------------------- the overlay file


def overlay_yaml(conversion: Conversion, source: str) -> str:
    """The overlay with a header naming its source and what a reader must know before deploying."""
    lines = [
        f"# Values overlay for charts/tf-multiworker, converted by `tfmw import tfjob` from {source}.",
        "# Deploy: helm upgrade --install <release> charts/tf-multiworker -f <this file>, or",
        "# make deploy ENV=<env> VALUES=<this file> (its target block, the TFJob's name and namespace, wins",
        "# over the env's release and namespace). Read before deploying:",
    ]
    for note in conversion.notes:
        lines += textwrap.wrap(note, 100, initial_indent="#   - ", subsequent_indent="#     ", break_on_hyphens=False)
    body = yaml.safe_dump(conversion.overlay, sort_keys=False, default_flow_style=False, width=120)
    return "\n".join(lines) + "\n" + body
