"""Dynamic provisioning for the local StorageClass: a claim of that class gets a hostPath
PersistentVolume under the cluster's state folder, pre-bound to the claim (the real
PersistentVolume controller completes the binding); a released volume of ours is deleted
with its folder (reclaimPolicy Delete). Every node of the cluster is on this machine and
sees the same folder, so ReadWriteMany claims work as on an NFS/CephFS class.

The kubelet applies no fsGroup to hostPath volumes, so a volume's folder is made
world-writable (as rancher's local-path-provisioner does): the workers run as UID 1000.

Runs as its own process beside the control plane (`python -m tfmw.devcluster.provisioner
--state DIR`, started by scripts/tfmw/devcluster/controlplane.py), with the cluster-services identity.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

from tfmw.devcluster.controlplane import PROVISIONER, STORAGE_CLASS, ClusterState
from tfmw.k8s.api import Api, ApiError

PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"


def volume_for(claim: dict, root: Path, storage_class: str, provisioner: str) -> dict:
    """The PersistentVolume that satisfies `claim` (pure)."""
    meta, spec = claim["metadata"], claim.get("spec") or {}
    name = f"pvc-{meta['uid']}"
    size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {PROVISIONED_BY: provisioner}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": storage_class,
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "hostPath": {"path": str(root / name), "type": "DirectoryOrCreate"},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
        },
    }


class Provisioner:
    def __init__(self, api: Api, root: Path, storage_class: str, provisioner: str, log):
        self.api, self.root, self.storage_class, self.provisioner, self.log = api, root, storage_class, provisioner, log

    def sync(self) -> None:
        for claim in self.api.items("/api/v1/persistentvolumeclaims"):
            spec = claim.get("spec") or {}
            if spec.get("storageClassName") != self.storage_class or spec.get("volumeName"):
                continue
            pv = volume_for(claim, self.root, self.storage_class, self.provisioner)
            folder = Path(pv["spec"]["hostPath"]["path"])
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o777)
            try:
                self.api.create("/api/v1/persistentvolumes", pv)
                self.log(
                    f"provisioned {pv['metadata']['name']} for claim "
                    f"{claim['metadata']['namespace']}/{claim['metadata']['name']}"
                )
            except ApiError as err:
                if err.status != 409:
                    raise
        for pv in self.api.items("/api/v1/persistentvolumes"):
            ours = (pv["metadata"].get("annotations") or {}).get(PROVISIONED_BY) == self.provisioner
            if ours and (pv.get("status") or {}).get("phase") == "Released":
                path = (pv["spec"].get("hostPath") or {}).get("path")
                self.api.delete(f"/api/v1/persistentvolumes/{pv['metadata']['name']}")
                if path and Path(path).resolve().is_relative_to(self.root.resolve()):
                    shutil.rmtree(path, ignore_errors=True)
                self.log(f"deleted released volume {pv['metadata']['name']}")


def main(argv: list[str] | None = None) -> int:

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state", type=Path, required=True, help="the cluster's state folder")
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args(argv)
    state = ClusterState.load(args.state)
    if state is None:
        print(f"provisioner: no cluster state in {args.state}", file=sys.stderr)
        return 2
    root = state.dir / "volumes"
    root.mkdir(exist_ok=True)
    stop = threading.Event()
    # The handler hands the stop to a thread: setting an Event the main thread may be
    # waiting on, from the handler itself, can deadlock (its lock is not reentrant).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: threading.Thread(target=stop.set).start())

    def log(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)

    provisioner = Provisioner(state.api("cluster-services"), root, STORAGE_CLASS, PROVISIONER, log)
    while not stop.is_set():
        try:
            provisioner.sync()
        except (ApiError, OSError) as err:
            log(f"sync failed (retrying): {err}")
        stop.wait(args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
