"""One real local cluster for the whole session (scripts/tfmw/devcluster: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, CoreDNS from their pinned Go builds, and two real
nodes: kubelet, containerd, kube-proxy) running the project's own worker image, built here
from the Dockerfile when its sources changed; each test works in a namespace of its own and
leaves nothing running behind it. The modules with a cluster of their own (`own_cluster`) run
beside this one, in the suite's side lane (tests/support/lanes.py), started once it is up."""

from __future__ import annotations

import os
import shutil

import pytest
from clusterkit import (
    Cluster,
    build_ahead,
    built_ahead,
    delete_namespace,
    new_namespace,
    stop_builds_ahead,
    wait_nodes_fit,
)
from fluxkit import Flux, chart_version, push_chart
from lanes import finish_side_lane, start_side_lane

from tfmw.devcluster import controlplane
from tfmw.devcluster import flux as flux_mod
from tfmw.devcluster import kwok as kwok_mod
from tfmw.devcluster import registry as registry_mod
from tfmw.devcluster.build import ensure_binaries

GPUS_PER_NODE = 2
NODES = 2


@pytest.fixture(scope="session")
def worker_image() -> tuple[str, object]:
    """The CPU worker image (what values/local.yaml pulls) and its docker-save archive,
    built from the Dockerfile on a Debian-made base (no registry is reachable here)."""
    from tfmw.image import build as image

    ref = image.ensure_image(variant="cpu", base="debian", progress=print)
    return ref, image.save_archive(ref, controlplane.IMAGE_CACHE)


@pytest.fixture(scope="session")
def cluster(request, tmp_path_factory, worker_image) -> Cluster:
    if os.geteuid() != 0:
        # Nodes run in network and mount namespaces on a bridge: that needs root. CI runs as
        # root, so there this fixture always runs; a non-root developer sees why these did not.
        start_side_lane(request.config)
        pytest.skip("the local cluster needs root (network and mount namespaces, a bridge)")
    bins = ensure_binaries()
    ref, archive = worker_image
    try:
        state = controlplane.up(
            tmp_path_factory.mktemp("kube") / "state",
            nodes=NODES,
            gpus_per_node=GPUS_PER_NODE,
            bins=bins,
            say=print,
            images=[archive],
        )
    except Exception:
        start_side_lane(request.config)  # its tests need not this cluster: they still run
        raise
    # Up (its slot claimed, its image imported): the side lane's tests start now
    # (tests/support/lanes.py), their cluster beside this one.
    start_side_lane(request.config)
    build_ahead(request.session, tmp_path_factory.getbasetemp())
    try:
        yield Cluster(state, image=ref)
    finally:
        try:
            stop_builds_ahead()
            finish_side_lane(request.config)  # its cluster goes down before this one
        finally:
            _stop(state, tmp_path_factory.getbasetemp() / "kube-logs")


def _stop(state, logs) -> None:
    # The components' and the nodes' logs outlive the cluster, for a failed run.
    shutil.copytree(state.dir / "logs", logs, dirs_exist_ok=True)
    print(f"cluster logs kept in {logs}")
    controlplane.down(state.dir, say=print)


@pytest.fixture
def namespace(cluster, request) -> str:
    name = new_namespace(cluster, request.node.name.split("[")[0].replace("test_", "t-"))
    yield name
    delete_namespace(cluster, name)


@pytest.fixture(scope="module")
def flux(cluster, tmp_path_factory) -> Flux:
    """Flux's source-controller and helm-controller on the shared cluster for a module's tests
    (built ahead, from when the cluster came up: clusterkit.BUILDS_AHEAD), the working tree's
    chart pushed to the cluster's registry for them; at the end, every HelmRelease and
    OCIRepository removed while the controllers still run (Flux.remove_all: the tests'
    namespaces finish), then both stopped, and the registry too unless it was running before."""
    built_ahead("flux")
    state = cluster.state
    had_registry = controlplane.is_ours(state.pids.get("registry", 0), state.created.get("registry"))
    registry = registry_mod.start(state, say=print)
    try:
        controllers = flux_mod.start(state, say=print)
        try:
            repository = push_chart(cluster, registry, tmp_path_factory.mktemp("flux"))
            kit = Flux(cluster, registry, repository, chart_version(), controllers)
            try:
                yield kit
            finally:
                kit.remove_all()
        finally:
            flux_mod.stop(state)
    finally:
        if not had_registry:
            registry_mod.stop(state)


@pytest.fixture(scope="module")
def kwok_nodes(cluster) -> list[kwok_mod.FakeNode]:
    """kwok's fake GPU nodes beside the shared cluster's real ones for a module's tests: 2 blocks
    x 2 racks x 2 nodes of 8 GPUs, tainted so that only a pod that tolerates kwok's taint lands
    there (the kwok controller built ahead, from when the cluster came up); removed after the
    module, kwok stopped."""
    built_ahead("kwok_nodes")
    kwok_mod.start(cluster.state, say=print)
    nodes = kwok_mod.topology(blocks=2, racks_per_block=2, nodes_per_rack=2, gpus=8)
    try:
        kwok_mod.add_nodes(cluster.api, nodes)
        yield nodes
    finally:
        try:
            kwok_mod.remove_nodes(cluster.api, [node.name for node in nodes])
        finally:
            kwok_mod.stop(cluster.state)


_UNFIT: list[str] = []  # set once a test found the shared cluster unable to run pods


@pytest.fixture(autouse=True)
def _nodes_fit(request):
    """Before each test on the shared cluster: its nodes can run pods (2 minutes for one a
    test just restarted; 15 s once the cluster was found broken, so a broken cluster fails
    the rest of the run in minutes, each failure saying why). The node-loss module's cluster
    loses nodes on purpose and is not checked."""
    if "cluster" not in request.fixturenames:
        return
    try:
        wait_nodes_fit(request.getfixturevalue("cluster"), 15 if _UNFIT else 120)
    except AssertionError as err:
        _UNFIT.append(str(err))
        pytest.fail(str(err), pytrace=False)
