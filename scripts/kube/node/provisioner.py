"""Dynamic provisioning for the local StorageClass: a claim of that class gets a hostPath
PersistentVolume under the cluster's state folder, pre-bound to the claim (the real
PersistentVolume controller completes the binding); a released volume of ours is deleted
with its folder (reclaimPolicy Delete). Every pod on this machine sees the same folder, so
ReadWriteMany claims work as on an NFS/CephFS class.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from scripts.kube.api import Api, ApiError

PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"


def volume_for(claim: dict, root: Path, storage_class: str, provisioner: str) -> dict:
    """The PersistentVolume that satisfies `claim` (pure)."""
    meta, spec = claim["metadata"], claim.get("spec") or {}
    name = f"pvc-{meta['uid']}"
    size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {PROVISIONED_BY: provisioner}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": storage_class,
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "hostPath": {"path": str(root / name), "type": "DirectoryOrCreate"},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                         "name": meta["name"], "uid": meta["uid"]},
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
            Path(pv["spec"]["hostPath"]["path"]).mkdir(parents=True, exist_ok=True)
            try:
                self.api.create("/api/v1/persistentvolumes", pv)
                self.log(f"provisioned {pv['metadata']['name']} for claim "
                         f"{claim['metadata']['namespace']}/{claim['metadata']['name']}")
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
