"""One real local cluster for the whole session (scripts/kube: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler from their pinned Go builds, plus the node agent);
each test works in a namespace of its own and leaves nothing running behind it."""
from __future__ import annotations

import os
import shutil

import pytest

from scripts.kube import controlplane
from scripts.kube.build import ensure_binaries

from clusterkit import Cluster, delete_namespace, new_namespace

GPUS_PER_NODE = 2


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Cluster:
    if os.geteuid() != 0:
        # Pods run in network namespaces on a bridge: that needs root. CI runs as root, so
        # there this fixture always runs; a non-root developer sees why these did not.
        pytest.skip("the local cluster needs root (network namespaces, a bridge)")
    bins = ensure_binaries()
    state = controlplane.up(tmp_path_factory.mktemp("kube") / "state", nodes=1,
                            gpus_per_node=GPUS_PER_NODE, bins=bins, say=print)
    try:
        yield Cluster(state)
    finally:
        # The components' and the node agent's logs outlive the cluster, for a failed run.
        logs = tmp_path_factory.getbasetemp() / "kube-logs"
        shutil.copytree(state.dir / "logs", logs, dirs_exist_ok=True)
        print(f"cluster logs kept in {logs}")
        controlplane.down(state.dir, say=print)


@pytest.fixture
def namespace(cluster, request) -> str:
    name = new_namespace(cluster, request.node.name.split("[")[0].replace("test_", "t-"))
    yield name
    delete_namespace(cluster, name)
