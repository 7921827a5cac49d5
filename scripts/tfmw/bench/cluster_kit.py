"""A figure's own local cluster (figures 6, 7, 10 and 11): its binaries and the worker image built
once and not timed, `make cluster` up and down, a fresh namespace per measurement, helm against
it, waits, and one line on a failed run's pods."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from entrypoint.loglines import progress_step
from tfmw.chart import helmkit
from tfmw.chart.helmkit import ToolError
from tfmw.deploy import install
from tfmw.devcluster import controlplane
from tfmw.devcluster.build import KubeBuildError, ensure_binaries
from tfmw.image import build as image
from tfmw.k8s import namespaces
from tfmw.k8s.api import ApiError, ns_path

from .procs import BenchError

POLL = 0.1
PODS_GONE_SECONDS = 180  # a measurement's namespace, deleted: until its pods no longer share the CPUs
NAN = float("nan")


def run_sets(run_id: str) -> list[str]:
    """The --set items of every measured run, cluster and local alike: a short run whose first
    step is logged; each run a fresh id (pure)."""
    return [
        "training.config.steps=10",
        "training.config.logEverySteps=1",
        "training.config.checkpoint.everySteps=10",
        f"training.runId={run_id}",
    ]


def has_first_step(log_text: str) -> bool:
    return any(progress_step(line) is not None for line in log_text.splitlines())


# controlplane.load_images says one of these about the worker image (through up()'s `say`).
IMAGE_LINE = re.compile(
    r"cluster: image (?P<refs>\S.*?) (?:imported into (?P<nodes>\d+) node\(s\) in "
    r"(?P<seconds>[0-9.]+)s|(?P<cached>already in every node))"
)


@dataclass(frozen=True)
class Up:
    """One `make cluster` (controlplane.up): its ready_seconds, the call's wall time, and what
    it said about the worker image: "imported" (import_seconds: up()'s own figure, every node
    importing in parallel), "cached" (already in every node's containerd) or "unknown"."""

    ready_seconds: float
    wall_seconds: float
    image: str = "unknown"
    import_seconds: float = NAN
    import_nodes: int = 0


def image_import(lines: list[str]) -> tuple[str, float, int]:
    """(image, import seconds, nodes) from up()'s `say` lines: the last line about the worker
    image decides; ("unknown", nan, 0) when up() said nothing about it (pure)."""
    found = ("unknown", NAN, 0)
    for line in lines:
        match = IMAGE_LINE.search(line)
        if match is None:
            continue
        found = (
            ("cached", NAN, 0)
            if match["cached"]
            else ("imported", float(match["seconds"].rstrip(".")), int(match["nodes"]))
        )
    return found


def make_up(ready_seconds: float, wall_seconds: float, lines: list[str]) -> Up:
    image, seconds, nodes = image_import(lines)
    return Up(ready_seconds, wall_seconds, image, seconds, nodes)


def cluster_parts(log=print, figure: str = "figure 6") -> tuple[dict, Path]:
    """(the cluster's binaries, the worker image's archive), built once and not timed; refuses
    a run without root (the nodes need network namespaces and a bridge)."""
    if os.geteuid() != 0:
        raise BenchError(
            f"{figure}: the local cluster needs root (network namespaces, a bridge); run make bench as root"
        )
    try:
        bins = ensure_binaries(progress=lambda line: log(f"  {figure}: {line}"))
    except KubeBuildError as err:
        raise BenchError(f"{figure}: the cluster binaries could not be built: {err}") from None
    try:
        # The nodes run the worker image: `up` imports it into a node unless the node's
        # containerd cache already holds that image id.
        ref = image.ensure_image(variant="cpu", base="debian", progress=lambda line: log(f"  {figure}: {line}"))
        return bins, image.save_archive(ref, controlplane.IMAGE_CACHE)
    except image.ImageError as err:
        raise BenchError(f"{figure}: the worker image could not be built: {err}") from None


def cluster_up(controlplane, state_dir: str, bins: dict, archive, log=print, figure: str = "figure 6", nodes: int = 2):
    """(state, Up) of one `make cluster` of `nodes` nodes, with what up() said about the worker image."""
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        log(f"  {figure}: {line}")

    log(f"  {figure}: make cluster (controlplane.up)")
    started = time.monotonic()
    try:
        state = controlplane.up(state_dir, nodes=nodes, bins=bins, images=[archive], say=say)
    except controlplane.ClusterError as err:
        raise BenchError(f"{figure}: make cluster failed: {err}") from None
    return state, make_up(state.ready_seconds, time.monotonic() - started, said)


def cluster_down(controlplane, state_dir: str, log=print, figure: str = "figure 6") -> float:
    log(f"  {figure}: make cluster-down (controlplane.down)")
    started = time.monotonic()
    controlplane.down(state_dir, say=lambda line: log(f"  {figure}: {line}"))
    return time.monotonic() - started


def checked_args(release: str, namespace: str, sets, verb: str = "install", figure: str = "figure 6") -> list[str]:
    """The helm arguments of a measured release, its values checked as make deploy checks them."""
    try:
        return install.checked_args(release, namespace, list(sets), verb=verb)
    except ToolError as err:
        raise BenchError(f"{figure}: the measured release's values are refused: {err}") from None


def helm_run(state, *args: str, timeout: float = 300, figure: str = "figure 6") -> subprocess.CompletedProcess:
    """`helm <args>` against the figure's cluster; a BenchError saying which figure when it fails."""
    try:
        return helmkit.run_helm(state.kubeconfig, *args, timeout=timeout)
    except helmkit.HelmFailed as err:
        raise BenchError(f"{figure}: {err}") from None


def wait_until(predicate, timeout: float, what: str, figure: str = "figure 6"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(POLL)
    raise BenchError(f"{figure}: {what} not within {timeout:g}s")


@contextlib.contextmanager
def fresh_namespace(state, name: str, log=print, figure: str = "figure 6"):
    """A fresh namespace (its default ServiceAccount there), deleted afterwards with every pod
    stopped before the next measurement: they would share its CPUs."""

    api = state.api("admin")
    try:
        ready = namespaces.create(api, name)
    except ApiError as err:
        raise BenchError(f"{figure}: namespace {name} cannot be made: {err}") from None
    try:
        if not ready:
            raise BenchError(
                f"{figure}: the default ServiceAccount of namespace {name} "
                f"not within {namespaces.SERVICE_ACCOUNT_SECONDS:g}s"
            )
        yield api
    finally:
        namespaces.delete(api, name)
        if not namespaces.wait_pods_gone(api, name, PODS_GONE_SECONDS, interval=POLL):
            log(f"  {figure}: the pods of namespace {name} to stop not within {PODS_GONE_SECONDS:g}s")


def pods_line(state, namespace: str, figure: str = "figure 6") -> str:
    """One line per pod of `namespace`: its phase and its container's state (for a failed run)."""

    try:
        pods = state.api("admin").items(ns_path(namespace, "pods"))
    except Exception as err:  # only a diagnostic
        return f"  {figure}: the pods of {namespace} could not be listed: {err}"
    parts = []
    for pod in pods:
        status = pod.get("status") or {}
        containers = [f"{c.get('name')}: {json.dumps(c.get('state'))}" for c in status.get("containerStatuses") or []]
        parts.append(f"{pod['metadata']['name']} {status.get('phase')} {'; '.join(containers)}")
    return f"  {figure}: pods: " + (" | ".join(parts) or "none")
