"""Helm-side pieces of `tfmw deploy/status/diff/undeploy`: version-aware arguments, release state,
and one-line explanations of cluster failures. Pure functions where possible (tested for Helm 3
and Helm 4 without a cluster); the few that read the kubeconfig say so. The helm major version
they take comes from helmkit.helm_major.

Helm 3 vs Helm 4 (checked against `helm upgrade --help` of 3.17.2 and 4.1.4):
- rollback on failure: Helm 3 `--atomic`; Helm 4 `--rollback-on-failure` (4.1 still parses
  `--atomic` with a deprecation warning; Helm 3 has no `--rollback-on-failure`).
- wait: Helm 3 `--wait` is a boolean; Helm 4 `--wait` takes a strategy (`watcher`, `hookOnly`
  (its default: do not wait), `legacy`), so it is spelled `--wait=watcher` (kstatus readiness);
  Helm 3 refuses `--wait=watcher`.
  Both imply waiting when rollback on failure is asked for, so `wait=False` also drops it.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from tfmw.chart.helmkit import SUPPORTED_HELM_MAJORS, ToolError, helm_error_line, stderr_text
from tfmw.k8s import kubeconfig

PENDING_STATES = ("pending-install", "pending-upgrade", "pending-rollback", "uninstalling")


def upgrade_args(
    major: int,
    release: str,
    chart: str | Path,
    namespace: str,
    *,
    timeout: str = "15m",
    wait: bool = True,
    rollback_on_failure: bool = True,
    history_max: int = 10,
) -> list[str]:
    """`helm upgrade --install` arguments for the given helm major version; values come on stdin.

    Creates the namespace, waits for every worker to be ready (up to timeout) and rolls back
    on failure.
    """
    if major not in SUPPORTED_HELM_MAJORS:
        raise ValueError(f"unsupported helm major version {major}")
    args = [
        "upgrade",
        release,
        str(chart),
        "--install",
        "--namespace",
        namespace,
        "--create-namespace",
        "--values",
        "-",
        "--timeout",
        timeout,
        "--history-max",
        str(history_max),
        "--output",
        "json",
    ]
    if wait:
        args.append("--wait" if major == 3 else "--wait=watcher")
        if rollback_on_failure:
            args.append("--atomic" if major == 3 else "--rollback-on-failure")
    return args


def uninstall_args(major: int, release: str, namespace: str, *, timeout: str = "5m") -> list[str]:
    """`helm uninstall` that waits for the resources to be gone (flag spelled per version)."""
    if major not in SUPPORTED_HELM_MAJORS:
        raise ValueError(f"unsupported helm major version {major}")
    return [
        "uninstall",
        release,
        "--namespace",
        namespace,
        "--timeout",
        timeout,
        "--wait" if major == 3 else "--wait=watcher",
    ]


def refuse_pending(release: str, namespace: str, status: dict) -> None:
    """Refuse to deploy over a release stuck in a pending state, saying how to unstick it.

    `status` is `helm status -o json`. pyhelm3's ensure_release would silently uninstall or roll
    back here; an operator should decide that, since an uninstall deletes the running job.
    """
    info = status.get("info") or {}
    state = info.get("status", "")
    if state not in PENDING_STATES:
        return
    revision = int(status.get("version") or 0)
    ns = f"-n {namespace}"
    if state == "pending-install" or revision <= 1:
        fix = f"`helm uninstall {release} {ns}` (nothing to roll back to)"
    elif state == "uninstalling":
        fix = f"`helm uninstall {release} {ns}` to finish the uninstall"
    else:
        fix = (
            f"`helm rollback {release} {revision - 1} {ns}` (back to the last good revision), "
            f"or `helm uninstall {release} {ns}`"
        )
    raise ToolError(
        f"release {release} in namespace {namespace} is stuck in {state} (revision {revision}): "
        f"another helm operation is running or was interrupted; if none is running, {fix}, "
        "then deploy again",
        exit_code=3,
    )


_UNREACHABLE = re.compile(
    r"cluster unreachable|connection refused|no such host|i/o timeout|network is unreachable|"
    r"dial tcp|tls: |x509: |the server has asked for the client to provide credentials|"
    r"unable to connect to the server|current-context|invalid configuration|no configuration|"
    r"context \S+ does not exist",
    re.IGNORECASE,
)
_MISSING_CONTEXT = re.compile(r'context "?(?P<name>[^"\s]+)"? (does not exist|not found)', re.IGNORECASE)
LOCAL_CONTEXT = "tfmw-local"  # the context `make cluster` writes (scripts/tfmw/devcluster/controlplane.py)


def is_unreachable(stderr: str) -> bool:
    return bool(_UNREACHABLE.search(stderr))


def kube_contexts(kubeconfig_env: str | None = None) -> list[str]:
    """The context names of the kubeconfig in use (or `kubeconfig_env`'s files), read offline ([] if
    it cannot be read)."""
    try:
        return kubeconfig.contexts(kubeconfig.load(kubeconfig_env))
    except kubeconfig.KubeconfigError:
        return []


def kube_target(context: str | None = None, kubeconfig_env: str | None = None) -> str:
    """ "kube context 'X', server Y" for the kubeconfig in use (or `kubeconfig_env`'s files), read offline."""
    try:
        config = kubeconfig.load(kubeconfig_env)
    except kubeconfig.KubeconfigError:
        config = None
    if config is not None and (context in config.contexts if context else config.current_context in config.contexts):
        return kubeconfig.describe(kubeconfig.select(config, context))
    where = kubeconfig.in_use(kubeconfig_env)
    return f"kube context '{context}', which is not in {where}" if context else f"no current kube context in {where}"


def missing_kubeconfig_message(kubeconfig_env: str | None, exists=None) -> str | None:
    """One line when every file KUBECONFIG names is missing (None otherwise): kubectl and helm then
    fall back to http://localhost:8080, and their "connection refused" would hide the cause. After
    `make cluster-down` this is what `make deploy` meets: the local cluster's kubeconfig went with it."""
    import os

    exists = exists or os.path.exists
    paths = [p for p in (kubeconfig_env or "").split(os.pathsep) if p]
    if not paths or any(exists(p) for p in paths):
        return None
    return (
        f"KUBECONFIG={kubeconfig_env} does not exist, so there is no cluster to talk to (a local "
        "cluster's kubeconfig is removed by `make cluster-down`; `make cluster` starts one and "
        "prints the export line), or point KUBECONFIG at your cluster's kubeconfig"
    )


def missing_context_message(stderr: str, contexts: list[str], kubeconfig: str) -> str | None:
    """One line when the kube context asked for is not in the kubeconfig (None otherwise)."""
    match = _MISSING_CONTEXT.search(stderr)
    if not match:
        return None
    known = f"its contexts are {', '.join(contexts)}" if contexts else "it has no contexts"
    return (
        f"kube context '{match.group('name')}' does not exist in {kubeconfig} ({known}); "
        "pass --kube-context / KUBE_CONTEXT= one of them, or point KUBECONFIG at the right file"
    )


def unreachable_message(stderr: str, target: str) -> str:
    """One line: which cluster was tried and why it failed."""
    reason = re.sub(r"^kubernetes cluster unreachable:\s*", "", helm_error_line(stderr), flags=re.IGNORECASE)
    hint = "check KUBECONFIG / `kubectl config current-context`, or pass --kube-context"
    if f"'{LOCAL_CONTEXT}'" in target and re.search(r"connection refused|no route|timeout", reason, re.I):
        hint = "is the local cluster running? `make cluster` starts it (`make cluster-down` stopped it)"
    return f"cluster unreachable ({target}): {reason}; {hint}"


# ---------------------------------------------------------------- failed installs and upgrades

_REFUSED = re.compile(
    r'(?P<kind>[A-Za-z]+)(?:\.[a-z0-9.-]+)? "(?P<name>[^"]+)" is (?P<how>invalid|forbidden): '
    r"(?P<causes>.+)$"
)
_FIELD = re.compile(r"^\[?(?P<field>[A-Za-z][\w.\[\]/-]*(?:\[[^\]]*\])?[\w.\[\]/-]*): ")

# Where a field of the worker StatefulSet comes from in values.yaml, most specific first:
# the API server names the field, this names the value to change.
STATEFULSET_FIELD_VALUES = (
    ("spec.template.spec.containers[0].resources", "workers.resources / workers.gpus"),
    ("spec.template.spec.containers[0].securityContext", "containerSecurityContext"),
    ("spec.template.spec.containers[0].env", "workers.extraEnv / workers.nccl"),
    ("spec.template.spec.containers[0].image", "image"),
    ("spec.template.spec.securityContext", "podSecurityContext"),
    ("spec.template.spec.nodeSelector", "workers.nodeSelector"),
    ("spec.template.spec.tolerations", "workers.tolerations"),
    ("spec.template.spec.affinity", "workers.affinity"),
    ("spec.template.spec.topologySpreadConstraints", "workers.topologySpreadConstraints"),
    ("spec.template.spec.priorityClassName", "workers.priorityClassName"),
    ("spec.template.spec.imagePullSecrets", "imagePullSecrets"),
    ("spec.template.labels", "workers.podLabels"),
    ("spec.template.metadata.labels", "workers.podLabels"),
    ("spec.template.annotations", "workers.podAnnotations"),
    ("spec.template.metadata.annotations", "workers.podAnnotations"),
    ("spec.replicas", "workers.replicas"),
)


def api_refusal(helm_line: str) -> tuple[str, bool] | None:
    """helm's one-line error reduced to what the API server refused, or None if it is not a refusal.

    'release x failed, ...: failed to create resource: StatefulSet.apps "w" is invalid:
    spec.template.labels: Invalid value: "-bad-": a valid label must ...' ->
    ('the API server refused StatefulSet w: field spec.template.labels (values: workers.podLabels):
    Invalid value: "-bad-": a valid label must ...', True). The flag says whether it is invalid
    input (as opposed to forbidden: admission, quota, RBAC)."""
    match = _REFUSED.search(helm_line)
    if not match:
        return None
    kind, name, causes = match.group("kind"), match.group("name"), match.group("causes").strip()
    field = _FIELD.match(causes)
    where = ""
    if field:
        path = field.group("field")
        causes = causes[field.end() :]
        hint = next(
            (
                values
                for prefix, values in STATEFULSET_FIELD_VALUES
                if kind == "StatefulSet" and path.startswith(prefix)
            ),
            None,
        )
        where = f" field {path}" + (f" (values: {hint})" if hint else "")
    verdict = "refused" if match.group("how") == "invalid" else "forbade"
    where = f":{where}" if where else ""
    return f"the API server {verdict} {kind} {name}{where}: {causes.rstrip(']')}", match.group("how") == "invalid"


def helm_error_text(stderr: str | bytes) -> str:
    """helm's error as one line, continuation lines included: Helm 3 reports several errors as
    'Error: ...: 1 error occurred:' followed by tab-indented '* <error>' lines, which
    helmkit.helm_error_line (the last 'Error:' line alone) would drop."""
    stderr = stderr_text(stderr)
    lines = stderr.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.strip().lower().startswith("error:")]
    if not starts:
        return helm_error_line(stderr)
    tail = [ln.strip() for ln in lines[starts[-1] :] if ln.strip()]
    tail[0] = tail[0][len("error:") :].strip()
    return " ".join(" ".join(re.sub(r"^\*\s*", "", ln) for ln in tail).split())


def helm_failure_cause(helm_line: str) -> str:
    """helm's error without the rollback preamble (the caller reports what was rolled back)."""
    line = re.sub(r"^(UPGRADE|INSTALLATION) FAILED:\s*", "", helm_line, flags=re.IGNORECASE)
    return re.sub(
        r"^release \S+ failed, and has been (uninstalled|rolled back) due to "
        r"(rollback-on-failure|atomic) being set:\s*",
        "",
        line,
    )


def kept_claims(objects: list[dict]) -> list[str]:
    """Names of the PersistentVolumeClaims that `helm uninstall` keeps (helm.sh/resource-policy: keep)."""
    return [
        (o.get("metadata") or {}).get("name", "?")
        for o in objects
        if o.get("kind") == "PersistentVolumeClaim"
        and ((o.get("metadata") or {}).get("annotations") or {}).get("helm.sh/resource-policy") == "keep"
    ]


def after_failure(
    release: str,
    namespace: str,
    *,
    previous: dict | None,
    now: dict | None,
    rollback: bool,
    namespace_created: bool,
    pods_left: int,
    kept: list[str] = (),
) -> str:
    """What a failed `helm upgrade --install` left behind, as one clause.

    previous / now: `helm status -o json` before the deploy and after the failure (None: no release);
    kept: claims of the release that exist after it was uninstalled (resource-policy keep)."""
    ns = f"-n {namespace}"
    if now is None:
        what = (
            f"the failed install was rolled back: release {release} was uninstalled"
            if previous is None
            else f"release {release} is gone"
        )
        left = (
            f", {pods_left} worker pod{'s' if pods_left != 1 else ''} still terminating"
            if pods_left
            else " with its objects, no worker pod is left"
        )
        for claim in kept:
            left += (
                f"; kept by helm.sh/resource-policy: PersistentVolumeClaim {claim} (the shared storage; "
                f"a later deploy reuses it, `kubectl delete pvc {claim} {ns}` removes it)"
            )
        if namespace_created:
            left += (
                f"; namespace {namespace}, created by this deploy, is left{'' if kept else ' (empty)'}: "
                f"`kubectl delete namespace {namespace}` removes it"
            )
        return what + left
    state = (now.get("info") or {}).get("status", "?")
    revision = int(now.get("version") or 0)
    before = int((previous or {}).get("version") or 0)
    if state == "deployed" and previous is not None and revision > before:
        return (
            f"rolled back: release {release} is deployed again as revision {revision}, "
            f"the configuration of revision {before} that ran before this deploy"
        )
    if state == "failed" and not rollback:
        back = (
            f"`helm rollback {release} {before} {ns}`"
            if previous is not None
            else f"`make undeploy` / `helm uninstall {release} {ns}`"
        )
        return (
            f"kept for debugging (--no-rollback): release {release} revision {revision} is failed and its "
            f"objects stay as created; look with `make status`, then {back}"
        )
    return f"release {release} is {state} at revision {revision}"


# ---------------------------------------------------------------- manifests (diff, uninstall)


def manifest_objects(objects: list[dict]) -> list[dict]:
    """Objects helm records in a release manifest: hooks (e.g. `helm test` pods) are kept apart."""
    return [o for o in objects if "helm.sh/hook" not in ((o.get("metadata") or {}).get("annotations") or {})]


def object_key(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    ns = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind', '?')} {ns}{meta.get('name', '?')}"


def diff_manifests(recorded: list[dict], rendered: list[dict]) -> str:
    """Unified diff, object by object, of the release's recorded manifest vs. a fresh render."""
    import yaml

    def by_key(objects):
        return {object_key(o): yaml.safe_dump(o, sort_keys=True) for o in manifest_objects(objects)}

    old, new = by_key(recorded), by_key(rendered)
    chunks: list[str] = []
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key, ""), new.get(key, "")
        if before == after:
            continue
        chunks.extend(
            difflib.unified_diff(
                before.splitlines(keepends=True),
                after.splitlines(keepends=True),
                fromfile=f"deployed: {key}" if before else "/dev/null",
                tofile=f"rendered: {key}" if after else "/dev/null",
            )
        )
    return "".join(chunks).rstrip("\n")


def _shared_storage(objects: list[dict]) -> tuple[str | None, dict | None]:
    """(TFMW_SHARED_DIR, the pod volume mounted there) of the worker StatefulSet (docs/contracts.md)."""
    for sts in (o for o in objects if o.get("kind") == "StatefulSet"):
        pod = ((sts.get("spec") or {}).get("template") or {}).get("spec") or {}
        for container in pod.get("containers") or []:
            env = {e.get("name"): e.get("value") for e in container.get("env") or []}
            shared = env.get("TFMW_SHARED_DIR")
            if not shared:
                continue
            mount = next((m for m in container.get("volumeMounts") or [] if m.get("mountPath") == shared), None)
            volume = next((v for v in pod.get("volumes") or [] if mount and v.get("name") == mount.get("name")), None)
            return shared, volume
    return None, None


def storage_after_uninstall(objects: list[dict], namespace: str) -> list[str]:
    """What happens to the release's shared storage (TFMW_SHARED_DIR) once it is uninstalled."""
    claims = {(o.get("metadata") or {}).get("name"): o for o in objects if o.get("kind") == "PersistentVolumeClaim"}
    shared, volume = _shared_storage(objects)
    if shared is None:
        return ["shared storage: the release's workers declare no TFMW_SHARED_DIR; nothing to report"]
    if volume is None:
        return [
            f"shared storage {shared} (outside the cluster, e.g. an object store) is untouched: "
            "every run's checkpoints and models stay there"
        ]
    if "emptyDir" in volume:
        return [
            f"shared storage {shared} was an emptyDir: it was deleted with the pods, checkpoints "
            "and exported models included (use storage.type=createClaim or existingClaim to keep them)"
        ]
    claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
    if claim and claim in claims:
        meta = claims[claim].get("metadata") or {}
        ns = meta.get("namespace") or namespace
        if (meta.get("annotations") or {}).get("helm.sh/resource-policy") == "keep":
            return [
                f"kept: PersistentVolumeClaim {claim} (shared storage {shared}: checkpoints, "
                f"TensorBoard logs, exported models of every run); a new deploy of this release "
                f"reuses it; delete it when done with `kubectl delete pvc {claim} -n {ns}`"
            ]
        return [
            f"deleted with the release: PersistentVolumeClaim {claim} (shared storage {shared}); "
            "its data is gone unless the volume's reclaim policy is Retain"
        ]
    if claim:
        return [
            f"shared storage {shared} is the existing PersistentVolumeClaim {claim}: not part of the release, untouched"
        ]
    kind = next((k for k in volume if k != "name"), "volume")
    return [f"shared storage {shared} ({kind} volume) is not managed by the release: untouched"]
