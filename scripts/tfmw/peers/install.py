"""A peer's controller on the local cluster, installed the way its users install it: its own
kustomize manifests of the pinned version (training-operator's `overlays/standalone`,
JobSet's `config/default`), with only the image pointed at the manager built here
(tfmw.peers.builds) and loaded into every node, and its own webhook certificates (both
generate them in-process with cert-controller into the Secret their manifests name).

Settings that are not the upstream manifests' (printed by the bench, so anyone can rerun it):
- the image: `tfmw.local/<peer>:<version>`, one static binary at /manager, as upstream's;
- JobSet's manager asks for 100m CPU instead of 500m: the local nodes are small (Kueue's
  manager gets the same here, tfmw.devcluster.kueue).

How the API server reaches their webhooks: as for Kueue (tfmw.devcluster.kueue), aggregator
routing sends it to the manager pod's IP, which the host routes to its node.

    python -m tfmw.peers.install install|uninstall tfjob|jobset [--state DIR]   (on a running `make cluster`)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from tfmw.chart.helmkit import ToolError, find_kubectl
from tfmw.devcluster import controlplane, images
from tfmw.devcluster.addoncli import addon_main
from tfmw.devcluster.build import KubeBuildError
from tfmw.devcluster.onebinary import OneBinary, binary_path
from tfmw.k8s.api import Api, ApiError
from tfmw.peers import builds, workloads

JOBSET_CPU_REQUEST = "100m"


class PeerError(Exception):
    """One line: why a peer could not be installed or removed."""


PROBE_NAMESPACE = "default"


@dataclass(frozen=True)
class Peer:
    """A peer controller: its build, where its manifests are in the module, the image name they
    use, its namespace and Deployment, and the spec of the object a dry-run create probes its
    webhook with."""

    key: str  # tfjob | jobset: also the kind of its workload (tfmw.peers.workloads.API)
    build: OneBinary
    overlay: str  # the kustomization users apply, inside the install directory
    upstream_image: str
    namespace: str
    deployment: str
    probe_spec: dict

    @property
    def probe_path(self) -> str:
        return workloads.collection(self.key, PROBE_NAMESPACE)

    @property
    def probe(self) -> dict:
        return workloads.api_object(self.key, "tfmw-probe", self.probe_spec, namespace=PROBE_NAMESPACE)


TFJOB = Peer(
    key="tfjob",
    build=builds.TRAINING_OPERATOR,
    overlay="manifests/overlays/standalone",
    upstream_image="kubeflow/training-operator",
    namespace="kubeflow",
    deployment="training-operator",
    probe_spec={
        "tfReplicaSpecs": {
            "Worker": {"replicas": 1, "template": {"spec": {"containers": [{"name": "tensorflow", "image": "probe"}]}}}
        }
    },
)

JOBSET = Peer(
    key="jobset",
    build=builds.JOBSET,
    overlay="config/default",
    upstream_image="us-central1-docker.pkg.dev/k8s-staging-images/jobset/jobset",
    namespace="jobset-system",
    deployment="jobset-controller-manager",
    probe_spec={
        "replicatedJobs": [
            {
                "name": "w",
                "replicas": 1,
                "template": {
                    "spec": {
                        "template": {
                            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "probe"}]}
                        }
                    }
                },
            }
        ]
    },
)

PEERS = {peer.key: peer for peer in (TFJOB, JOBSET)}


def image_ref(peer: Peer) -> str:
    return f"tfmw.local/{peer.build.name}:{builds.version(peer.build)}"


def kustomization(peer: Peer, ref: str) -> dict:
    """The wrapper kustomization: upstream's, with the image (and JobSet's CPU request) changed (pure)."""
    name, _, tag = ref.rpartition(":")
    wrapper = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [f"../{peer.overlay}"],
        "images": [{"name": peer.upstream_image, "newName": name, "newTag": tag}],
    }
    if peer is JOBSET:
        wrapper["patches"] = [
            {
                "target": {"kind": "Deployment", "name": peer.deployment},
                "patch": yaml.safe_dump(
                    [
                        {
                            "op": "replace",
                            "path": "/spec/template/spec/containers/0/resources/requests/cpu",
                            "value": JOBSET_CPU_REQUEST,
                        }
                    ]
                ),
            }
        ]
    return wrapper


def settings(peer: Peer) -> str:
    """One line: what differs from the upstream install, for the bench's report (pure)."""
    extra = f"; manager CPU request {JOBSET_CPU_REQUEST} (upstream 500m)" if peer is JOBSET else ""
    return (
        f"{peer.build.module} {builds.version(peer.build)}, `kubectl apply --server-side -k` of its "
        f"`{peer.overlay}` with the image {image_ref(peer)} (its manager built here from the Go module){extra}"
    )


def _kubectl(state: controlplane.ClusterState, *args: str, stdin: str | None = None, timeout: float = 300) -> str:
    try:
        kubectl = find_kubectl()
    except ToolError as err:
        raise PeerError(str(err)) from None
    env = dict(os.environ, KUBECONFIG=str(state.kubeconfig))
    proc = subprocess.run([kubectl, *args], input=stdin, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise PeerError(f"kubectl {args[0]} failed: {last}")
    return proc.stdout


def render(state: controlplane.ClusterState, peer: Peer, install_dir: Path) -> str:
    """Upstream's manifests with the wrapper's changes, as YAML (kubectl's built-in kustomize)."""
    wrapper_dir = install_dir / "tfmw"
    wrapper_dir.mkdir(exist_ok=True)
    (wrapper_dir / "kustomization.yaml").write_text(yaml.safe_dump(kustomization(peer, image_ref(peer))))
    return _kubectl(state, "kustomize", str(wrapper_dir))


def install(state: controlplane.ClusterState, peer: Peer, say=print, timeout: float = 300) -> None:
    """The manager's image into every node, the manifests applied, then wait until the
    Deployment is available and the API server reaches its webhook. Idempotent."""
    started = time.monotonic()
    try:
        install_dir = builds.ensure(peer.build, progress=say)
    except KubeBuildError as err:
        raise PeerError(str(err)) from None
    archive = images.one_binary_archive(
        image_ref(peer),
        binary_path(peer.build, install_dir),
        "/manager",
        [],
        "65532:65532",
        controlplane.IMAGE_CACHE,
        peer.build.name,
    )
    controlplane.load_images(state, [archive], say=say)
    manifests = render(state, peer, install_dir)
    _kubectl(state, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=manifests)
    _kubectl(
        state,
        "rollout",
        "status",
        f"deployment/{peer.deployment}",
        "-n",
        peer.namespace,
        f"--timeout={int(timeout)}s",
        timeout=timeout + 30,
    )
    _wait_for_webhook(state.api(), peer, timeout)
    say(f"peers: {peer.key} ({settings(peer)}) ready in {time.monotonic() - started:.0f}s")


def _wait_for_webhook(api: Api, peer: Peer, timeout: float) -> None:
    """Until a dry-run create goes through the peer's webhook: the manager answers only once
    its certificate is generated, in its Secret, and mounted (the kubelet syncs it in up to a
    minute)."""
    deadline, last = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        try:
            api.request("POST", peer.probe_path, peer.probe, query={"dryRun": "All"})
            return
        except ApiError as err:
            last = str(err)
        time.sleep(2)
    raise PeerError(f"the API server does not reach {peer.key}'s webhook after {timeout:.0f}s: {last}")


def uninstall(state: controlplane.ClusterState, peer: Peer, timeout: float = 180) -> None:
    """Everything the manifests created (its CRDs, and every object of them, with it)."""
    install_dir = builds.ensure(peer.build)
    manifests = render(state, peer, install_dir)
    _kubectl(
        state,
        "delete",
        "--ignore-not-found",
        "--wait",
        f"--timeout={int(timeout)}s",
        "-f",
        "-",
        stdin=manifests,
        timeout=timeout + 30,
    )


def main(argv: list[str] | None = None) -> int:
    verbs = {
        "install": lambda state, peer: install(state, PEERS[peer]),
        "uninstall": lambda state, peer: uninstall(state, PEERS[peer]),
    }
    errors = (PeerError, KubeBuildError, ApiError, images.ImageArchiveError, subprocess.TimeoutExpired)
    return addon_main(
        argv,
        "peers",
        __doc__,
        verbs,
        errors,
        prog="python -m tfmw.peers.install",
        add_arguments=lambda parser: parser.add_argument("peer", choices=sorted(PEERS)),
    )


if __name__ == "__main__":
    sys.exit(main())
