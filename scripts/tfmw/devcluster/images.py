"""Images the local cluster's nodes need besides the worker image: the pod sandbox ("pause")
image and, with Kueue, Kueue's manager image, each written here as a docker-save archive that
`ctr images import` reads.

No registry is reachable, so registry.k8s.io/pause cannot be pulled. A sandbox container
only has to hold the pod's namespaces and reap zombies: catatonit (Debian's package, a
static binary podman itself uses as its pause process) in `-P` mode does exactly that.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

CATATONIT = "catatonit"


class ImageArchiveError(Exception):
    pass


def _layer(files: dict[str, tuple[bytes, int]]) -> bytes:
    """An uncompressed layer tar: path -> (content, mode), owned by root, time 0."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def docker_archive(ref: str, layer: bytes, entrypoint: list[str], user: str = "65535:65535") -> bytes:
    """A docker-save (`docker-archive`) tar holding one single-layer linux/amd64 image."""
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "created": "1970-01-01T00:00:00Z",
            "config": {"Entrypoint": entrypoint, "User": user, "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "scripts/tfmw/devcluster/images.py"}],
        },
        sort_keys=True,
    ).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    layer_name = diff_id.split(":")[1] + "/layer.tar"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [ref], "Layers": [layer_name]}]).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in ((layer_name, layer), (config_name, config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def pause_archive(ref: str, dest_dir: Path) -> Path:
    """The sandbox image `ref` as an archive in dest_dir (made once; same input, same bytes)."""
    binary = shutil.which(CATATONIT)
    if binary is None:
        raise ImageArchiveError(
            "catatonit (the pod sandbox's pause process) is not installed: apt-get install catatonit"
        )
    return one_binary_archive(ref, Path(binary), "/pause", ["-P"], "65535:65535", dest_dir, "pause")


def one_binary_archive(ref: str, binary: Path, at: str, args: list[str], user: str, dest_dir: Path, stem: str) -> Path:
    """An image `ref` holding one static binary at `at`, run as `user`, as an archive in
    dest_dir (made once; same input, same bytes): what distroless/static images hold."""
    archive = docker_archive(ref, _layer({at: (binary.read_bytes(), 0o755)}), [at, *args], user)
    dest_dir.mkdir(parents=True, exist_ok=True)
    path = dest_dir / f"{stem}-{hashlib.sha256(archive).hexdigest()[:12]}.tar"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(archive)
        tmp.replace(path)
    return path
