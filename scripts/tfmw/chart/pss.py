"""Pod Security Standards "restricted" profile (Kubernetes 1.30+), checked on a pod spec.

Used on the deploy path (scripts/tfmw/chart/render.py: `make template`, `make deploy`, `make local` refuse
a rendered pod that violates it unless security.allowUnsafe=true) and by the chart tests.
One function per control of https://kubernetes.io/docs/concepts/security/pod-security-standards/
(baseline controls included: restricted is a superset). Each returns the violations as
one-line strings naming the field, so a failing test says what to fix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

RESTRICTED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
ALLOWED_SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def containers(spec: dict) -> list[tuple[str, dict]]:
    found = []
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(field) or []:
            found.append((f"{field}[{c.get('name', '?')}]", c))
    return found


def _sc(obj: dict) -> dict:
    return obj.get("securityContext") or {}


def host_namespaces(spec, _annotations):
    return [f"spec.{f}=true" for f in ("hostNetwork", "hostPID", "hostIPC") if spec.get(f)]


def host_process(spec, _annotations):
    out = []
    for where, sc in [("spec", _sc(spec))] + [(n, _sc(c)) for n, c in containers(spec)]:
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"{where}.securityContext.windowsOptions.hostProcess=true")
    return out


def privileged(spec, _annotations):
    return [f"{n}.securityContext.privileged=true" for n, c in containers(spec) if _sc(c).get("privileged")]


def host_ports(spec, _annotations):
    return [
        f"{n}.ports.hostPort={p['hostPort']}"
        for n, c in containers(spec)
        for p in c.get("ports") or []
        if p.get("hostPort")
    ]


def apparmor(spec, annotations):
    out = []
    for where, sc in [("spec", _sc(spec))] + [(n, _sc(c)) for n, c in containers(spec)]:
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            out.append(f"{where}.securityContext.appArmorProfile.type=Unconfined")
    for key, value in (annotations or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            out.append(f"annotation {key}={value}")
    return out


def selinux(spec, _annotations):
    out = []
    for where, sc in [("spec", _sc(spec))] + [(n, _sc(c)) for n, c in containers(spec)]:
        options = sc.get("seLinuxOptions") or {}
        if options.get("type", "") not in ALLOWED_SELINUX_TYPES:
            out.append(f"{where}.securityContext.seLinuxOptions.type={options['type']}")
        for field in ("user", "role"):
            if options.get(field):
                out.append(f"{where}.securityContext.seLinuxOptions.{field} is set")
    return out


def proc_mount(spec, _annotations):
    return [
        f"{n}.securityContext.procMount={_sc(c)['procMount']}"
        for n, c in containers(spec)
        if _sc(c).get("procMount", "Default") != "Default"
    ]


def sysctls(spec, _annotations):
    return [
        f"spec.securityContext.sysctls {s['name']} is not a safe sysctl"
        for s in _sc(spec).get("sysctls") or []
        if s.get("name") not in SAFE_SYSCTLS
    ]


def volume_types(spec, _annotations):
    out = []
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            out.append(f"volume {volume.get('name')}: type {sorted(kinds - RESTRICTED_VOLUME_TYPES)}")
    return out


def privilege_escalation(spec, _annotations):
    return [
        f"{n}.securityContext.allowPrivilegeEscalation must be false"
        for n, c in containers(spec)
        if _sc(c).get("allowPrivilegeEscalation") is not False
    ]


def run_as_non_root(spec, _annotations):
    pod_level = _sc(spec).get("runAsNonRoot")
    out = []
    for n, c in containers(spec):
        value = _sc(c).get("runAsNonRoot")
        if value is False or (value is None and pod_level is not True):
            out.append(f"{n}.securityContext.runAsNonRoot must be true (or set on the pod)")
    return out


def run_as_user(spec, _annotations):
    out = []
    for where, sc in [("spec", _sc(spec))] + [(n, _sc(c)) for n, c in containers(spec)]:
        if sc.get("runAsUser") == 0:
            out.append(f"{where}.securityContext.runAsUser=0")
    return out


def seccomp(spec, _annotations):
    allowed = {"RuntimeDefault", "Localhost"}
    pod_type = (_sc(spec).get("seccompProfile") or {}).get("type")
    out = []
    if pod_type is not None and pod_type not in allowed:
        out.append(f"spec.securityContext.seccompProfile.type={pod_type}")
    for n, c in containers(spec):
        ctype = (_sc(c).get("seccompProfile") or {}).get("type")
        if ctype is not None and ctype not in allowed:
            out.append(f"{n}.securityContext.seccompProfile.type={ctype}")
        elif ctype is None and pod_type not in allowed:
            out.append(f"{n}: no seccompProfile RuntimeDefault/Localhost on container or pod")
    return out


def capabilities(spec, _annotations):
    out = []
    for n, c in containers(spec):
        caps = _sc(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{n}.securityContext.capabilities.drop must include ALL")
        extra = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
        if extra:
            out.append(f"{n}.securityContext.capabilities.add {sorted(extra)} not allowed")
    return out


CONTROLS: dict[str, Callable[[dict, dict], list[str]]] = {
    "host namespaces": host_namespaces,
    "HostProcess": host_process,
    "privileged containers": privileged,
    "host ports": host_ports,
    "AppArmor": apparmor,
    "SELinux": selinux,
    "/proc mount type": proc_mount,
    "sysctls": sysctls,
    "volume types": volume_types,
    "privilege escalation": privilege_escalation,
    "running as non-root": run_as_non_root,
    "running as non-root user": run_as_user,
    "seccomp": seccomp,
    "capabilities": capabilities,
}


def restricted_violations(spec: dict, annotations: dict | None = None) -> list[str]:
    """Every violation of the restricted profile, as 'control: detail'."""
    return [f"{control}: {detail}" for control, check in CONTROLS.items() for detail in check(spec, annotations or {})]


def pod_templates(objects: Iterable[dict]) -> list[tuple[str, dict, dict]]:
    """(`Kind/name`, pod spec, pod annotations) of every pod the rendered objects would create."""
    out = []
    for obj in objects:
        kind = obj.get("kind")
        name = f"{kind}/{(obj.get('metadata') or {}).get('name', '?')}"
        if kind == "Pod":
            out.append((name, obj.get("spec") or {}, (obj.get("metadata") or {}).get("annotations") or {}))
        elif kind in ("StatefulSet", "Deployment", "DaemonSet", "ReplicaSet", "Job"):
            template = (obj.get("spec") or {}).get("template") or {}
            out.append((name, template.get("spec") or {}, (template.get("metadata") or {}).get("annotations") or {}))
    return out


def all_violations(pods: Iterable[tuple[str, dict, dict]]) -> list[str]:
    """For (name, pod spec, pod annotations) triples: every violation prefixed by its pod."""
    return [f"{name}: {v}" for name, spec, annotations in pods for v in restricted_violations(spec, annotations)]
