"""The worker image on `make cluster`'s nodes: the project's image (tfmw.image's CPU variant,
what values/local.yaml pulls), built when its sources changed and saved as the archive every
node imports, at `up` (unless the cluster already runs, or without it) and at `load`.
"""

from __future__ import annotations

from pathlib import Path

from tfmw.devcluster import controlplane
from tfmw.devcluster.controlplane import ClusterError
from tfmw.image import build as image

IMAGE_VARIANT = "cpu"  # what values/local.yaml (workers.gpus 0) pulls


def worker_image_archive(base: str, dest: Path, say=print) -> Path:
    """The worker image as a docker-save archive, built first when missing or stale."""

    try:
        ref = image.ensure_image(variant=IMAGE_VARIANT, base=base, progress=say)
        return image.save_archive(ref, dest)
    except image.ImageError as err:
        raise ClusterError(f"the worker image: {err}", exit_code=getattr(err, "exit_code", 4)) from None


def check_image_engine() -> None:
    """The nodes run the worker image, which is built here: say so before anything starts."""

    try:
        image.find_engine(None)
    except image.ImageError as err:
        raise ClusterError(
            f"the nodes run the worker image, built here: {err}; or start without it "
            "(python -m tfmw.devcluster up --no-image)",
            exit_code=err.exit_code,
        ) from None


def images_for_up(state_dir: Path, base: str, no_image: bool) -> list[Path]:
    """What `up` imports into the nodes: the worker image's archive, unless asked not to or the
    cluster in `state_dir` already runs (its nodes hold the image; `load` replaces it)."""
    if no_image or controlplane.running_cluster(state_dir):
        return []
    return [worker_image_archive(base, controlplane.IMAGE_CACHE)]


def load(state_dir: Path, base: str) -> None:
    """The current worker image into every node of the running cluster in `state_dir`."""
    state = controlplane.running_cluster(state_dir)
    if state is None:
        raise ClusterError(f"no cluster running in {Path(state_dir).resolve()}: `make cluster` first", exit_code=3)
    controlplane.load_images(state, [worker_image_archive(base, controlplane.IMAGE_CACHE)])
