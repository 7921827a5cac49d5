"""Flux on the local cluster, for the GitOps tests and `make cluster FLUX=1`: the pinned
source-controller and helm-controller (scripts/tfmw/devcluster/build_flux.py builds both from
their Go modules and copies their CRDs beside them), run as host processes against the API
server, as the control plane itself runs. Flux has no webhooks and no aggregated API, so
nothing in the cluster needs to reach them; what they reach is the API server (the admin
kubeconfig) and the local registry (the chart, pulled by source-controller over TLS with the
cluster's CA: tfmw.devcluster.registry).

- source-controller stores the artifacts it fetched under <state>/flux/storage and serves them
  on a loopback port it also advertises (`--storage-adv-addr`): helm-controller, on the same
  host, downloads the chart from there, as it would from the in-cluster Service.
- Both watch every namespace, without leader election (one of each), their metrics and health
  on free loopback ports; their logs in <state>/logs/flux-*.log. They stop with the cluster
  (controlplane.down stops them with the other host add-ons, HOST_ADDONS) or with `stop`.
- The CRDs (source.toolkit.fluxcd.io/v1, helm.toolkit.fluxcd.io/v2) are created once and left
  in place on `stop`: deleting them while HelmReleases still hold helm-controller's finalizer
  would never finish.

    python -m tfmw.devcluster.flux start|stop [--state DIR]   (on a running `make cluster`)
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from tfmw.devcluster import controlplane, onebinary
from tfmw.devcluster.addoncli import addon_main
from tfmw.devcluster.build import KubeBuildError
from tfmw.devcluster.build_flux import CONTROLLERS, HELM_CONTROLLER, SOURCE_CONTROLLER, crd_files
from tfmw.k8s.api import Api, ApiError

SOURCE_API = "/apis/source.toolkit.fluxcd.io/v1"
HELM_API = "/apis/helm.toolkit.fluxcd.io/v2"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
# What the controllers think their own namespace is (events and defaults name it); nothing runs there.
RUNTIME_NAMESPACE = "flux-system"
READY_TIMEOUT = 60


class FluxError(Exception):
    """One line: why Flux could not start."""


@dataclass(frozen=True)
class Flux:
    artifacts: str  # http://127.0.0.1:<port>: source-controller's artifact server
    versions: dict  # controller name -> pinned version


def directory(state: controlplane.ClusterState) -> Path:
    return state.dir / "flux"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def controller_args(binary: Path, ports: dict[str, int], storage: Path | None) -> list[str]:
    """A controller's command line: its endpoints on loopback ports, every namespace, no
    leader election; source-controller's artifact storage and server when `storage` is given."""
    argv = [
        str(binary),
        f"--metrics-addr=127.0.0.1:{ports['metrics']}",
        f"--health-addr=127.0.0.1:{ports['health']}",
        "--watch-all-namespaces=true",
        "--enable-leader-election=false",
    ]
    if storage is not None:
        address = f"127.0.0.1:{ports['storage']}"
        argv += [f"--storage-path={storage}", f"--storage-addr={address}", f"--storage-adv-addr={address}"]
    return argv


def load(state: controlplane.ClusterState) -> Flux | None:
    try:
        data = json.loads((directory(state) / "flux.json").read_text())
    except (OSError, ValueError):
        return None
    return Flux(data["artifacts"], data["versions"])


def running(state: controlplane.ClusterState) -> Flux | None:
    """This cluster's Flux when both controllers it recorded are still alive."""
    found = load(state)
    alive = all(controlplane.is_ours(state.pids.get(c.name, 0), state.created.get(c.name)) for c in CONTROLLERS)
    return found if found is not None and alive else None


def install_crds(api: Api, files: list[Path], timeout: float = 60) -> None:
    """Create each CRD (kept when it exists) and wait until the API server serves it."""
    names = []
    for path in files:
        for crd in yaml.safe_load_all(path.read_text()):
            if crd:
                api.create_or_keep(CRD_PATH, crd)
                names.append(crd["metadata"]["name"])
    deadline = time.monotonic() + timeout
    for name in names:
        while not _established(api.get_or_none(f"{CRD_PATH}/{name}")):
            if time.monotonic() > deadline:
                raise FluxError(f"the CRD {name} is not Established after {timeout:.0f}s")
            time.sleep(0.5)


def _established(crd: dict | None) -> bool:
    conditions = ((crd or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def _wait_ready(name: str, url: str, proc, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except (urllib.error.URLError, OSError):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise FluxError(f"{name} did not become ready on {url} (its log: {log})") from None
            time.sleep(0.3)


def start(state: controlplane.ClusterState, say=print) -> Flux:
    """This cluster's Flux controllers, built on first use and started if they are not
    running, their CRDs created. Idempotent."""
    found = running(state)
    if found is not None:
        return found
    stop(state)  # one of the two may have died: start both afresh
    started = time.monotonic()
    try:
        installs = {spec.name: onebinary.ensure(spec, progress=say) for spec in CONTROLLERS}
    except KubeBuildError as err:
        raise FluxError(str(err)) from None
    install_crds(state.api(), [f for spec in CONTROLLERS for f in crd_files(installs[spec.name])])
    root = directory(state)
    (root / "storage").mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(root),  # helm-controller's Helm caches and config, never the user's
        "KUBECONFIG": str(state.kubeconfig),
        "RUNTIME_NAMESPACE": RUNTIME_NAMESPACE,
    }
    artifacts = ""
    for spec in (SOURCE_CONTROLLER, HELM_CONTROLLER):  # helm-controller needs the artifact server
        ports = {"metrics": _free_port(), "health": _free_port(), "storage": _free_port()}
        storage = root / "storage" if spec is SOURCE_CONTROLLER else None
        argv = controller_args(onebinary.binary_path(spec, installs[spec.name]), ports, storage)
        log = state.dir / "logs" / f"{spec.name}.log"
        proc = controlplane.spawn(argv, log, env=env)
        state.pids[spec.name], state.created[spec.name] = proc.pid, controlplane.started_at(proc.pid)
        state.save()
        _wait_ready(spec.binary, f"http://127.0.0.1:{ports['health']}/readyz", proc, log)
        if storage is not None:
            artifacts = f"http://127.0.0.1:{ports['storage']}"
    versions = {spec.name: onebinary.read_pins(spec).version for spec in CONTROLLERS}
    flux = Flux(artifacts, versions)
    (root / "flux.json").write_text(json.dumps(flux.__dict__))
    say(
        f"flux: source-controller {versions[SOURCE_CONTROLLER.name]} and helm-controller "
        f"{versions[HELM_CONTROLLER.name]} running on the host ({time.monotonic() - started:.0f}s), "
        f"watching every namespace; logs in {state.dir / 'logs'}/flux-*.log"
    )
    return flux


def stop(state: controlplane.ClusterState) -> None:
    """Both controllers stopped (their CRDs and objects stay)."""
    for spec in (HELM_CONTROLLER, SOURCE_CONTROLLER):
        controlplane.stop_pid(state.pids.get(spec.name, 0), state.created.get(spec.name), 10.0)
    shutil.rmtree(directory(state), ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    verbs = {"start": start, "stop": stop}
    return addon_main(argv, "flux", __doc__, verbs, (FluxError, ApiError), without_api=("stop",))


if __name__ == "__main__":
    sys.exit(main())
