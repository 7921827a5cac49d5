"""Values that would break a run are refused by `helm template` with a message naming the key.

Helm 4 reports JSON-schema errors as JSON pointers ("at '/workers/replicas': ..."), Helm 3 as
dotted paths ("workers.replicas: ..."); each case names the key once and is checked in the
form of the helm at hand. Template-level refusals (`fail`) read the same on both.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest

import chartkit


@dataclass(frozen=True)
class Bad:
    sets: tuple[str, ...]
    key: str            # dotted path of the offending value
    unknown: bool = False   # an unknown key: the message names its parent and the key itself
    missing: bool = False   # a required key deleted (`=null`): the message names parent and key
    also: str = ""      # further text the message must carry (the reason or the fix)


def key_forms(key: str, unknown: bool, missing: bool, major: int) -> list[str]:
    """The substrings that name `key` in helm `major`'s schema error."""
    parent, _, leaf = key.rpartition(".")
    if missing:
        if major >= 4:
            return [f"at '/{parent.replace('.', '/')}': missing property '{leaf}'"]
        return [f"{parent}: {leaf} is required"]
    if unknown:
        if major >= 4:
            return [f"at '/{parent.replace('.', '/')}'" if parent else "at ''",
                    f"'{leaf}' not allowed"]
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
    "fullname-uppercase": Bad(("fullnameOverride=Trainer",), "fullnameOverride"),
    "fullname-digit-first": Bad(("fullnameOverride=1trainer",), "fullnameOverride"),
    "fullname-too-long": Bad((f"fullnameOverride={'a' * 53}",), "fullnameOverride"),
    "name-override-underscore": Bad(("nameOverride=tf_mw",), "nameOverride"),
    "run-id-not-dns": Bad(("training.runId=Run_1",), "training.runId"),
    "cluster-domain-not-dns": Bad(("clusterDomain=bad..domain",), "clusterDomain"),
    "peer-timeout-zero": Bad(("peers.timeoutSeconds=0",), "peers.timeoutSeconds"),
    "max-restarts-negative": Bad(("training.maxRestarts=-1",), "training.maxRestarts"),
    "hang-timeout-string": Bad(("training.hangTimeoutSeconds=soon",), "training.hangTimeoutSeconds"),
    "command-deleted": Bad(("training.command=null",), "training.command", missing=True),
    "replicas-deleted": Bad(("workers.replicas=null",), "workers.replicas", missing=True),
    "command-empty-word": Bad(("training.command={}",), "training.command.0"),
    "config-not-a-map": Bad(("training.config=steps",), "training.config"),
    "pull-policy": Bad(("image.pullPolicy=Sometimes",), "image.pullPolicy"),
    "digest-malformed": Bad(("image.digest=sha256:abc",), "image.digest"),
    "image-repository-uppercase": Bad(("image.repository=Registry/TFMW",), "image.repository"),
    "image-typo": Bad(("image.tags=1",), "image.tags", unknown=True),
    "storage-type": Bad(("storage.type=nfs",), "storage.type"),
    "mount-path-relative": Bad(("storage.mountPath=shared",), "storage.mountPath"),
    "resources-bad-quantity": Bad(("workers.resources.limits.memory=lots",),
                                  "workers.resources.limits.memory"),
    "node-selector-not-string": Bad(("workers.nodeSelector.gpu=true",),
                                    "workers.nodeSelector.gpu"),
    # The optional blocks (issue 5): storage, scheduling, security, GPUs.
    "claim-name-missing": Bad(("storage.type=existingClaim",), "storage.existingClaim.claimName"),
    "object-store-uri-missing": Bad(("storage.type=objectStore",), "storage.objectStore.uri"),
    "object-store-uri-scheme": Bad(("storage.type=objectStore", "storage.objectStore.uri=http://x"),
                                   "storage.objectStore.uri"),
    "object-store-credentials-in-values": Bad(("storage.objectStore.accessKey=AKIA",),
                                              "storage.objectStore.accessKey", unknown=True),
    "access-mode": Bad(("storage.createClaim.accessModes={ReadWriteSometimes}",),
                       "storage.createClaim.accessModes.0"),
    "claim-size": Bad(("storage.createClaim.size=lots",), "storage.createClaim.size"),
    "gang-unknown": Bad(("scheduling.gang=slurm",), "scheduling.gang"),
    "kueue-without-queue": Bad(("scheduling.gang=kueue",), "scheduling.kueue.queueName"),
    "runai-without-project": Bad(("scheduling.gang=runai",), "scheduling.runai.project"),
    "cosched-timeout": Bad(("scheduling.coscheduling.scheduleTimeoutSeconds=0",),
                           "scheduling.coscheduling.scheduleTimeoutSeconds"),
    "nccl-debug": Bad(("workers.nccl.debug=LOUD",), "workers.nccl.debug"),
    "nccl-extra-not-nccl": Bad(("workers.nccl.extraEnv.FOO=1",), "workers.nccl.extraEnv.FOO",
                               unknown=True),
    "network-policy-switch": Bad(("networkPolicy.enabled=maybe",), "networkPolicy.enabled"),
    "network-policy-typo": Bad(("networkPolicy.egres.restrict=false",), "networkPolicy.egres",
                               unknown=True),
    "pdb-negative": Bad(("podDisruptionBudget.maxUnavailable=-1",), "podDisruptionBudget.maxUnavailable"),
    "writable-dir-relative": Bad(("writableDirs={tmp}",), "writableDirs.0"),
    "tensorboard-port": Bad(("tensorboard.port=0",), "tensorboard.port"),
    "shm-size": Bad(("workers.shm.sizeLimit=big",), "workers.shm.sizeLimit"),
    "grace-zero": Bad(("workers.terminationGracePeriodSeconds=0",),
                      "workers.terminationGracePeriodSeconds"),
    "priority-class-uppercase": Bad(("workers.priorityClassName=High",), "workers.priorityClassName"),
    "service-account-typo": Bad(("serviceAccount.automount=true",), "serviceAccount.automount",
                                unknown=True),
    # Finishing like a job (issue 11).
    "on-success-unknown": Bad(("completion.onSuccess=delete",), "completion.onSuccess"),
    "on-failure-case": Bad(("completion.onFailure=Idle",), "completion.onFailure"),
    "completion-typo": Bad(("completion.onSucess=idle",), "completion.onSucess", unknown=True),
    "token-expiry-below-api-minimum": Bad(("completion.tokenExpirationSeconds=599",),
                                          "completion.tokenExpirationSeconds"),
    "token-expiry-over-a-day": Bad(("completion.tokenExpirationSeconds=86401",),
                                   "completion.tokenExpirationSeconds"),
    "deadline-negative": Bad(("training.activeDeadlineSeconds=-1",), "training.activeDeadlineSeconds"),
    "deadline-string": Bad(("training.activeDeadlineSeconds=1h",), "training.activeDeadlineSeconds"),
    "rbac-switch": Bad(("rbac.create=maybe",), "rbac.create"),
    "rbac-deleted": Bad(("rbac.create=null",), "rbac.create", missing=True),
    # No ports would render an egress rule open to every port: the ports are required.
    "api-server-ports-deleted": Bad(("networkPolicy.egress.apiServer.ports=null",),
                                    "networkPolicy.egress.apiServer.ports", missing=True),
    "api-server-port-range": Bad(("networkPolicy.egress.apiServer.ports={70000}",),
                                 "networkPolicy.egress.apiServer.ports.0"),
}

# Refused by the templates (`fail`), with the same text on both helms.
TEMPLATE_REFUSALS = {
    "extra-env-shadows-contract": (("workers.extraEnv[0].name=TFMW_PORT",
                                    "workers.extraEnv[0].value=x"),
                                   "workers.extraEnv[0].name=TFMW_PORT: this variable is derived from values"),
    "extra-env-sets-tf-config": (("workers.extraEnv[0].name=TF_CONFIG", "workers.extraEnv[0].value=x"),
                                 "workers.extraEnv[0].name=TF_CONFIG"),
    "tensorboard-without-shared-storage": (("tensorboard.enabled=true",),
                                           "tensorboard.enabled=true needs shared storage"),
    # The image has no S3 file system (tensorflow-io has no TF 2.21 release): refused, not
    # left to fail at the first checkpoint.
    "object-store-s3": (("storage.type=objectStore", "storage.objectStore.uri=s3://bkt/runs"),
                        "storage.objectStore.uri=s3://bkt/runs: the image's TensorFlow has no s3:// file system"),
    "object-store-hdfs": (("storage.type=objectStore", "storage.objectStore.uri=hdfs://nn/runs"),
                          "storage.objectStore.uri=hdfs://nn/runs: the image's TensorFlow has no hdfs:// file system"),
}


@pytest.fixture(scope="module")
def major(helm) -> int:
    return chartkit.helm_major(helm)


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


def test_the_table_is_large_enough():
    assert len(BAD_VALUES) + len(TEMPLATE_REFUSALS) >= 20


def test_the_defaults_themselves_are_accepted(helm):
    """So a refusal above is about the bad value, not about a broken chart."""
    assert chartkit.template(helm)
