"""Values that would break a run are refused by `helm template` with a message naming the key.

Helm 4 reports JSON-schema errors as JSON pointers ("at '/workers/replicas': ..."), Helm 3 as
dotted paths ("workers.replicas: ..."); each case names the key once and is checked in the
form of the helm at hand. Template-level refusals (`fail`) read the same on both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import chartkit
import pytest

from tfmw.chart import helmkit, render, training_schema


@dataclass(frozen=True)
class Bad:
    sets: tuple[str, ...]
    key: str  # dotted path of the offending value
    unknown: bool = False  # an unknown key: the message names its parent and the key itself
    missing: bool = False  # a required key deleted (`=null`): the message names parent and key
    also: str = ""  # further text the message must carry (the reason or the fix)


def key_forms(key: str, unknown: bool, missing: bool, major: int) -> list[str]:
    """The substrings that name `key` in helm `major`'s schema error."""
    parent, _, leaf = key.rpartition(".")
    if missing:
        if major >= 4:
            return [f"at '/{parent.replace('.', '/')}': missing property '{leaf}'"]
        return [f"{parent}: {leaf} is required"]
    if unknown:
        if major >= 4:
            return [f"at '/{parent.replace('.', '/')}'" if parent else "at ''", f"'{leaf}' not allowed"]
        return [f"{parent or '(root)'}: Additional property {leaf} is not allowed"]
    if major >= 4:
        return [f"at '/{key.replace('.', '/')}'"]
    return [f"- {key}:"]


BAD_VALUES = {
    "replicas-zero": Bad(("workers.replicas=0",), "workers.replicas"),
    "replicas-string": Bad(("workers.replicas=two",), "workers.replicas"),
    "replicas-typo": Bad(("workers.replica=3",), "workers.replica", unknown=True),
    "top-level-typo": Bad(("worker.replicas=3",), "worker", unknown=True),
    "port-too-big": Bad(("workers.port=70000",), "workers.port"),
    "port-zero": Bad(("workers.port=0",), "workers.port"),
    "gpus-negative": Bad(("workers.gpus=-1",), "workers.gpus"),
    "gpus-fraction": Bad(("workers.gpus=0.5",), "workers.gpus"),
    "node-loss-toleration-negative": Bad(
        ("workers.nodeLossTolerationSeconds=-1",), "workers.nodeLossTolerationSeconds"
    ),
    "node-loss-toleration-fraction": Bad(
        ("workers.nodeLossTolerationSeconds=0.5",), "workers.nodeLossTolerationSeconds"
    ),
    "fullname-uppercase": Bad(("fullnameOverride=Trainer",), "fullnameOverride"),
    "fullname-digit-first": Bad(("fullnameOverride=1trainer",), "fullnameOverride"),
    "fullname-too-long": Bad((f"fullnameOverride={'a' * 53}",), "fullnameOverride"),
    "name-override-underscore": Bad(("nameOverride=tf_mw",), "nameOverride"),
    "run-id-not-dns": Bad(("training.runId=Run_1",), "training.runId"),
    "adopt-run-dir-string": Bad(("training.adoptRunDir=maybe",), "training.adoptRunDir"),
    "cluster-domain-not-dns": Bad(("clusterDomain=bad..domain",), "clusterDomain"),
    "peer-timeout-zero": Bad(("peers.timeoutSeconds=0",), "peers.timeoutSeconds"),
    "max-restarts-negative": Bad(("training.maxRestarts=-1",), "training.maxRestarts"),
    "same-error-limit-negative": Bad(("training.sameErrorLimit=-1",), "training.sameErrorLimit"),
    "hang-timeout-string": Bad(("training.hangTimeoutSeconds=soon",), "training.hangTimeoutSeconds"),
    "command-deleted": Bad(("training.command=null",), "training.command", missing=True),
    "replicas-deleted": Bad(("workers.replicas=null",), "workers.replicas", missing=True),
    "command-empty-word": Bad(("training.command={}",), "training.command.0"),
    "config-not-a-map": Bad(("training.config=steps",), "training.config"),
    "pull-policy": Bad(("image.pullPolicy=Sometimes",), "image.pullPolicy"),
    "digest-malformed": Bad(("image.digest=sha256:abc",), "image.digest"),
    "image-repository-uppercase": Bad(("image.repository=Registry/TFMW",), "image.repository"),
    "image-repository-with-a-digest": Bad(("image.repository=ghcr.io/ml/tfmw@sha256:0abc",), "image.repository"),
    "image-require-digest-string": Bad(("image.requireDigest=yes",), "image.requireDigest"),
    "image-pull-policy-case": Bad(("image.pullPolicy=always",), "image.pullPolicy"),
    "image-typo": Bad(("image.tags=1",), "image.tags", unknown=True),
    "storage-type": Bad(("storage.type=nfs",), "storage.type"),
    "mount-path-relative": Bad(("storage.mountPath=shared",), "storage.mountPath"),
    "resources-bad-quantity": Bad(("workers.resources.limits.memory=lots",), "workers.resources.limits.memory"),
    "node-selector-not-string": Bad(("workers.nodeSelector.gpu=true",), "workers.nodeSelector.gpu"),
    # The optional blocks (issue 5): storage, scheduling, security, GPUs.
    "claim-name-missing": Bad(("storage.type=existingClaim",), "storage.existingClaim.claimName"),
    "object-store-uri-missing": Bad(("storage.type=objectStore",), "storage.objectStore.uri"),
    "object-store-uri-scheme": Bad(
        ("storage.type=objectStore", "storage.objectStore.uri=http://x"), "storage.objectStore.uri"
    ),
    "object-store-credentials-in-values": Bad(
        ("storage.objectStore.accessKey=AKIA",), "storage.objectStore.accessKey", unknown=True
    ),
    "access-mode": Bad(("storage.createClaim.accessModes={ReadWriteSometimes}",), "storage.createClaim.accessModes.0"),
    "claim-size": Bad(("storage.createClaim.size=lots",), "storage.createClaim.size"),
    "gang-unknown": Bad(("scheduling.gang=slurm",), "scheduling.gang"),
    "kueue-without-queue": Bad(("scheduling.gang=kueue",), "scheduling.kueue.queueName"),
    "runai-without-project": Bad(("scheduling.gang=runai",), "scheduling.runai.project"),
    "cosched-timeout": Bad(
        ("scheduling.coscheduling.scheduleTimeoutSeconds=0",), "scheduling.coscheduling.scheduleTimeoutSeconds"
    ),
    "nccl-debug": Bad(("workers.nccl.debug=LOUD",), "workers.nccl.debug"),
    "nccl-extra-not-nccl": Bad(("workers.nccl.extraEnv.FOO=1",), "workers.nccl.extraEnv.FOO", unknown=True),
    "extra-env-from-unknown-field": Bad(
        ("workers.extraEnvFrom[0].secretRef.name=a", "workers.extraEnvFrom[0].sekretRef.name=b"),
        "workers.extraEnvFrom.0.sekretRef",
        unknown=True,
    ),
    "extra-env-from-nameless": Bad(
        ("workers.extraEnvFrom[0].secretRef.optional=true",), "workers.extraEnvFrom.0.secretRef.name", missing=True
    ),
    "extra-env-from-bad-name": Bad(
        ("workers.extraEnvFrom[0].secretRef.name=My_Secret",), "workers.extraEnvFrom.0.secretRef.name"
    ),
    "extra-env-from-bad-prefix": Bad(
        ("workers.extraEnvFrom[0].secretRef.name=a", "workers.extraEnvFrom[0].prefix=9-X"),
        "workers.extraEnvFrom.0.prefix",
    ),
    "network-policy-switch": Bad(("networkPolicy.enabled=maybe",), "networkPolicy.enabled"),
    "network-policy-typo": Bad(("networkPolicy.egres.restrict=false",), "networkPolicy.egres", unknown=True),
    "pdb-negative": Bad(("podDisruptionBudget.maxUnavailable=-1",), "podDisruptionBudget.maxUnavailable"),
    "writable-dir-relative": Bad(("writableDirs={tmp}",), "writableDirs.0"),
    "tensorboard-port": Bad(("tensorboard.port=0",), "tensorboard.port"),
    "shm-size": Bad(("workers.shm.sizeLimit=big",), "workers.shm.sizeLimit"),
    "grace-zero": Bad(("workers.terminationGracePeriodSeconds=0",), "workers.terminationGracePeriodSeconds"),
    "priority-class-uppercase": Bad(("workers.priorityClassName=High",), "workers.priorityClassName"),
    "service-account-typo": Bad(("serviceAccount.automount=true",), "serviceAccount.automount", unknown=True),
    # Finishing like a job (issue 11).
    "on-success-unknown": Bad(("completion.onSuccess=delete",), "completion.onSuccess"),
    "on-failure-case": Bad(("completion.onFailure=Idle",), "completion.onFailure"),
    "completion-typo": Bad(("completion.onSucess=idle",), "completion.onSucess", unknown=True),
    "token-expiry-below-api-minimum": Bad(
        ("completion.tokenExpirationSeconds=599",), "completion.tokenExpirationSeconds"
    ),
    "token-expiry-over-a-day": Bad(("completion.tokenExpirationSeconds=86401",), "completion.tokenExpirationSeconds"),
    "deadline-negative": Bad(("training.activeDeadlineSeconds=-1",), "training.activeDeadlineSeconds"),
    "deadline-string": Bad(("training.activeDeadlineSeconds=1h",), "training.activeDeadlineSeconds"),
    "rbac-switch": Bad(("rbac.create=maybe",), "rbac.create"),
    "rbac-deleted": Bad(("rbac.create=null",), "rbac.create", missing=True),
    # No ports would render an egress rule open to every port: the ports are required.
    "api-server-ports-deleted": Bad(
        ("networkPolicy.egress.apiServer.ports=null",), "networkPolicy.egress.apiServer.ports", missing=True
    ),
    "api-server-port-range": Bad(
        ("networkPolicy.egress.apiServer.ports={70000}",), "networkPolicy.egress.apiServer.ports.0"
    ),
    # Issue 21: the metrics endpoint.
    "metrics-port-zero": Bad(("metrics.port=0",), "metrics.port"),
    "metrics-port-too-big": Bad(("metrics.port=65536",), "metrics.port"),
    "metrics-switch": Bad(("metrics.enabled=yes",), "metrics.enabled"),
    "pod-monitor-interval": Bad(("metrics.podMonitor.interval=often",), "metrics.podMonitor.interval"),
}

# Refused by the templates (`fail`), with the same text on both helms.
TEMPLATE_REFUSALS = {
    "metrics-port-is-grpc": (
        ("metrics.port=2222",),
        "metrics.port=2222 is workers.port, the unauthenticated gRPC port: set metrics.port to another port",
    ),
    "extra-env-shadows-contract": (
        ("workers.extraEnv[0].name=TFMW_PORT", "workers.extraEnv[0].value=x"),
        "workers.extraEnv[0].name=TFMW_PORT: this variable is derived from values",
    ),
    "extra-env-sets-tf-config": (
        ("workers.extraEnv[0].name=TF_CONFIG", "workers.extraEnv[0].value=x"),
        "workers.extraEnv[0].name=TF_CONFIG",
    ),
    "extra-env-from-without-a-source": (
        ("workers.extraEnvFrom[0].prefix=WANDB_",),
        "workers.extraEnvFrom[0]: names no source; give it a secretRef",
    ),
    "extra-env-from-with-two-sources": (
        ("workers.extraEnvFrom[0].secretRef.name=a", "workers.extraEnvFrom[0].configMapRef.name=b"),
        "workers.extraEnvFrom[0]: has both a secretRef and a configMapRef",
    ),
    "extra-env-from-reserved-prefix": (
        ("workers.extraEnvFrom[0].secretRef.name=a", "workers.extraEnvFrom[0].prefix=tfmw_"),
        "workers.extraEnvFrom[0].prefix=tfmw_: names starting with TFMW_ (any case) are reserved",
    ),
    "tensorboard-without-shared-storage": (
        ("tensorboard.enabled=true",),
        "tensorboard.enabled=true needs shared storage",
    ),
    # The image has no S3 file system (tensorflow-io has no TF 2.21 release): refused, not
    # left to fail at the first checkpoint.
    "object-store-s3": (
        ("storage.type=objectStore", "storage.objectStore.uri=s3://bkt/runs"),
        "storage.objectStore.uri=s3://bkt/runs: the image's TensorFlow has no s3:// file system",
    ),
    "object-store-hdfs": (
        ("storage.type=objectStore", "storage.objectStore.uri=hdfs://nn/runs"),
        "storage.objectStore.uri=hdfs://nn/runs: the image's TensorFlow has no hdfs:// file system",
    ),
    # Issue 22: the evaluator, training.files and workers.extraVolumes / extraVolumeMounts.
    "evaluator-without-shared-storage": (("evaluator.enabled=true",), "evaluator.enabled=true needs shared storage"),
    "evaluator-with-a-user-command": (
        (
            "evaluator.enabled=true",
            "storage.type=createClaim",
            "training.command={python,/opt/tf-multiworker/files/main.py}",
        ),
        "evaluator.enabled=true evaluates the built-in trainer's checkpoints",
    ),
    "file-name-not-a-configmap-key": (
        ("training.files.my script\\.py=print(1)",),
        "training.files.my script.py: a file name may hold only letters",
    ),
    "extra-volume-host-path": (
        ("workers.extraVolumes[0].name=host", "workers.extraVolumes[0].hostPath.path=/var"),
        'workers.extraVolumes[0] (host) is a hostPath volume: Pod Security "restricted" allows only configMap, csi',
    ),
    "extra-volume-chart-name": (
        ("workers.extraVolumes[0].name=shared", "workers.extraVolumes[0].emptyDir.medium="),
        "workers.extraVolumes[0].name=shared: the chart names one of its own volumes so",
    ),
    "extra-mount-of-no-volume": (
        ("workers.extraVolumeMounts[0].name=data", "workers.extraVolumeMounts[0].mountPath=/data"),
        "workers.extraVolumeMounts[0].name=data names no entry of workers.extraVolumes",
    ),
    "extra-mount-over-the-config": (
        (
            "workers.extraVolumes[0].name=data",
            "workers.extraVolumes[0].emptyDir.medium=",
            "workers.extraVolumeMounts[0].name=data",
            "workers.extraVolumeMounts[0].mountPath=/etc/tf-multiworker",
        ),
        "workers.extraVolumeMounts[0].mountPath=/etc/tf-multiworker: the training config "
        "(read-only, fixed) is mounted there already",
    ),
    "extra-mount-over-the-shared-dir": (
        (
            "workers.extraVolumes[0].name=data",
            "workers.extraVolumes[0].emptyDir.medium=",
            "workers.extraVolumeMounts[0].name=data",
            "workers.extraVolumeMounts[0].mountPath=/shared",
        ),
        "workers.extraVolumeMounts[0].mountPath=/shared: storage.mountPath is mounted there already",
    ),
    "extra-mount-inside-the-files": (
        (
            "training.files.a\\.py=x",
            "workers.extraVolumes[0].name=data",
            "workers.extraVolumes[0].emptyDir.medium=",
            "workers.extraVolumeMounts[0].name=data",
            "workers.extraVolumeMounts[0].mountPath=/opt/tf-multiworker/files/data",
        ),
        "inside training.files (read-only, fixed), mounted read-only at /opt/tf-multiworker/files",
    ),
}


TEMPLATE_REFUSALS.update(
    {
        "shm-over-the-memory-limit": (
            ("workers.shm.sizeLimit=8Gi",),
            "workers.shm.sizeLimit=8Gi is more than workers.resources.limits.memory=4Gi: /dev/shm is memory",
        ),
        "memory-request-over-its-limit": (
            ("workers.resources.requests.memory=8Gi",),
            "workers.resources.requests.memory=8Gi is more than workers.resources.limits.memory=4Gi: a request may "
            "not exceed its limit",
        ),
        "cpu-request-over-its-limit-in-millicores": (
            ("workers.resources.requests.cpu=2500m",),
            "workers.resources.requests.cpu=2500m is more than workers.resources.limits.cpu=2",
        ),
        "tensorboard-request-over-its-limit": (
            ("tensorboard.resources.requests.memory=3Gi",),
            "tensorboard.resources.requests.memory=3Gi is more than tensorboard.resources.limits.memory=2Gi",
        ),
        "gpu-count-in-resources": (
            ("workers.resources.limits.nvidia\\.com/gpu=4",),
            "workers.resources.limits.nvidia.com/gpu=4: the GPU count is workers.gpus",
        ),
        "scale-to-zero-deletes-an-emptydir-model": (
            ("completion.onSuccess=scaleToZero",),
            "completion.onSuccess=scaleToZero with storage.type=emptyDir would delete the exported model",
        ),
        # A tag in the repository rendered `<repo>:1.2:<tag>`; a ':' before the last '/' is a port.
        "image-repository-with-a-tag": (
            ("image.repository=ghcr.io/ml/tfmw:1.2",),
            "image.repository=ghcr.io/ml/tfmw:1.2: the repository names a tag (1.2); give the repository alone "
            "and the tag as image.tag=1.2",
        ),
        "image-repository-with-a-port-and-a-tag": (
            ("image.repository=registry:5000/tfmw:latest",),
            "image.repository=registry:5000/tfmw:latest: the repository names a tag (latest)",
        ),
        "tests-image-repository-with-a-tag": (
            ("tests.image.repository=ghcr.io/ml/tfmw:1.2",),
            "tests.image.repository=ghcr.io/ml/tfmw:1.2: the repository names a tag (1.2); give the repository "
            "alone and the tag as tests.image.tag=1.2",
        ),
        # values/prod.yaml's rule: a tag can point to another build by the next node's pull.
        "image-digest-required": (
            ("image.requireDigest=true",),
            "image.digest is empty and image.requireDigest is true: pin the image with "
            "image.digest=sha256:<64 hex> (make SET=... or helm --set; `make image PUSH=1` prints it;",
        ),
    }
)


@pytest.mark.parametrize(
    "sets",
    [
        ("workers.shm.sizeLimit=4Gi", "workers.resources.limits.memory=4Gi"),  # equal is fine
        ("workers.resources.requests.cpu=1500m", "workers.resources.limits.cpu=1.5"),
        ("workers.shm.sizeLimit=4e9", "workers.resources.limits.memory=4Gi"),  # 4e9 < 4 * 2^30
        ("workers.shm.enabled=false", "workers.shm.sizeLimit=64Gi"),
        ("workers.resources.limits=null", "workers.shm.sizeLimit=64Gi"),  # no limit: nothing to exceed
    ],
)
def test_quantities_are_compared_by_value_not_by_spelling(helm, sets):
    assert chartkit.template(helm, sets=sets)


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_tfmw_says_each_schema_refusal_in_one_readable_line(case):
    """What `make template/deploy/local` print for each schema refusal: one line naming the key,
    the value, what a valid value looks like; never a regex or a nested schema dump."""
    bad = BAD_VALUES[case]
    values = render.layer_values(chartkit.CHART, [], list(bad.sets))
    with pytest.raises(helmkit.ToolError) as refused:
        render.validate_training_config(values)
        render.validate_values(values)
    line = str(refused.value)
    assert "\n" not in line and len(line) < 700, line
    root = bad.key.split(".")[0]
    assert line.startswith((f"unknown key {root}", f"invalid value for {root}", f"{root}.")), line
    assert not re.search(r"\^|\$'|\(\[|does not match|is not valid under any|Must validate", line), line


@pytest.fixture(scope="module")
def major(helm) -> int:
    return helmkit.helm_major(helm)


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_bad_value_is_refused_naming_the_key(helm, major, case):
    bad = BAD_VALUES[case]
    error = chartkit.template_error(helm, sets=bad.sets)
    assert "values don't meet the specifications of the schema" in error
    for form in key_forms(bad.key, bad.unknown, bad.missing, major):
        assert form in error, f"{case}: {form!r} not in {error!r}"
    if bad.also:
        assert bad.also in error


@pytest.mark.parametrize("case", sorted(TEMPLATE_REFUSALS))
def test_template_refusal_names_the_key(helm, case):
    sets, text = TEMPLATE_REFUSALS[case]
    error = chartkit.template_error(helm, sets=sets)
    assert text in error


def test_files_over_a_configmaps_limit_are_refused_naming_the_limit(helm, tmp_path):
    big = tmp_path / "weights.py"
    big.write_text("# " + "x" * (1024 * 1024) + "\n")
    result = chartkit.run_helm(
        helm, ["template", "t", str(chartkit.CHART), "--set-file", f"training.files.weights\\.py={big}"]
    )
    assert result.returncode != 0
    assert (
        "training.files: 1048589 bytes, over a ConfigMap's 1 MiB limit (1048576 bytes, less 16384 for its "
        "metadata: at most 1032192)"
    ) in result.stderr
    small = tmp_path / "main.py"
    small.write_text("print('ok')\n")
    assert (
        chartkit.run_helm(
            helm, ["template", "t", str(chartkit.CHART), "--set-file", f"training.files.main\\.py={small}"]
        ).returncode
        == 0
    )


def test_the_table_is_large_enough():
    assert len(BAD_VALUES) + len(TEMPLATE_REFUSALS) >= 20


def test_the_defaults_themselves_are_accepted(helm):
    """So a refusal above is about the bad value, not about a broken chart."""
    assert chartkit.template(helm)


# ---------------------------------------------------------------- issue 12: bad input never breaks,
# weakens or loses. Each case is refused before anything runs, naming the key.

A70 = "q" * 70
ISSUE12_SCHEMA = {
    # 1. YAML injection through unquoted strings: control characters are refused outright.
    "mount-path-newline": Bad(("storage.mountPath=/shared\n  readOnly: true",), "storage.mountPath"),
    "mount-path-root": Bad(("storage.mountPath=/",), "storage.mountPath"),
    "writable-dir-newline": Bad(("writableDirs[0]=/tmp\n- name: evil\n  mountPath: /etc/evil",), "writableDirs.0"),
    "sub-path-newline": Bad(
        (
            "storage.type=existingClaim",
            "storage.existingClaim.claimName=c",
            "storage.existingClaim.subPath=runs\n  readOnly: true",
        ),
        "storage.existingClaim.subPath",
    ),
    "object-store-uri-control": Bad(
        ("storage.type=objectStore", "storage.objectStore.uri=gs://b/x\x01y"), "storage.objectStore.uri"
    ),
    "sub-path-absolute": Bad(
        ("storage.type=existingClaim", "storage.existingClaim.claimName=c", "storage.existingClaim.subPath=/runs"),
        "storage.existingClaim.subPath",
    ),
    # 3. Label keys and values are Kubernetes' own syntax.
    "pod-label-bad-key": Bad(("workers.podLabels.bad key!=x",), "workers.podLabels.bad key!", unknown=True),
    "pod-label-bad-value": Bad(("workers.podLabels.team=a b",), "workers.podLabels.team"),
    "pod-label-value-too-long": Bad((f"workers.podLabels.team={'v' * 64}",), "workers.podLabels.team"),
    "node-selector-bad-key": Bad(("workers.nodeSelector.gpu type=a",), "workers.nodeSelector.gpu type", unknown=True),
    "pod-annotation-bad-key": Bad(("workers.podAnnotations.a b=c",), "workers.podAnnotations.a b", unknown=True),
    # 4. The opt-in is a boolean.
    "allow-unsafe-not-bool": Bad(("security.allowUnsafe=maybe",), "security.allowUnsafe"),
    "security-typo": Bad(("security.allowUnsave=true",), "security.allowUnsave", unknown=True),
    # 5. Egress rules hold peers and ports only; an empty peer or port is refused.
    "extra-rule-unknown-key": Bad(
        ("networkPolicy.egress.extraRules[0].too[0].ipBlock.cidr=10.0.0.0/8",),
        "networkPolicy.egress.extraRules.0.too",
        unknown=True,
    ),
    # 6. Environment variable names.
    "extra-env-space-name": Bad(
        ("workers.extraEnv[0].name=BAD NAME", "workers.extraEnv[0].value=x"), "workers.extraEnv.0.name"
    ),
    "extra-env-leading-space": Bad(
        ("workers.extraEnv[0].name= TF_CONFIG", "workers.extraEnv[0].value=x"), "workers.extraEnv.0.name"
    ),
    "extra-env-dash": Bad(
        ("workers.extraEnv[0].name=tf-config", "workers.extraEnv[0].value=x"), "workers.extraEnv.0.name"
    ),
    # 7. Numbers and enums.
    "cpu-request-negative": Bad(("workers.resources.requests.cpu=-1",), "workers.resources.requests.cpu"),
    "cpu-request-malformed": Bad(("workers.resources.requests.cpu=1.5.5",), "workers.resources.requests.cpu"),
    "memory-limit-negative": Bad(("workers.resources.limits.memory=-1",), "workers.resources.limits.memory"),
    "max-skew-negative": Bad(
        (
            "workers.topologySpreadConstraints[0].maxSkew=-1",
            "workers.topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
            "workers.topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
        ),
        "workers.topologySpreadConstraints.0.maxSkew",
    ),
    "when-unsatisfiable-maybe": Bad(
        (
            "workers.topologySpreadConstraints[0].maxSkew=1",
            "workers.topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
            "workers.topologySpreadConstraints[0].whenUnsatisfiable=Maybe",
        ),
        "workers.topologySpreadConstraints.0.whenUnsatisfiable",
    ),
    "kueue-queue-70-chars": Bad(
        ("scheduling.gang=kueue", f"scheduling.kueue.queueName={A70}"), "scheduling.kueue.queueName"
    ),
}
BAD_VALUES.update(ISSUE12_SCHEMA)

# Sizes need their unit, tolerations their enums, training.config the trainer's schema.
SIZES_AND_ENUMS = {
    "shm-size-bare-bytes": Bad(("workers.shm.sizeLimit=32",), "workers.shm.sizeLimit"),
    "claim-size-bare-bytes": Bad(("storage.createClaim.size=500",), "storage.createClaim.size"),
    "empty-dir-size-bare-bytes": Bad(("storage.emptyDir.sizeLimit=1000",), "storage.emptyDir.sizeLimit"),
    "memory-limit-bare-bytes": Bad(("workers.resources.limits.memory=4",), "workers.resources.limits.memory"),
    "memory-limit-gb": Bad(("workers.resources.limits.memory=16GB",), "workers.resources.limits.memory"),
    "ephemeral-storage-bare-bytes": Bad(
        ("workers.resources.requests.ephemeral-storage=10",), "workers.resources.requests.ephemeral-storage"
    ),
    "toleration-operator-typo": Bad(
        ("workers.tolerations[0].key=a", "workers.tolerations[0].operator=Exsts"), "workers.tolerations.0.operator"
    ),
    "toleration-effect-typo": Bad(
        ("workers.tolerations[0].key=a", "workers.tolerations[0].effect=NoScedule"), "workers.tolerations.0.effect"
    ),
    "toleration-unknown-key": Bad(
        ("workers.tolerations[0].key=a", "workers.tolerations[0].operater=Exists"),
        "workers.tolerations.0.operater",
        unknown=True,
    ),
    "evaluator-toleration-operator": Bad(
        ("evaluator.tolerations[0].key=a", "evaluator.tolerations[0].operator=exists"),
        "evaluator.tolerations.0.operator",
    ),
    "target-namespace-not-dns": Bad(("target.namespace=ML_Prod",), "target.namespace"),
}
BAD_VALUES.update(SIZES_AND_ENUMS)

SECURE = "restore the chart's default, or set security.allowUnsafe=true to run weaker pods on purpose"
# Refused by validateValues: (values as YAML text or --set items, the one line's start, what it says).
ISSUE12_TEMPLATE = {
    # 2. Duplicate mount paths, and mounts that would hide the image's or the chart's files.
    "mount-tmp": (("storage.mountPath=/tmp",), "writableDirs[0]=/tmp: storage.mountPath is mounted there already"),
    "mount-dev-shm": (
        ("storage.mountPath=/dev/shm",),
        "storage.mountPath=/dev/shm: workers.shm.enabled (/dev/shm) is mounted there already",
    ),
    "mount-config-dir": (
        ("storage.mountPath=/etc/tf-multiworker",),
        "storage.mountPath=/etc/tf-multiworker: the training config",
    ),
    "mount-api-dir": (
        ("storage.mountPath=/var/run/secrets/tf-multiworker/api",),
        "storage.mountPath=/var/run/secrets/tf-multiworker/api: the API credentials",
    ),
    "mount-inside-config-dir": (
        ("writableDirs={/tmp,/etc/tf-multiworker/x}",),
        "writableDirs[1]=/etc/tf-multiworker/x: inside the training config",
    ),
    "mount-above-config-dir": (("storage.mountPath=/etc",), "storage.mountPath=/etc: a volume there"),
    "mount-above-api-dir": (("writableDirs={/tmp,/var/run}",), "writableDirs[1]=/var/run: above the API credentials"),
    "mount-etc-hosts": (("storage.mountPath=/etc/hosts",), "storage.mountPath=/etc/hosts: the kubelet's own file"),
    "mount-proc": (("writableDirs={/proc/x}",), "writableDirs[0]=/proc/x: a volume there"),
    "mount-dot-dot": (
        ("storage.mountPath=/shared/../tmp",),
        "storage.mountPath=/shared/../tmp: not a clean absolute path",
    ),
    "writable-dirs-shared": (("writableDirs={/tmp,/shared}",), "writableDirs[1]=/shared: storage.mountPath is mounted"),
    "writable-dirs-duplicate": (
        "writableDirs: [/tmp, /home/tfmw, /tmp]\n",
        "writableDirs.2: ",
    ),  # schema: uniqueItems (see below)
    "sub-path-dot-dot": (
        (
            "storage.type=existingClaim",
            "storage.existingClaim.claimName=c",
            "storage.existingClaim.subPath=runs/../../etc",
        ),
        "storage.existingClaim.subPath=runs/../../etc: '..' would leave the claim",
    ),
    # 3. The chart's selector labels are not the user's to set.
    "pod-label-instance": (
        ("workers.podLabels.app\\.kubernetes\\.io/instance=other",),
        "workers.podLabels.app.kubernetes.io/instance: the chart",
    ),
    "pod-label-name": (
        ("workers.podLabels.app\\.kubernetes\\.io/name=x",),
        "workers.podLabels.app.kubernetes.io/name: ",
    ),
    "pod-label-component": (
        ("workers.podLabels.app\\.kubernetes\\.io/component=x",),
        "workers.podLabels.app.kubernetes.io/component: ",
    ),
    "pod-label-revision": (
        ("workers.podLabels.controller-revision-hash=x",),
        "workers.podLabels.controller-revision-hash: ",
    ),
    "pod-label-kueue-group": (
        (
            "scheduling.gang=kueue",
            "scheduling.kueue.queueName=q",
            "workers.podLabels.kueue\\.x-k8s\\.io/pod-group-name=x",
        ),
        "workers.podLabels.kueue.x-k8s.io/pod-group-name: with scheduling.gang=kueue, Kueue sets",
    ),
    "pod-annotation-kueue-count": (
        (
            "scheduling.gang=kueue",
            "scheduling.kueue.queueName=q",
            "workers.podAnnotations.kueue\\.x-k8s\\.io/pod-group-total-count=two",
        ),
        "workers.podAnnotations.kueue.x-k8s.io/pod-group-total-count: with scheduling.gang=kueue, Kueue sets",
    ),
    "common-label-kueue-queue": (
        ("scheduling.gang=kueue", "scheduling.kueue.queueName=q", "commonLabels.kueue\\.x-k8s\\.io/queue-name=other"),
        "commonLabels.kueue.x-k8s.io/queue-name: with scheduling.gang=kueue, Kueue sets",
    ),
    "pod-annotation-checksum": (
        ("workers.podAnnotations.checksum/training-config=x",),
        "workers.podAnnotations.checksum/training-config: the chart sets",
    ),
    # 4. Weakened security, unless security.allowUnsafe=true.
    "privileged": (("containerSecurityContext.privileged=true",), "containerSecurityContext.privileged=true: "),
    "container-root": (("containerSecurityContext.runAsUser=0",), "containerSecurityContext.runAsUser=0: "),
    "pod-root": (("podSecurityContext.runAsUser=0",), "podSecurityContext.runAsUser=0: "),
    "run-as-non-root-false": (
        ("containerSecurityContext.runAsNonRoot=false",),
        "containerSecurityContext.runAsNonRoot=false: ",
    ),
    "privilege-escalation": (
        ("containerSecurityContext.allowPrivilegeEscalation=true",),
        "containerSecurityContext.allowPrivilegeEscalation=true: ",
    ),
    "cap-sys-admin": (
        ("containerSecurityContext.capabilities.add={SYS_ADMIN}",),
        'containerSecurityContext.capabilities.add=["SYS_ADMIN"]: ',
    ),
    "cap-drop-none": (
        ("containerSecurityContext.capabilities.drop=null",),
        "containerSecurityContext.capabilities.drop=null: must include ALL",
    ),
    "writable-root": (
        ("containerSecurityContext.readOnlyRootFilesystem=false",),
        "containerSecurityContext.readOnlyRootFilesystem=false: ",
    ),
    "seccomp-unconfined": (
        ("containerSecurityContext.seccompProfile.type=Unconfined",),
        "containerSecurityContext.seccompProfile.type=Unconfined: ",
    ),
    "pod-seccomp-unconfined": (
        ("podSecurityContext.seccompProfile.type=Unconfined",),
        "podSecurityContext.seccompProfile.type=Unconfined: ",
    ),
    "apparmor-unconfined": (
        ("containerSecurityContext.appArmorProfile.type=Unconfined",),
        "containerSecurityContext.appArmorProfile.type=Unconfined: ",
    ),
    "apparmor-annotation": (
        ("workers.podAnnotations.container\\.apparmor\\.security\\.beta\\.kubernetes\\.io/worker=unconfined",),
        "workers.podAnnotations.container.apparmor.security.beta.kubernetes.io/worker=unconfined: ",
    ),
    "selinux-spc": (("podSecurityContext.seLinuxOptions.type=spc_t",), "podSecurityContext.seLinuxOptions="),
    "proc-mount": (("containerSecurityContext.procMount=Unmasked",), "containerSecurityContext.procMount=Unmasked: "),
    "unsafe-sysctl": (
        ("podSecurityContext.sysctls[0].name=kernel.msgmax", "podSecurityContext.sysctls[0].value=1"),
        "podSecurityContext.sysctls[0].name=kernel.msgmax: ",
    ),
    "host-process": (
        ("containerSecurityContext.windowsOptions.hostProcess=true",),
        "containerSecurityContext.windowsOptions.hostProcess=true: ",
    ),
    "null-pod-security-context": (("podSecurityContext=null",), "podSecurityContext is empty (null): "),
    "null-container-security-context": (
        ("containerSecurityContext=null",),
        "containerSecurityContext is empty (null): ",
    ),
    # 5. An egress rule without `to` and `ports` allows all egress.
    "egress-empty-rule": (
        "networkPolicy:\n  egress:\n    extraRules: [{}]\n",
        "networkPolicy.egress.extraRules[0] has no 'to' and no 'ports': ",
    ),
    "egress-empty-lists": (
        "networkPolicy:\n  egress:\n    extraRules: [{ports: [{port: 443}]}, {to: [], ports: []}]\n",
        "networkPolicy.egress.extraRules[1] has no 'to' and no 'ports': ",
    ),
    # 6. Names reserved for the chart and the entrypoint, in any case; duplicates.
    "extra-env-tf-config-lower": (
        ("workers.extraEnv[0].name=tf_config", "workers.extraEnv[0].value=x"),
        "workers.extraEnv[0].name=tf_config: this variable is derived",
    ),
    "extra-env-loopback-ports": (
        ("workers.extraEnv[0].name=TFMW_LOOPBACK_PORTS", "workers.extraEnv[0].value=x"),
        "workers.extraEnv[0].name=TFMW_LOOPBACK_PORTS: names starting with TFMW_",
    ),
    "extra-env-fault-pause": (
        ("workers.extraEnv[0].name=TFMW_FAULT_CHECKPOINT_PAUSE_SECONDS", "workers.extraEnv[0].value=x"),
        "workers.extraEnv[0].name=TFMW_FAULT_CHECKPOINT_PAUSE_SECONDS: names starting with TFMW_",
    ),
    "extra-env-tfmw-lower": (
        ("workers.extraEnv[0].name=tfmw_port", "workers.extraEnv[0].value=x"),
        "workers.extraEnv[0].name=tfmw_port: this variable is derived",
    ),
    "extra-env-duplicate": (
        (
            "workers.extraEnv[0].name=A",
            "workers.extraEnv[0].value=a",
            "workers.extraEnv[1].name=A",
            "workers.extraEnv[1].value=b",
        ),
        "workers.extraEnv[1].name=A: duplicate of workers.extraEnv[0]",
    ),
    "extra-env-nccl-twice": (
        ("workers.gpus=1", "workers.extraEnv[0].name=NCCL_DEBUG", "workers.extraEnv[0].value=INFO"),
        "workers.extraEnv[0].name=NCCL_DEBUG: the chart already sets it from workers.nccl",
    ),
    # 7. Numbers, schedulers, claims, the namespace.
    "pdb-over-replicas": (
        ("podDisruptionBudget.maxUnavailable=100",),
        "podDisruptionBudget.maxUnavailable=100 is more than workers.replicas=2: ",
    ),
    "volcano-default-scheduler": (
        ("scheduling.gang=volcano", "scheduling.schedulerName=default-scheduler"),
        "scheduling.schedulerName=default-scheduler with scheduling.gang=volcano: ",
    ),
    "cosched-default-scheduler": (
        ("scheduling.gang=coscheduling", "scheduling.schedulerName=default-scheduler"),
        "scheduling.schedulerName=default-scheduler with scheduling.gang=coscheduling: ",
    ),
    "rwo-claim-shared": (
        ("storage.type=createClaim", "storage.createClaim.accessModes={ReadWriteOnce}"),
        "storage.createClaim.accessModes=[ReadWriteOnce]: 2 pods (workers) write to the claim at once",
    ),
    "rox-claim": (
        ("storage.type=createClaim", "storage.createClaim.accessModes={ReadOnlyMany}", "workers.replicas=1"),
        "storage.createClaim.accessModes=[ReadOnlyMany]: 1 pods",
    ),
}
NAMESPACE_REFUSALS = {
    "Bad_NS": 'namespace "Bad_NS" is not a DNS-1123 label',
    "n" * 64: f'namespace "{"n" * 64}" is not a DNS-1123 label',
}


def _refusal(helm, tmp_path, values) -> str:
    if isinstance(values, str):
        path = tmp_path / "values.yaml"
        path.write_text(values)
        return chartkit.template_error(helm, [path])
    return chartkit.template_error(helm, sets=values)


def chart_problems(error: str) -> list[str]:
    """validateValues' problems: the first rides on helm's `Error: ...: ` line, each further one
    is a line of its own."""
    lines = [line for line in error.strip().splitlines() if line.strip() and not line.startswith("Use --debug")]
    prefix = "Error: execution error at (tf-multiworker/templates/statefulset.yaml:1:4): "
    assert lines[0].startswith(prefix), error
    return [lines[0][len(prefix) :], *lines[1:]]


@pytest.mark.parametrize("case", sorted(ISSUE12_TEMPLATE))
def test_issue12_refusal_is_one_line_naming_the_key(helm, major, tmp_path, case):
    values, start = ISSUE12_TEMPLATE[case]
    error = _refusal(helm, tmp_path, values)
    if case == "writable-dirs-duplicate":  # the schema's uniqueItems
        assert "values don't meet the specifications of the schema" in error
        assert ("at '/writableDirs'" if major >= 4 else "- writableDirs:") in error, error
        return
    problems = chart_problems(error)
    assert len(problems) == 1, problems
    assert problems[0].startswith(start), problems[0]
    if "SecurityContext" in start or "apparmor" in start:
        assert problems[0].endswith(SECURE + " (docs/security.md)")


@pytest.mark.parametrize("namespace", sorted(NAMESPACE_REFUSALS))
def test_a_namespace_that_is_not_a_dns_label_is_refused(helm, namespace):
    problems = chart_problems(chartkit.template_error(helm, namespace=namespace))
    assert len(problems) == 1 and problems[0].startswith(NAMESPACE_REFUSALS[namespace]), problems


def test_a_fullname_that_is_not_a_dns_label_is_listed_with_the_other_problems(helm):
    """The full name's check is validateValues' too: one problem among the others, not a
    `fail` of its own that would hide them."""
    problems = chart_problems(
        chartkit.template_error(helm, release="1abc", sets=("podDisruptionBudget.maxUnavailable=100",))
    )
    assert problems == [
        'fullname "1abc-tf-multiworker" is not a DNS-1035 label (it names the headless Service and must '
        "start with a letter): set fullnameOverride",
        "podDisruptionBudget.maxUnavailable=100 is more than workers.replicas=2: use at most 2 "
        "(1 drains one worker at a time)",
    ]


def test_every_template_refusal_is_in_validate_values():
    """Bitnami's pattern: one helper collects every problem and fails once. A `fail` or
    `required` anywhere else would stop at its own problem and hide the rest."""
    calls = re.compile(r"\b(fail|required)\s+[(\"]")
    where = [
        f"{path.relative_to(chartkit.CHART)}:{number}"
        for path in sorted((chartkit.CHART / "templates").rglob("*"))
        if path.is_file()
        for number, text in enumerate(path.read_text().splitlines(), 1)
        if calls.search(text)
    ]
    collector = (chartkit.CHART / "templates" / "_validate.tpl").read_text()
    validate = collector.split('define "tf-multiworker.validateValues"', 1)[1].split("{{- define ", 1)[0]
    assert len(where) == 1 and where[0].startswith("templates/_validate.tpl:"), where
    assert calls.search(validate), "the one fail is not in validateValues"


def test_validate_values_runs_every_rule_define():
    """Each rule is a small define in a _validate_*.tpl file; a define the collector does not
    name would never run, and a name without a define would render nothing, silently."""
    templates = chartkit.CHART / "templates"
    defined = {
        m.group(1)
        for path in templates.glob("_validate_*.tpl")
        for m in re.finditer(r'define "tf-multiworker\.validate\.(\w+)"', path.read_text())
    }
    collector = (templates / "_validate.tpl").read_text()
    listed = re.search(r"\$rules := list ([^}]*)\}\}", collector).group(1).replace('"', "").split()
    assert sorted(listed) == sorted(defined) and len(listed) == len(set(listed)), (listed, defined)


def test_several_problems_are_listed_one_per_line(helm):
    problems = chart_problems(
        chartkit.template_error(
            helm,
            sets=(
                "containerSecurityContext.privileged=true",
                "storage.mountPath=/tmp",
                "workers.extraEnv[0].name=TFMW_X",
                "workers.extraEnv[0].value=x",
            ),
        )
    )
    assert len(problems) == 3, problems
    assert [p.split(":")[0] for p in problems] == [
        "workers.extraEnv[0].name=TFMW_X",
        "writableDirs[0]=/tmp",
        "containerSecurityContext.privileged=true",
    ]


def test_allow_unsafe_is_the_documented_opt_in(helm):
    """security.allowUnsafe=true renders what is otherwise refused, exactly as asked."""
    objects = chartkit.template(
        helm,
        sets=(
            "security.allowUnsafe=true",
            "containerSecurityContext.privileged=true",
            "containerSecurityContext.capabilities.add={SYS_ADMIN}",
            "podSecurityContext=null",
        ),
    )
    sts = chartkit.one(objects, "StatefulSet")
    spec = sts["spec"]["template"]["spec"]
    assert spec["containers"][0]["securityContext"]["privileged"] is True
    assert "securityContext" not in spec
    assert "allowUnsafe: false" in (chartkit.CHART / "values.yaml").read_text()
    assert "security.allowUnsafe" in (chartkit.REPO / "docs" / "security.md").read_text()


def test_extra_rules_with_to_or_ports_are_kept(helm, tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(
        "networkPolicy:\n  egress:\n    extraRules:\n      - ports: [{port: 443, protocol: TCP}]\n"
        "      - to: [{ipBlock: {cidr: 10.0.0.0/8}}]\n"
    )
    policy = chartkit.one(
        chartkit.template(helm, [path]), "NetworkPolicy", f"{chartkit.RELEASE}-tf-multiworker-workers"
    )
    assert {"ports": [{"port": 443, "protocol": "TCP"}]} in policy["spec"]["egress"]
    assert {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]} in policy["spec"]["egress"]


@pytest.mark.parametrize("field", ["tensorboardFrom", "metricsFrom", "egress.apiServer.to"])
def test_an_empty_network_policy_peer_is_refused(helm, major, tmp_path, field):
    path = tmp_path / "peers.yaml"
    text = {
        "tensorboardFrom": "networkPolicy:\n  tensorboardFrom: [{}]\n",
        "metricsFrom": "networkPolicy:\n  metricsFrom: [{}]\n",
        "egress.apiServer.to": "networkPolicy:\n  egress:\n    apiServer:\n      to: [{}]\n",
    }[field]
    path.write_text(text)
    error = chartkit.template_error(helm, [path])
    key = f"networkPolicy.{field}.0"
    assert (f"at '/{key.replace('.', '/')}'" if major >= 4 else f"- {key}:") in error, error


def test_user_strings_are_quoted_wherever_printed(helm):
    """A value with YAML syntax in it stays one string (the schema refuses control characters;
    quoting keeps `: `, `#` and `{` inert as well)."""
    objects = chartkit.template(
        helm,
        sets=(
            "storage.type=existingClaim",
            "storage.existingClaim.claimName=c",
            "storage.mountPath=/data: x #y",
            "storage.existingClaim.subPath=runs/{a}: b #c",
            "writableDirs={/tmp,/scratch: z #w}",
            "tensorboard.enabled=true",
        ),
    )
    sts = chartkit.one(objects, "StatefulSet")
    mounts = {m["name"]: m for m in sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["shared"]["mountPath"] == "/data: x #y"
    assert mounts["shared"]["subPath"] == "runs/{a}: b #c"
    assert mounts["writable-1"]["mountPath"] == "/scratch: z #w"
    tb = chartkit.one(objects, "Deployment")
    assert (
        tb["spec"]["template"]["spec"]["containers"][0]["command"][1]
        == f"--logdir=/data: x #y/{chartkit.RELEASE}/tensorboard"
    )


@pytest.mark.parametrize("source", ["defaults", *chartkit.OVERLAYS, "all-on"])
def test_defaults_and_every_overlay_still_render(helm, source):
    files = {"defaults": [], "all-on": [chartkit.ALL_ON]}.get(source, [chartkit.overlay_path(source)])
    assert chartkit.template(helm, files)


# ---------------------------------------------------------------- 8. TF_CONFIG size at render

LONG_NS = "n" * 63
LONG_NAME = "a" * 52


def _entrypoint_tf_config_bytes(env: dict[str, str], replicas: int) -> int:
    """What the launcher of the last worker serializes and checks (entrypoint.cluster)."""
    import json

    from entrypoint import cluster, identity, settings

    env = dict(
        env,
        TFMW_REPLICAS=str(replicas),
        TFMW_NAMESPACE=LONG_NS,
        TFMW_POD_NAME=f"{env['TFMW_STATEFULSET']}-{replicas - 1}",
    )
    loaded = settings.load_settings(env)
    pod = identity.parse_pod_name(loaded.pod_name, loaded.replicas, loaded.statefulset)
    return len(json.dumps(cluster.build_tf_config(loaded, pod), separators=(",", ":")).encode())


def test_tf_config_size_boundary_agrees_with_the_entrypoint(helm):
    import entrypoint.cluster as cluster

    sets = (f"fullnameOverride={LONG_NAME}",)
    sts = chartkit.one(chartkit.template(helm, sets=sets, namespace=LONG_NS), "StatefulSet")
    env = {e["name"]: e["value"] for e in sts["spec"]["template"]["spec"]["containers"][0]["env"] if "value" in e}
    # The largest replica count whose TF_CONFIG the entrypoint accepts.
    fits = max(n for n in range(1, 1025) if _entrypoint_tf_config_bytes(env, n) <= cluster.MAX_TF_CONFIG_BYTES)
    over = _entrypoint_tf_config_bytes(env, fits + 1)
    assert over > cluster.MAX_TF_CONFIG_BYTES
    with pytest.raises(Exception, match="exceeds|over Linux"):
        cluster.check_tf_config_size("x" * over)
    cluster.check_tf_config_size("x" * _entrypoint_tf_config_bytes(env, fits))  # accepted
    assert chartkit.template(helm, sets=(*sets, f"workers.replicas={fits}"), namespace=LONG_NS)
    problems = chart_problems(
        chartkit.template_error(helm, sets=(*sets, f"workers.replicas={fits + 1}"), namespace=LONG_NS)
    )
    assert problems == [
        f"workers.replicas={fits + 1}: TF_CONFIG would be {over} bytes, over Linux's "
        f"{cluster.MAX_TF_CONFIG_BYTES}-byte limit for one environment variable (every pod would exit 2); "
        f"with these names at most {fits} workers fit: use workers.replicas={fits} or fewer, or shorter names "
        "(fullnameOverride, the namespace, clusterDomain)"
    ]


def test_the_issue_case_1024_workers_with_long_names_is_refused(helm):
    problems = chart_problems(
        chartkit.template_error(
            helm, sets=(f"fullnameOverride={LONG_NAME}", "workers.replicas=1024"), namespace=LONG_NS
        )
    )
    assert len(problems) == 1 and problems[0].startswith("workers.replicas=1024: TF_CONFIG would be 203752 bytes")
    assert "with these names at most 658 workers fit" in problems[0]  # what figure 4 computes


def test_helm_itself_refuses_a_training_config_the_trainer_would_refuse(helm, major):
    """values.schema.json carries the trainer's schema for training.config (with the built-in
    trainer), so a plain `helm install` refuses a typo too. Helm 3 names only `training` there
    (its validator hides the nested error); tfmw's own line names the key on both."""
    error = chartkit.template_error(helm, sets=("training.config.stepz=1",))
    assert (
        ("at '/training/config'" in error and "'stepz' not allowed" in error)
        if major >= 4
        else ("- training: Must validate" in error)
    ), error
    assert chartkit.template(helm, sets=("training.command={python,main.py}", "training.config.stepz=1"))


def test_the_charts_copy_of_the_trainer_schema_is_current():
    assert training_schema.main(["--check"]) == 0, "python -m tfmw.chart.training_schema --write"
